"""Early stopping on real processes: a workload that checkpoints and reports its learning
curve is stopped by each rule with the decision in the record; a stopped trial promoted later
resumes from its checkpoint (no step is run twice); a stopped trial is a result, not a
failure, and is not retried."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import dse
from support.resumable import resumable_workload, steps_run

CAMPAIGN = """
[campaign]
name = "es"
agent = "grid"
backend = "local"
max_parallelism = {parallel}
mode = "rolling"
poll_interval = ["10ms", "40ms"]

[[objectives]]
metric = "loss"

[environment]
command = ["{python}", "w.py"]
time_limit = "60s"

[space]
x = {{ type = "categorical", choices = {choices} }}

[stopping]
rule = "{rule}"
max_step = 9
{extra}
"""



def run(tmp_path: Path, *, rule: str, choices: list[int], parallel: int = 1,
        extra: str = "", step_s: float = 0.12) -> sqlite3.Connection:
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(
        python=sys.executable, rule=rule, choices=json.dumps(choices), parallel=parallel,
        extra=extra))
    (tmp_path / "w.py").write_text(resumable_workload(0.12))
    env = dict(os.environ, STEP_S=str(step_s))
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")


def trials(db: sqlite3.Connection) -> dict[int, dict[str, Any]]:
    out = {}
    for number, x, status, step, message, metrics in db.execute(
        "SELECT number, json_extract(params, '$.x'), status, stop_step, message, metrics"
        " FROM trials ORDER BY number"
    ):
        out[number] = {"x": x, "status": status, "step": step, "message": message,
                       "metrics": json.loads(metrics) if metrics else None}
    return out


def decisions(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT t.number, d.verdict, d.rung, d.step, d.value, d.cutoff, d.peers, d.rule,"
        " d.rule_version, d.compared FROM decisions d JOIN trials t ON t.id = d.trial_id"
        " ORDER BY d.id").fetchall()


def trial_steps(tmp_path: Path, number: int) -> list[tuple[int, int]]:
    return steps_run(tmp_path / ".dse" / "es" / "run-1" / f"{number:06d}")


def test_asha_stops_the_worse_trials_and_promotes_one_whose_peers_did_worse(
    tmp_path: Path,
) -> None:
    # Trial 2 (x=3: 1 + 3/step) reaches rung 1 after trial 1 (x=2: 2 + 1/step), the best:
    # with two trials there, only the best goes on, so it is stopped. Then worse trials
    # arrive: with six at rung 1, the best two are ASHA's to promote — and trial 2 is second.
    # Resumed, it beats trial 1 at rung 3 (2.0 against 2.33) and runs to the end, the best.
    db = run(tmp_path, rule="asha", choices=[2, 3, 10, 11, 12, 13, 14, 15])
    ended = trials(db)

    assert ended[1]["status"] == "completed"
    assert ended[2]["status"] == "completed", ended[2]
    for number in range(3, 9):
        assert ended[number]["status"] == "stopped", ended[number]
        assert ended[number]["message"].startswith("stopped at step"), ended[number]
        # Its last reported metrics, and the step they are from.
        step = ended[number]["step"]
        assert step is not None
        assert 1 <= step < 9
        x = ended[number]["x"]
        assert ended[number]["metrics"] == {"loss": pytest.approx(x + 1 / step)}

    made = decisions(db)
    stops = [d for d in made if d[1] == "stop"]
    promotes = [d for d in made if d[1] == "promote"]
    assert {d[0] for d in stops} >= {2, 3, 4, 5, 6, 7, 8}
    assert [d[0] for d in promotes] == [2]
    number, _, rung, step, value, cutoff, peers, rule, version, compared = promotes[0]
    # From rung 1, or rung 3 if the cancel landed after it reported step 3 (a loaded machine).
    assert (rule, version) == ("asha", "1")
    assert rung in (1, 3)
    assert value == pytest.approx(1 + 3 / step)
    assert peers >= (5 if rung == 1 else 1)
    assert cutoff >= value
    assert next(n for n, _ in json.loads(compared)) == 1  # the best peer first
    stop_2 = next(d for d in stops if d[0] == 2)
    assert stop_2[2] == 1
    assert stop_2[6] >= 1
    assert stop_2[5] == pytest.approx(3.0)
    best = db.execute("SELECT number FROM trials WHERE score IS NOT NULL ORDER BY score"
                      " LIMIT 1").fetchone()
    assert best == (2,)

    # Promoted: a second attempt, resumed from the checkpoint; no step ran twice.
    attempts = db.execute(
        "SELECT a.attempt, a.state, a.resumed FROM attempts a JOIN trials t ON t.id ="
        " a.trial_id WHERE t.number = 2 ORDER BY a.attempt").fetchall()
    assert attempts == [(1, "cancelled", 0), (2, "succeeded", 1)]
    ran = trial_steps(tmp_path, 2)
    assert [s for _, s in ran] == list(range(1, 10)), ran
    first_of_2 = min(s for a, s in ran if a == 2)
    assert first_of_2 > 1
    # The record's curve shows where the promoted attempt resumed.
    curve = db.execute("SELECT attempt, MIN(step), MAX(step) FROM progress p JOIN trials t ON"
                       " t.id = p.trial_id WHERE t.number = 2 GROUP BY attempt").fetchall()
    assert curve == [(1, 1, first_of_2 - 1), (2, first_of_2, 9)]

    # Stopped trials are never retried, and none is a failure.
    assert db.execute("SELECT COUNT(*) FROM trials WHERE status IN ('failed',"
                      " 'interrupted')").fetchone() == (0,)
    for number in range(3, 9):
        assert db.execute(
            "SELECT COUNT(*) FROM attempts a JOIN trials t ON t.id = a.trial_id"
            " WHERE t.number = ?", (number,)).fetchone() == (1,)


def test_median_stopping_stops_a_trial_worse_than_the_median_of_its_peers(
    tmp_path: Path,
) -> None:
    db = run(tmp_path, rule="median", choices=[1, 2, 4, 20],
             extra="min_step = 2\n[stopping.median]\nmin_peers = 3", step_s=0.03)
    ended = trials(db)
    assert [ended[n]["status"] for n in (1, 2, 3)] == ["completed"] * 3
    assert ended[4]["status"] == "stopped"
    made = [d for d in decisions(db) if d[0] == 4]
    stop = made[-1]
    assert stop[1] == "stop"
    assert stop[7] == "median"
    assert stop[3] == 2  # compared from min_step on, with enough peers at once
    assert stop[6] == 3
    assert stop[5] == pytest.approx(2 + 1 / 2)


def test_hyperband_decisions_name_their_bracket(tmp_path: Path) -> None:
    db = run(tmp_path, rule="hyperband", choices=[1, 5, 9, 13, 17, 21], step_s=0.03)
    made = decisions(db)
    assert made, "hyperband decided nothing"
    assert all(d[7] == "hyperband" for d in made)
    brackets = dict(db.execute(
        "SELECT t.number, d.bracket FROM decisions d JOIN trials t ON t.id = d.trial_id"))
    assert set(brackets.values()) <= {0, 1, 2}
    ended = trials(db)
    assert all(t["status"] in ("completed", "stopped") for t in ended.values())
    assert any(t["status"] == "stopped" for t in ended.values())


def test_a_stopped_result_is_reused_and_the_agent_is_told_its_step(tmp_path: Path) -> None:
    db = run(tmp_path, rule="asha", choices=[1, 9], step_s=0.05,
             extra="promote = false")
    ended = trials(db)
    assert ended[2]["status"] == "stopped"
    store = dse.Store(tmp_path / ".dse" / "dse.sqlite")
    (row_id,) = db.execute("SELECT id FROM trials WHERE number = 2").fetchone()
    row = store.stops.trial_by_row(row_id)
    assert row is not None
    assert row.status is dse.TrialStatus.STOPPED
    assert row.step == ended[2]["step"]
    # A second run reuses the stopped result rather than running it again.
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          env=dict(os.environ, STEP_S="0.05"), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    again = db.execute("SELECT status, cache_of IS NOT NULL, stop_step FROM trials t WHERE"
                       " campaign_id = 2 AND json_extract(params, '$.x') = 9").fetchone()
    assert again == ("cached", 1, ended[2]["step"])


def _start(tmp_path: Path, *, env: dict[str, str] | None = None, agent: str = "grid",
           **kwargs: Any) -> subprocess.Popen[str]:
    text = CAMPAIGN.format(
        python=sys.executable, rule="asha", choices=json.dumps([2, 3, 10, 11, 12, 13, 14, 15]),
        parallel=1, extra="")
    (tmp_path / "c.toml").write_text(text.replace('agent = "grid"', f'agent = "{agent}"'))
    (tmp_path / "w.py").write_text(resumable_workload(0.12))
    return subprocess.Popen([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                            env=dict(env or os.environ, STEP_S="0.15"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kwargs)


def _wait_for_promotion(tmp_path: Path, controller: subprocess.Popen[str]) -> None:
    """Until the record holds a promotion whose attempt has reported a point."""
    deadline = time.monotonic() + 120
    path = tmp_path / ".dse" / "dse.sqlite"
    while time.monotonic() < deadline:
        assert controller.poll() is None, controller.communicate()[0]
        if path.exists():
            with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
                try:
                    found = db.execute(
                        "SELECT COUNT(*) FROM decisions d JOIN progress p ON p.trial_id ="
                        " d.trial_id AND p.attempt > d.attempt WHERE d.verdict = 'promote'"
                    ).fetchone()[0]
                except sqlite3.OperationalError:  # the record is being made
                    found = 0
            if found:
                return
        time.sleep(0.02)
    raise AssertionError("no promotion within 120 s")


def _resume_and_check(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          env=dict(os.environ, STEP_S="0.15"), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    db = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    assert db.execute("SELECT status FROM campaigns").fetchall() == [("completed",)]
    ended = trials(db)
    assert [ended[n]["status"] for n in sorted(ended)] == (
        ["completed", "completed"] + ["stopped"] * 6), ended
    # Nothing lost, nothing done twice: the promoted trial ran each step once, from its
    # checkpoint on, and was promoted once.
    assert [s for _, s in trial_steps(tmp_path, 2)] == list(range(1, 10))
    promotes = [d[0] for d in decisions(db) if d[1] == "promote"]
    assert promotes == [2]
    stops = sorted(d[0] for d in decisions(db) if d[1] == "stop")
    assert stops == [2, 3, 4, 5, 6, 7, 8]
    assert db.execute("SELECT COUNT(*) FROM trials WHERE status IN ('failed',"
                      " 'interrupted')").fetchone() == (0,)


def test_a_controller_killed_after_a_promotion_resumes_with_nothing_lost(
    tmp_path: Path,
) -> None:
    controller = _start(tmp_path)
    try:
        _wait_for_promotion(tmp_path, controller)
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=30)
    finally:
        if controller.poll() is None:
            controller.kill()
        controller.communicate()
    _resume_and_check(tmp_path)


def test_ctrl_c_after_a_promotion_resumes_with_nothing_lost(tmp_path: Path) -> None:
    controller = _start(tmp_path, start_new_session=True)
    try:
        _wait_for_promotion(tmp_path, controller)
        os.killpg(controller.pid, signal.SIGINT)  # as a terminal's Ctrl+C: the whole group
        output = controller.communicate(timeout=60)[0]
        assert controller.returncode != 0, output
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.communicate()
    db = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    assert db.execute("SELECT status FROM campaigns").fetchall() == [("cancelled",)]
    _resume_and_check(tmp_path)


TELLING_AGENT = '''
import json, os
import dse

class Telling:
    """Proposes the choices in order, and writes down every observation it is told."""
    name = "telling"
    version = "1"

    def __init__(self, space, *, seed=0, **options):
        self._left = list(space["x"].choices)

    @property
    def exhausted(self):
        return not self._left

    def propose(self, n, in_flight):
        out, self._left = self._left[:n], self._left[n:]
        return [{"x": x} for x in out]

    def observe(self, observations):
        with open(os.environ["TOLD_LOG"], "a") as f:
            for o in observations:
                f.write(json.dumps([os.getpid(), o.trial_number, o.status.value, o.step,
                                    o.max_step, o.score]) + "\\n")

@dse.hookimpl
def dse_register_agents():
    return [Telling]
'''


def test_a_replayed_agent_is_told_a_promoted_trial_as_it_was_told_first(tmp_path: Path) -> None:
    # An agent without a snapshot is rebuilt after a kill by replaying its calls: a trial told
    # "stopped at step s", then promoted and told "completed", is replayed so, not as it ends.
    (tmp_path / "telling_agent.py").write_text(TELLING_AGENT)
    env = dict(os.environ, DSE_PLUGINS="telling_agent", TOLD_LOG=str(tmp_path / "told.log"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    controller = _start(tmp_path, env=env, agent="telling")
    path = tmp_path / ".dse" / "dse.sqlite"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the promoted trial 2 is told completed
            assert controller.poll() is None, controller.communicate()[0]
            log = tmp_path / "told.log"
            told = [json.loads(line) for line in log.read_text().splitlines()] if (
                log.exists()) else []
            if any(t[1] == 2 and t[2] == "completed" for t in told):
                break
            time.sleep(0.02)
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=30)
    finally:
        if controller.poll() is None:
            controller.kill()
        controller.communicate()
    first = [t[1:] for t in told]
    stopped_2 = [t for t in first if t[0] == 2]
    assert [t[1] for t in stopped_2] == ["stopped", "completed"], first
    assert stopped_2[0][2] is not None  # its step
    assert stopped_2[0][3] == 9  # max_step
    assert stopped_2[0][4] is not None  # a score at that step, for the agent only
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          env=dict(env, STEP_S="0.15"), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in (tmp_path / "told.log").read_text().splitlines()]
    pids = list(dict.fromkeys(t[0] for t in lines))
    replayed = [t[1:] for t in lines if t[0] == pids[1]][:len(first)]
    assert replayed == first
    assert "did not replay" not in done.stdout + done.stderr
    assert sqlite3.connect(path).execute(
        "SELECT COUNT(*) FROM events WHERE kind = 'agent_replay_diverged'").fetchone() == (0,)


@pytest.mark.parametrize(("extra", "says"), [
    ("[stopping.asha]\nbogus = 1", "stopping.asha: unknown option(s) 'bogus'; the asha rule"
                                  " takes"),
    ("[stopping.asha]\nreduction_factor = 1", "stopping.asha.reduction_factor: expected"),
])
def test_a_bad_rule_option_is_one_line_and_records_no_run(
    tmp_path: Path, extra: str, says: str
) -> None:
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(
        python=sys.executable, rule="asha", choices="[1, 2]", parallel=1, extra=extra))
    (tmp_path / "w.py").write_text(resumable_workload(0.12))
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("dse: error: "), lines[0]
    assert says in lines[0], lines[0]
    assert "c.toml: stopping" in lines[0]
    assert lines[0].count("stopping.asha") == 1
    record = tmp_path / ".dse" / "dse.sqlite"
    if record.exists():  # nothing was run, nor left unfinished
        assert sqlite3.connect(record).execute("SELECT COUNT(*) FROM campaigns").fetchone() == (
            0,)


def test_an_unknown_rule_names_the_installed_ones(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(
        python=sys.executable, rule="ashaa", choices="[1, 2]", parallel=1, extra=""))
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "stopping.rule: unknown stopping rule 'ashaa'" in done.stderr
    assert "asha, hyperband, median" in done.stderr


def test_a_backend_without_trial_directories_cannot_stop_early(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(
        '[campaign]\nname = "p"\nbackend = "probe"\n[[objectives]]\nmetric = "loss"\n'
        '[space]\nx = { type = "int", low = 1, high = 3 }\n'
        '[stopping]\nrule = "asha"\nmax_step = 9\n')
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "c.toml: stopping: the probe backend gives trials no directory" in done.stderr
