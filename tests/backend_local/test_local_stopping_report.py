"""What `dse show`, `dse report` (text, JSON, HTML) say of a real campaign with early stopping:
ASHA on real processes that checkpoint and report their learning curves, trials stopped at
rung 1 and one promoted and resumed from its checkpoint. Every figure is checked against the
record's rows and the workload's own log of the steps it ran, whatever the timing of the
machine made the rule decide."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.resumable import resumable_workload, steps_run

CAMPAIGN = """
[campaign]
name = "es"
agent = "grid"
backend = "local"
max_parallelism = 1
mode = "rolling"
poll_interval = ["10ms", "40ms"]

[[objectives]]
metric = "loss"

[environment]
command = ["{python}", "w.py"]
time_limit = "60s"

[space]
x = {{ type = "categorical", choices = [2, 3, 10, 11, 12, 13, 14, 15] }}

[stopping]
rule = "asha"
max_step = 9
"""



def dse(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "dse", *args], cwd=project,
                          capture_output=True, text=True, timeout=240, env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("es")
    (where / "c.toml").write_text(CAMPAIGN.format(python=sys.executable))
    (where / "w.py").write_text(resumable_workload(0.1))
    dse(where, "run", "c.toml")
    return where


def rows(project: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def trial_steps(project: Path, number: int) -> list[tuple[int, int]]:
    return steps_run(project / ".dse" / "es" / "run-1" / f"{number:06d}")


def test_show_says_where_a_promoted_trial_stopped_and_resumed(project: Path) -> None:
    promoted = rows(project, "SELECT t.number, d.rung, d.step, d.value, d.attempt FROM"
                    " decisions d JOIN trials t ON t.id = d.trial_id WHERE d.verdict ="
                    " 'promote'")
    assert len(promoted) == 1, promoted
    number, rung, step, value, attempt = promoted[0]
    doc = json.loads(dse(project, "show", f"es:{number}", "--json").stdout)
    made = doc["ended"]["stopping"]["decisions"]
    promote = next(d for d in made if d["verdict"] == "promote")
    assert (promote["rung"], promote["step"], promote["value"], promote["attempt"]) == (
        rung, step, value, attempt)
    # Where it resumed is where the workload's next attempt really started, after the last
    # step the first attempt ran: no step ran twice.
    ran = trial_steps(project, number)
    assert [s for _, s in ran] == list(range(1, 10))
    first_of_next = min(s for a, s in ran if a == attempt + 1)
    assert promote["resumed_step"] == first_of_next
    assert first_of_next == max(s for a, s in ran if a == attempt) + 1
    assert doc["ended"]["outcome"] == "completed"
    assert doc["ended"]["stopping"]["stopped"] is None
    lines = dse(project, "show", f"es:{number}").stdout.splitlines()
    assert any(line.startswith("  promoted      at rung") and line.endswith(
        f"resumed at step {first_of_next} in attempt {attempt + 1}") for line in lines), lines


def test_show_says_where_and_why_each_stopped_trial_stopped(project: Path) -> None:
    stopped = rows(project, "SELECT number, stop_step FROM trials WHERE status = 'stopped'")
    assert len(stopped) >= 5
    for number, stop_step in stopped:
        (last,) = rows(project, "SELECT d.rung, d.step, d.value, d.cutoff, d.peers, d.rule,"
                       " d.rule_version, d.reason FROM decisions d JOIN trials t ON t.id ="
                       " d.trial_id WHERE t.number = ? AND d.verdict = 'stop' ORDER BY d.id"
                       " DESC LIMIT 1", number)
        doc = json.loads(dse(project, "show", f"es:{number}", "--json").stdout)
        shown = doc["ended"]["stopping"]["stopped"]
        assert (shown["rung"], shown["step"], shown["value"], shown["cutoff"], shown["peers"],
                shown["rule"], shown["version"], shown["reason"]) == last
        assert doc["concluded"]["step"] == stop_step
        assert doc["concluded"]["max_step"] == 9
    number = stopped[0][0]
    text = dse(project, "show", f"es:{number}").stdout
    assert "  STOPPED       at rung" in text
    assert f"the metrics are from step {stopped[0][1]} of 9" in text


def test_report_counts_spend_and_saving_as_the_rows_do(project: Path) -> None:
    (run,) = json.loads(dse(project, "report", "c.toml", "--json").stdout)["runs"]
    stopping = run["stopping"]
    counts = {(v, r): n for v, r, n in rows(
        project, "SELECT verdict, rung, COUNT(*) FROM decisions WHERE verdict != 'continue'"
        " GROUP BY 1, 2")}
    assert {(v, r["rung"]): r[k] for r in stopping["rungs"] for v, k in
            (("stop", "stopped"), ("promote", "promoted")) if r[k]} == counts
    stopped = rows(project, "SELECT t.id, t.stop_step, (SELECT rung FROM decisions WHERE"
                   " trial_id = t.id AND verdict = 'stop' ORDER BY id DESC LIMIT 1) FROM"
                   " trials t WHERE t.status = 'stopped'")
    assert stopping["ended_stopped"] == len(stopped)
    saved = 0.0
    by_rung: dict[int, float] = {}
    for row, step, rung in stopped:
        spent = sum(json.loads(s)["cpu_s"] for s, in rows(
            project, "SELECT spend FROM attempts WHERE trial_id = ?", row))
        by_rung[rung] = by_rung.get(rung, 0.0) + spent
        saved += spent * (9 / step - 1)
    assert {r["rung"]: r["spent"]["cpu_hours"] * 3600 for r in stopping["rungs"]
            if r["ended"]} == pytest.approx(by_rung)
    assert stopping["saved_estimate"]["cpu_hours"] * 3600 == pytest.approx(saved)
    assert saved > 0
    completed = rows(project, "SELECT COUNT(*) FROM trials WHERE status = 'completed'")[0][0]
    assert stopping["to_end"] == completed
    # Stopped trials are finished, usable results in the three numbers.
    assert run["finished"] == run["effective"] == completed + len(stopped) == 8
    text = dse(project, "report", "c.toml").stdout
    assert f"{len(stopped)} trials ended stopped" in text
    assert "  saved        about" in text


def test_the_html_report_draws_every_trials_curve(project: Path) -> None:
    pytest.importorskip("matplotlib")
    done = dse(project, "report", "c.toml", "--html", "r.html")
    assert "HTML report of es run 1" in done.stderr
    page = (project / "r.html").read_text()
    assert 'id="plot-curves"' in page
    assert "Learning curves of all 8 trials that ran; 8 reported loss" in page
