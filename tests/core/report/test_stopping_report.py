"""What the record says of early stopping, read back by `dse show`, `dse report` (text and
JSON) and `dse export` in real subprocesses, from a record written row by row through
``Store.commit(Batch)`` (``support.stopping``: trials run to the end, stopped at rungs 1 and
3, promoted from rung 1 and resumed) and checked against a scan of its rows."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.model._states import AttemptState, TrialStatus
from dse.record._batch import Batch
from dse.report._render import REPORT_KEYS
from support.cli import run_dse, write_plugin
from support.show import undocumented_keys
from support.stopping import MAX_STEP, PLAIN_CAMPAIGN, PLAN, build, loss

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write_plugin(tmp_path)
    build(tmp_path / ".dse")
    return tmp_path


def dse_json(project: Path, *args: str) -> Any:
    proc = run_dse(project, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def dse_lines(project: Path, *args: str) -> list[str]:
    proc = run_dse(project, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def scan(db: Path) -> dict[str, Any]:
    """What the rows say, read with sqlite3 alone: each stopped trial's last stop (rung,
    step) and its attempts' seconds; the completed trials' seconds; decisions by verdict."""
    conn = sqlite3.connect(db)
    try:
        stopped: dict[int, tuple[int, int, float]] = {}
        for row, in conn.execute("SELECT id FROM trials WHERE status = 'stopped'"):
            rung, step = conn.execute(
                "SELECT d.rung, COALESCE(t.stop_step, d.step) FROM decisions d JOIN trials t"
                " ON t.id = d.trial_id WHERE d.trial_id = ? AND d.verdict = 'stop'"
                " ORDER BY d.id DESC LIMIT 1", (row,)).fetchone()
            seconds = sum(json.loads(s)["cpu_s"] for s, in conn.execute(
                "SELECT spend FROM attempts WHERE trial_id = ?", (row,)))
            stopped[row] = (rung, step, seconds)
        full = [json.loads(s)["cpu_s"] for s, in conn.execute(
            "SELECT a.spend FROM attempts a JOIN trials t ON t.id = a.trial_id"
            " WHERE t.status = 'completed'")]
        verdicts = Counter(conn.execute("SELECT verdict, rung FROM decisions").fetchall())
    finally:
        conn.close()
    return {"stopped": stopped, "full": full, "verdicts": verdicts}


def test_the_store_sums_the_stopped_trials_as_a_scan_of_the_rows_does(project: Path) -> None:
    rows = scan(project / ".dse" / "dse.sqlite")
    store = dse.Store(project / ".dse" / "dse.sqlite")
    try:
        tallies = store.stops.stop_tallies(1)
        by_rung: Counter[tuple[int, int]] = Counter()
        seconds: Counter[tuple[int, int]] = Counter()
        for rung, step, s in rows["stopped"].values():
            by_rung[rung, step] += 1
            seconds[rung, step] += s
        assert {(t.rung, t.step): t.trials for t in tallies} == by_rung
        assert {(t.rung, t.step): t.spend.cpu_s for t in tallies} == pytest.approx(seconds)
        trials, spend = store.stops.completed_spend(1)
        full = sum(rows["full"])
        assert (trials, spend.wall_s, spend.cpu_s, spend.node_s) == (2, full, full, full)
        assert spend.money == pytest.approx(full / 100)
        counts = store.stops.decision_counts(1)
        assert counts == {k: n for k, n in rows["verdicts"].items() if k[0] != "continue"}
        assert store.stops.stopping_rule(1) == ("asha", "1")
    finally:
        store.close()
    # The plan itself: 2 stopped at rung 1 then promoted, 3 ended stopped.
    assert len(rows["stopped"]) == sum(p.status is TrialStatus.STOPPED for p in PLAN) == 3


def test_show_says_where_and_why_a_stopped_trial_stopped(project: Path) -> None:
    doc = dse_json(project, "show", "es:5")
    stopping = doc["ended"]["stopping"]
    assert doc["ended"]["outcome"] == "stopped"
    assert [(d["verdict"], d["rung"], d["attempt"]) for d in stopping["decisions"]] == [
        ("stop", 1, 1), ("promote", 1, 1), ("stop", 3, 2)]
    last = stopping["decisions"][-1]
    assert stopping["stopped"] == last
    assert (last["step"], last["value"], last["cutoff"], last["peers"], last["rule"],
            last["version"], last["compared"], last["reason"]) == (
        3, loss(5, 3), 1.0, 1, "asha", "1", [[1, 1.0]], "stop at rung 3")
    # The promotion says where the next attempt resumed: its first progress point.
    assert stopping["decisions"][1]["resumed_step"] == 2
    assert [d["resumed_step"] for d in stopping["decisions"][::2]] == [None, None]
    assert (doc["concluded"]["step"], doc["concluded"]["max_step"]) == (3, MAX_STEP)
    assert doc["concluded"]["metrics"] == {"loss": loss(5, 3)}

    lines = dse_lines(project, "show", "es:5")
    assert ("  stopped       at rung 1 (step 1 of attempt 1): value 5, cutoff 1, 1 peer"
            " (asha 1)") in lines
    assert ("  promoted      at rung 1 (step 1 of attempt 1): value 5, cutoff 1, 1 peer"
            " (asha 1); resumed at step 2 in attempt 2") in lines
    stop = lines.index("  STOPPED       at rung 3 (step 3 of attempt 2): value 1.66667, cutoff 1,"
                       " 1 peer (asha 1)")
    assert lines[stop + 1] == "                reason: stop at rung 3"
    assert any(line.startswith("  fidelity      the metrics are from step 3 of 9")
               for line in lines)


def test_show_of_a_promoted_trial_that_ran_to_the_end_and_of_one_never_compared(
    project: Path,
) -> None:
    doc = dse_json(project, "show", "es:4")
    assert doc["ended"]["outcome"] == "completed"
    assert doc["ended"]["stopping"]["stopped"] is None
    assert [d["verdict"] for d in doc["ended"]["stopping"]["decisions"]] == [
        "stop", "promote", "continue"]
    assert doc["concluded"]["step"] is None
    lines = dse_lines(project, "show", "es:4")
    assert "  passed        rung 3 (asha 1)" in lines
    assert not any(line.startswith("  STOPPED") for line in lines)
    assert dse_lines(project, "show", "es:1").count("  passed        rungs 1, 3 (asha 1)") == 1
    failed = dse_json(project, "show", "es:6")
    assert failed["ended"]["stopping"] is None
    assert not any("fidelity" in line or "stopped" in line
                   for line in dse_lines(project, "show", "es:6"))


def expected_saved_s() -> float:
    """For each trial of the plan that ended stopped at step s, its seconds x (9/s - 1)."""
    total = 0.0
    for plan in PLAN:
        if plan.status is TrialStatus.STOPPED:
            step = [d for d in plan.decisions if d.verdict == "stop"][-1].rung
            total += sum(a.seconds for a in plan.attempts) * (MAX_STEP / step - 1)
    return total


def test_report_json_has_the_stopping_section(project: Path) -> None:
    (run,) = dse_json(project, "report", "--workspace", ".dse")["runs"]
    stopping = run["stopping"]
    assert (stopping["rule"], stopping["version"], stopping["metric"], stopping["direction"],
            stopping["max_step"]) == ("asha", "1", "loss", "minimize", MAX_STEP)
    assert (stopping["ended_stopped"], stopping["promotions"], stopping["to_end"]) == (3, 2, 2)
    rungs = {r["rung"]: r for r in stopping["rungs"]}
    assert {k: (r["stopped"], r["promoted"], r["ended"]) for k, r in rungs.items()} == {
        1: (3, 2, 1), 3: (2, 0, 2)}
    hours = 1 / 3600
    assert rungs[1]["spent"]["cpu_hours"] == pytest.approx(10 * hours)
    assert rungs[3]["spent"]["cpu_hours"] == pytest.approx(60 * hours)
    assert stopping["to_end_spent"]["cpu_hours"] == pytest.approx(180 * hours)
    assert stopping["stopped_spent"]["money"] == pytest.approx(0.70)
    assert expected_saved_s() == 200.0
    assert stopping["saved_estimate"]["cpu_hours"] == pytest.approx(200 * hours)
    assert stopping["saved_estimate"]["money"] == pytest.approx(2.00)
    assert "estimate" in stopping["saved_method"]
    # What the rungs and the full runs spent, with the failure's, is what the run spent.
    failed = 5 * hours
    assert sum(r["spent"]["cpu_hours"] for r in stopping["rungs"]) + failed + stopping[
        "to_end_spent"]["cpu_hours"] == pytest.approx(run["spent"]["cpu_hours"])
    # The three numbers count a stopped trial as a finished, usable result.
    assert run["trials"]["stopped"] == 3
    assert (run["finished"], run["effective"]) == (6, 5)
    assert run["cost_per_effective"] == pytest.approx(run["spent"]["money"] / 5)


def test_report_json_keys_are_listed_in_its_help(project: Path) -> None:
    (run,) = dse_json(project, "report", "--workspace", ".dse")["runs"]
    stopping = run["stopping"]
    keys = set(stopping) | set(stopping["rungs"][0])
    listed = set(re.findall(r"[a-z_]+", REPORT_KEYS))
    assert keys - listed == set()


def test_report_text_has_a_line_per_rung_and_the_estimate(project: Path) -> None:
    lines = dse_lines(project, "report", "--workspace", ".dse")
    assert ("  stopping     asha 1 on loss (minimize), a full run is 9 steps: 3 trials ended"
            " stopped, 2 promoted, 2 ran to the end") in lines
    assert ("  rung 1       3 stopped, 2 promoted; 1 ended here, spent 0.00278 cpu-hours,"
            " 0.10 USD, attempts 10.0s") in lines
    assert ("  rung 3       2 stopped, 0 promoted; 2 ended here, spent 0.0167 cpu-hours,"
            " 0.60 USD, attempts 1m00s") in lines
    assert ("  to the end   2 trials, spent 0.05 cpu-hours, 1.80 USD, attempts 3m00s") in lines
    saved = lines.index("  saved        about 0.0556 cpu-hours, 2.00 USD, attempts 3m20s")
    assert "estimate" in lines[saved + 1]
    assert "  effective    5 results/h (5 usable)" in lines
    assert "  throughput   6 trials/h (6 finished)" in lines


def test_an_invalidated_stopped_trial_is_no_usable_result(project: Path) -> None:
    done = run_dse(project, "invalidate", "--trial", "es:2", "--reason", "bad node")
    assert done.returncode == 0, done.stderr
    (run,) = dse_json(project, "report", "--workspace", ".dse")["runs"]
    assert (run["finished"], run["effective"]) == (6, 4)
    (status,) = dse_json(project, "status", "--workspace", ".dse")
    assert (status["stopped"], status["completed"]) == (3, 2)


def test_a_run_without_a_stopping_rule_has_no_section(tmp_path: Path) -> None:
    write_plugin(tmp_path)
    (tmp_path / "campaign.toml").write_text(PLAIN_CAMPAIGN)
    assert run_dse(tmp_path, "run", "campaign.toml").returncode == 0
    (run,) = dse_json(tmp_path, "report", "--workspace", ".dse")["runs"]
    assert run["stopping"] is None
    lines = dse_lines(tmp_path, "report", "--workspace", ".dse")
    assert not any(line.startswith(("  stopping", "  rung", "  saved")) for line in lines)
    assert dse_json(tmp_path, "show", "plain:1")["ended"]["stopping"] is None


def test_every_key_of_the_stopping_record_is_documented(project: Path) -> None:
    proc = run_dse(project, "export", "es", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    export = json.loads(proc.stdout)
    stopped = [t for t in export["trials"] if t["ended"]["stopping"]]
    assert len(stopped) == 5
    assert undocumented_keys(export) == []


def scanned_totals(db: Path, run: int) -> dict[str, Any]:
    """The stopping summary as a scan of the rows says it: stopped trials by the (rung, step)
    of their latest stop with their attempts' CPU seconds; completed trials and theirs; stop
    and promote decisions by rung."""
    conn = sqlite3.connect(db)
    try:
        ended: dict[tuple[int, int], list[float]] = {}
        completed = [0, 0.0]
        for row, status in conn.execute(
                "SELECT id, status FROM trials WHERE campaign_id = ?", (run,)):
            cpu = sum(json.loads(s)["cpu_s"] for s, in conn.execute(
                "SELECT spend FROM attempts WHERE trial_id = ? AND spend IS NOT NULL", (row,)))
            if status == "stopped":
                rung, step = conn.execute(
                    "SELECT rung, step FROM decisions WHERE trial_id = ? AND verdict = 'stop'"
                    " ORDER BY id DESC LIMIT 1", (row,)).fetchone()
                (stop_step,) = conn.execute("SELECT stop_step FROM trials WHERE id = ?",
                                            (row,)).fetchone()
                entry = ended.setdefault((rung, stop_step or step), [0, 0.0])
                entry[0] += 1
                entry[1] += cpu
            elif status == "completed":
                completed[0] += 1
                completed[1] += cpu
        counts = dict(Counter(conn.execute(
            "SELECT verdict, rung FROM decisions WHERE campaign_id = ? AND verdict != 'continue'",
            (run,)).fetchall()))
    finally:
        conn.close()
    return {"ended": {k: (int(n), pytest.approx(s)) for k, (n, s) in ended.items()},
            "completed": (int(completed[0]), pytest.approx(completed[1])), "counts": counts}


def summarized(store: dse.Store, run: int) -> dict[str, Any]:
    trials, spend = store.stops.completed_spend(run)
    return {"ended": {(t.rung, t.step): (t.trials, t.spend.cpu_s)
                      for t in store.stops.stop_tallies(run)},
            "completed": (trials, spend.cpu_s), "counts": store.stops.decision_counts(run)}


class Passes:
    """Commits a run's changes one pass at a time, as the engine does."""

    def __init__(self, store: dse.Store, run: int) -> None:
        self.store, self.run, self.batch = store, run, Batch()
        self.attempts: dict[tuple[int, int], int] = {}
        self.step: int | None = None
        """The step a trial ends stopped at (None: the step of its stop decision)."""

    def start(self, row: int, attempt: int) -> None:
        self.attempts[row, attempt] = self.store.new_attempt_id()
        self.batch.add_attempt(row=self.attempts[row, attempt], trial=row, attempt=attempt,
                               backend="probe", state=AttemptState.RUNNING, submitted_at=0.0)

    def end(self, row: int, attempt: int, seconds: float, status: TrialStatus | None) -> None:
        self.batch.end_attempt(row=self.attempts[row, attempt], state=AttemptState.SUCCEEDED,
                               started_at=0.0, ended_at=seconds,
                               spend={"wall_s": seconds, "cpu_s": seconds})
        if status is not None:
            stopped = status is TrialStatus.STOPPED
            self.batch.end_trial(row=row, status=status, ended_at=seconds, metrics={"loss": 1.0},
                                 score=None if stopped else 1.0,
                                 step=self.step if stopped else None)

    def decide(self, row: int, verdict: str, rung: int, attempt: int = 1) -> None:
        self.batch.add_decision(campaign=self.run, row=row, attempt=attempt, rule="asha",
                                version="1", verdict=verdict, rung=rung, step=rung, value=1.0,
                                cutoff=0.5, peers=1, compared="[[1, 0.5]]", reason="r",
                                bracket=None, at=0.0)

    def commit(self) -> None:
        self.store.commit(self.batch)
        assert summarized(self.store, self.run) == scanned_totals(self.store.path, self.run)


def test_the_stop_summary_agrees_with_the_rows_after_every_pass_and_a_migration(
    tmp_path: Path,
) -> None:
    store = dse.Store(tmp_path / "dse.sqlite")
    run = store.create_campaign(name="es", source=None, spec={}, agent="a==1",
                                backend="probe==1", mode="rolling", max_parallelism=4, now=0.0)
    passes = Passes(store, run)
    rows = [store.new_trial_id() for _ in range(5)]
    for n, row in enumerate(rows, 1):
        passes.batch.add_trial(row=row, campaign=run, number=n, proposal=n, wave=1,
                               config_hash=f"h{n}", params_json="{}",
                               status=TrialStatus.RUNNING, created_at=0.0)
        passes.start(row, 1)
    passes.end(rows[0], 1, 50.0, TrialStatus.COMPLETED)  # ends before the run's first decision
    passes.commit()
    passes.decide(rows[1], "continue", 1)
    passes.decide(rows[2], "stop", 1)  # the decision first, the stop a pass later
    passes.commit()
    passes.step = 2  # it reported one more step before its cancel took
    passes.end(rows[2], 1, 3.0, TrialStatus.STOPPED)
    passes.step = None
    passes.decide(rows[3], "stop", 1)
    passes.end(rows[3], 1, 4.0, TrialStatus.STOPPED)  # the stop and its decision in one pass
    passes.commit()
    passes.decide(rows[3], "promote", 1)  # promoted: running again, a second attempt
    passes.batch.end_trial(row=rows[3], status=TrialStatus.RUNNING, ended_at=None)
    passes.start(rows[3], 2)
    passes.commit()
    passes.decide(rows[3], "stop", 3, attempt=2)
    passes.end(rows[3], 2, 6.0, TrialStatus.STOPPED)
    passes.end(rows[1], 1, 40.0, TrialStatus.COMPLETED)
    passes.commit()
    # The backend's accounting comes late: the stopped trial's spend changes.
    passes.batch.set_attempt_spend(row=passes.attempts[rows[2], 1], spend={"wall_s": 9.0,
                                                                       "cpu_s": 9.0})
    passes.commit()
    passes.decide(rows[2], "stop", 3)  # a stop recorded after the trial was stopped
    passes.commit()
    passes.batch.end_trial(row=rows[2], status=TrialStatus.STOPPED, ended_at=9.0, step=5)
    passes.commit()  # the step of a stopped trial changes
    assert summarized(store, run) == {
        "ended": {(3, 3): (1, 10.0), (3, 5): (1, 9.0)}, "completed": (2, 90.0),
        "counts": {("stop", 1): 2, ("stop", 3): 2, ("promote", 1): 1}}
    # A record of schema 14 (before the summary) is migrated: the summary is rebuilt.
    before = summarized(store, run)
    store.close()
    conn = sqlite3.connect(tmp_path / "dse.sqlite")
    conn.executescript("DROP TABLE stop_totals; UPDATE meta SET value = '14'"
                       " WHERE key = 'schema_version';")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"
                                " AND name LIKE 'stop_%'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    conn.commit()
    conn.close()
    store = dse.Store(tmp_path / "dse.sqlite")
    try:
        assert summarized(store, run) == before
        passes = Passes(store, run)
        passes.attempts = {(rows[4], 1): store.reads.attempts(run, trials=[rows[4]])[0].id}
        passes.decide(rows[4], "stop", 1)
        passes.end(rows[4], 1, 2.0, TrialStatus.STOPPED)
        passes.commit()
    finally:
        store.close()


def test_a_value_that_was_not_a_finite_number_is_said_so(project: Path) -> None:
    store = dse.Store(project / ".dse" / "dse.sqlite")
    try:
        row = store.reads.find_trial("es:6")[1].id
        batch = Batch()
        batch.add_decision(campaign=1, row=row, attempt=1, rule="asha", version="1",
                           verdict="stop", rung=2, step=2, value=None, cutoff=1.0, peers=3,
                           compared="[]", reason="NaN is the worst", bracket=None, at=2.0)
        store.commit(batch)
    finally:
        store.close()
    lines = dse_lines(project, "show", "es:6")
    assert ("  stopped       at rung 2 (step 2 of attempt 1): value not a finite number (the"
            " worst), cutoff 1, 3 peers (asha 1)") in lines
    decision = dse_json(project, "show", "es:6")["ended"]["stopping"]["decisions"][0]
    assert decision["value"] is None
