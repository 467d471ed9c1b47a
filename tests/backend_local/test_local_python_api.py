"""The Python API on real processes (docs/python-api.md): a function objective runs as each
trial's command in a worker process, under the same rules as a command — a worker killed
from outside is retried as the same trial, a time limit ends it, an exception, a NaN or a
non-number fails it as a command's result would — and the run reads back into pandas.

Every campaign runs in a real Python script started as a user starts it (``python
script.py`` in a directory of its own), so the worker imports the script as it would a
user's; the test reads the record back with :func:`dse.load` and ``dse show --json``.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pandas
import pytest

import dse

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"
TIMEOUT = 600
"""Seconds a script may take: generous, for a loaded 2-core machine."""


def doc_block(first_line: str, kind: str = "python") -> str:
    """The fenced block of docs/python-api.md whose first line starts with *first_line*."""
    text = DOC.read_text(encoding="utf-8")
    blocks = text.split(f"```{kind}\n")[1:]
    found = [b.split("\n```", 1)[0] for b in blocks if b.startswith(first_line)]
    assert len(found) == 1, f"one ```{kind} block starting {first_line!r} in {DOC}"
    return found[0] + "\n"


def run_script(directory: Path, text: str, name: str = "script.py") -> str:
    """Run *text* as ``python <name>`` in *directory*; its stdout (it must exit 0)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(textwrap.dedent(text), encoding="utf-8")
    proc = subprocess.run([sys.executable, name], cwd=directory, capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def show(directory: Path, trial: str) -> dict[str, Any]:
    """``dse show TRIAL --json`` of the workspace ``.dse`` in *directory*."""
    proc = subprocess.run([sys.executable, "-m", "dse", "show", trial, "--workspace", ".dse",
                           "--json"], cwd=directory, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def export_csv(directory: Path) -> str:
    """``dse export quad --format csv`` of the workspace ``.dse`` in *directory*."""
    proc = subprocess.run([sys.executable, "-m", "dse", "export", "quad", "--workspace",
                           ".dse", "--format", "csv"], cwd=directory, capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def wait_for(path: Path, proc: subprocess.Popen[str]) -> str:
    """The content of *path* once it exists (written whole: renamed into place)."""
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return path.read_text()


def test_the_docs_study_kills_a_worker_retries_its_trial_and_reads_into_pandas(
    tmp_path: Path,
) -> None:
    out = run_script(tmp_path, doc_block("# study.py"), "study.py")
    # What the page says it prints, it prints (the rows it elides aside; pandas's spacing).
    printed = [line.split() for line in out.splitlines()]
    for line in doc_block("<Results", "text").splitlines():
        if line != "...":
            assert line.split() in printed, (line, out)

    results = dse.load(tmp_path / ".dse")
    assert (results.campaign, results.run_id, results.status) == (
        "quad", 1, dse.CampaignStatus.COMPLETED)
    assert len(results.trials) == 10
    assert all(t.status is dse.TrialStatus.COMPLETED for t in results.trials)
    for trial in results.trials:
        states = [a.state for a in trial.attempts]
        if trial.params["x"] == 1.0:  # its first worker was SIGKILLed: retried, same trial
            assert states == [dse.AttemptState.KILLED, dse.AttemptState.SUCCEEDED]
            assert trial.attempts[0].signal == signal.SIGKILL
        else:
            assert states == [dse.AttemptState.SUCCEEDED]
        assert trial.metrics["loss"] == (trial.params["x"] - 0.3) ** 2 + 0.1 * trial.params[
            "layers"]
    assert results.best is not None
    assert results.best.params == {"x": 0.25, "layers": 1}

    # The frame is the table `dse export --format csv` writes, read back by pandas.
    frame = results.to_pandas()
    assert list(frame["trial"]) == list(range(1, 11))
    assert list(frame["attempts"]) == [len(t.attempts) for t in results.trials]
    assert list(frame["interruptions"]) == [len(t.attempts) - 1 for t in results.trials]
    assert list(frame["metric.loss"]) == [t.metrics["loss"] for t in results.trials]
    assert set(frame["status"]) == {"completed"}
    assert [c for c in frame.columns if c.startswith("param.")] == ["param.x", "param.layers"]
    assert str(frame["started_at"].dtype).startswith("datetime64")
    # The records and the table read times alike (a retried trial: from its first start).
    assert list(frame["duration_s"]) == pytest.approx([t.duration_s for t in results.trials])
    assert [ts.timestamp() for ts in frame["started_at"]] == pytest.approx(
        [t.started_at for t in results.trials], abs=1e-3)
    exported = pandas.read_csv(io.StringIO(export_csv(tmp_path)))
    assert list(exported.columns) == list(frame.columns)
    for column in ("trial", "status", "param.x", "param.layers", "metric.loss", "score",
                   "attempts", "wall_s", "config_hash"):
        assert list(exported[column]) == list(frame[column]), column

    # The record says what ran: the worker, the script and the function.
    doc = show(tmp_path, "quad:9")
    assert doc["run"]["command"][1:4] == ["-m", "dse._worker", "--path"]
    assert doc["run"]["command"][-1] == f"{tmp_path / 'study.py'}:objective"
    assert [a["state"] for a in doc["ended"]["attempts"]] == ["killed", "succeeded"]


KILLED_FROM_OUTSIDE = """
import argparse
import os
import pathlib
import time

import dse
import dse.trial

MARKS = pathlib.Path("marks")
ARGS = argparse.ArgumentParser().parse_args()  # the worker's import sees no arguments


def objective(params):
    attempt = dse.trial.attempt()
    mark = MARKS / f"{attempt}.pid"
    mark.with_suffix(".tmp").write_text(str(os.getpid()))
    mark.with_suffix(".tmp").replace(mark)
    if attempt == 1:
        time.sleep(600)  # until the test kills this worker
    return 10.0 * attempt


if __name__ == "__main__":
    MARKS.mkdir()
    dse.run({"campaign": {"name": "kill", "agent": "grid"}, "space": {"x": [1]},
             "objectives": [{"metric": "loss"}], "environment": {"time_limit": "15m"}},
            objective)
"""


def test_a_worker_killed_from_outside_is_retried_as_the_same_trial(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(KILLED_FROM_OUTSIDE, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "script.py"], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        os.kill(int(wait_for(tmp_path / "marks" / "1.pid", proc)), signal.SIGKILL)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err

    (trial,) = dse.load(tmp_path / ".dse").trials
    assert trial.status is dse.TrialStatus.COMPLETED
    assert trial.metrics == {"loss": 20.0}  # the second attempt's result
    assert [a.state for a in trial.attempts] == [dse.AttemptState.KILLED,
                                                 dse.AttemptState.SUCCEEDED]
    assert trial.attempts[0].signal == signal.SIGKILL
    assert "from outside dse" in (trial.attempts[0].reason or "")
    # The worker that was killed is the one the test killed.
    assert (tmp_path / "marks" / "2.pid").read_text() != (tmp_path / "marks" / "1.pid").read_text()


FAILING = """
import math
import sys
import time

import dse


def objective(params):
    case = params["case"]
    if case == "raise":
        raise ValueError("boom in the objective")
    if case == "nan":
        return math.nan
    if case == "text":
        return "fast"
    if case == "object":
        return {"loss": object()}
    if case == "none":
        return None
    if case == "slow":
        time.sleep(600)
    return 1.0


if __name__ == "__main__":
    def hidden(params):  # under the guard: the worker's import never defines it
        return 1.0

    grid = {"agent": "grid", "max_parallelism": 2}
    for name in ("cases", "cases"):  # the second run reuses every result about the design
        dse.run({"campaign": {"name": name, **grid},
                 "space": {"case": ["ok", "raise", "nan", "text", "object", "none"]},
                 "objectives": [{"metric": "loss"}]}, objective)
    # Each of these runs has no completed trial: dse.run raises, the run recorded.
    for campaign, function in [
        ({"campaign": {"name": "slow", **grid}, "space": {"case": ["slow"]},
          "objectives": [{"metric": "loss"}], "environment": {"time_limit": "3s"},
          "backend": {"local": {"grace": "1s"}}}, objective),
        ({"campaign": {"name": "hidden", **grid}, "space": {"case": ["ok"]},
          "objectives": [{"metric": "loss"}]}, hidden),
        ({"campaign": {"name": "command", **grid}, "space": {"case": ["ok"]},
          "objectives": [{"metric": "loss"}],
          "environment": {"command": [sys.executable, "-c", "raise SystemExit(1)"]}}, None),
    ]:
        try:
            dse.run(campaign, function)
        except dse.NoResultError as error:
            print("no result:", error.results.campaign)
        else:
            raise AssertionError(f"{campaign['campaign']['name']}: no NoResultError")
"""


def test_a_function_fails_times_out_and_is_reused_as_a_command_would(tmp_path: Path) -> None:
    out = run_script(tmp_path, FAILING)
    assert out.split() == ["no", "result:", "slow", "no", "result:", "hidden", "no", "result:",
                           "command"]
    workspace = tmp_path / ".dse"
    first = dse.load(workspace, run=1)
    ended = {t.params["case"]: (t.status, t.failure) for t in first.trials}
    failed = dse.TrialStatus.FAILED
    command = dse.load(workspace, campaign="command").trials[0]
    assert command.failure is dse.FailureClass.NONZERO_EXIT
    assert ended == {
        "ok": (dse.TrialStatus.COMPLETED, None),
        "raise": (failed, command.failure),  # what a command exiting 1 gets
        "nan": (failed, dse.FailureClass.INVALID_METRIC),
        "text": (failed, dse.FailureClass.INVALID_METRIC),
        "object": (failed, dse.FailureClass.INVALID_METRIC),
        "none": (failed, dse.FailureClass.NO_RESULT),
    }
    assert [t.score for t in first.trials if t.score is not None] == [1.0]
    assert first.best is not None
    assert first.best.params == {"case": "ok"}

    # The traceback is in the attempt's log, from the function's frame on.
    raised = next(t for t in first.trials if t.params["case"] == "raise")
    assert raised.trial_dir is not None
    log = (Path(raised.trial_dir) / "attempt-1" / "stderr.log").read_text()
    assert 'raise ValueError("boom in the objective")' in log
    assert log.rstrip().endswith("ValueError: boom in the objective")
    assert "_worker.py" not in log

    # Run again: every result about the design is answered from the record.
    second = dse.load(workspace, campaign="cases")
    assert second.run_id == 2
    assert all(t.status is dse.TrialStatus.CACHED and not t.attempts for t in second.trials)
    by_case = {t.params["case"]: t for t in first.trials}
    assert {t.reuses for t in second.trials} == {t.trial_id for t in by_case.values()}

    (slow,) = dse.load(workspace, campaign="slow").trials
    assert (slow.status, slow.failure) == (dse.TrialStatus.BUDGET_EXHAUSTED,
                                           dse.FailureClass.TIME_LIMIT)
    assert [a.state for a in slow.attempts] == [dse.AttemptState.TIMEOUT]

    (hidden,) = dse.load(workspace, campaign="hidden").trials
    assert hidden.failure is dse.FailureClass.NONZERO_EXIT
    assert hidden.trial_dir is not None
    said = (Path(hidden.trial_dir) / "attempt-1" / "stderr.log").read_text()
    assert "defines no function hidden" in said


NOTEBOOK = """
import linecache

import dse

# What IPython does with a cell: compiled under a name no file has, its lines in linecache.
CELL = '''
def objective(params):
    import math
    return math.sqrt(params["x"]) + OFFSET
'''
name = "/nonexistent/ipykernel_0/cell-1.py"
for offset in (0, 0, 1):
    cell = CELL.replace("OFFSET", str(offset))
    linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)
    namespace = {"__name__": "__main__"}
    exec(compile(cell, name, "exec"), namespace)
    results = dse.run({"campaign": {"agent": "grid"}, "space": {"x": [1, 4]},
                       "objectives": [{"metric": "loss"}]}, namespace["objective"])
    print(results.run_id, [(t.status.value, t.metrics["loss"]) for t in results.trials])
"""


def test_a_notebook_function_runs_from_its_source_and_an_edit_is_run_again(
    tmp_path: Path,
) -> None:
    out = run_script(tmp_path, NOTEBOOK).splitlines()
    assert out == [
        "1 [('completed', 1.0), ('completed', 2.0)]",
        "2 [('cached', 1.0), ('cached', 2.0)]",  # the same source: reused
        "3 [('completed', 2.0), ('completed', 3.0)]",  # edited: another code version
    ]
    assert len(list((tmp_path / ".dse" / "objectives").iterdir())) == 2  # one per source
    doc = show(tmp_path, "objective:1")  # of the latest run: the edited source ran
    source, _, function = doc["run"]["command"][-1].rpartition(":")
    assert function == "objective"
    assert Path(source).parent == tmp_path / ".dse" / "objectives"
    assert "math.sqrt(params[\"x\"]) + 1" in Path(source).read_text()
    assert doc["run"]["code_version"].startswith("source:")


CAMPAIGN_FILE = """
[campaign]
agent = "grid"

[environment]
time_limit = "5m"

[[objectives]]
metric = "loss"
direction = "maximize"

[space]
x = [1, 2]
"""

WITH_A_FILE = """
import dse


def objective(params):
    return {"loss": params["x"] * 10.0, "extra": 1.5}


if __name__ == "__main__":
    ran = dse.run("sweep/tiles.toml", objective)
    read = dse.load("sweep/tiles.toml")
    print(ran == read, ran.campaign, ran.workspace.name, ran.best.params)
"""


def test_a_campaign_file_runs_with_a_function_as_its_objective(tmp_path: Path) -> None:
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "tiles.toml").write_text(CAMPAIGN_FILE, encoding="utf-8")
    # The file names the campaign and holds the record beside it, as with `dse run`.
    assert run_script(tmp_path, WITH_A_FILE).split() == ["True", "tiles", ".dse", "{'x':", "2}"]
    results = dse.load(tmp_path / "sweep" / ".dse")
    assert [dict(t.metrics) for t in results.trials] == [{"loss": 10.0, "extra": 1.5},
                                                        {"loss": 20.0, "extra": 1.5}]
    assert results.direction == "maximize"


def test_the_warm_start_example_runs_the_enqueued_guess_first_then_exploits(
    tmp_path: Path,
) -> None:
    out = run_script(tmp_path, doc_block("# warm.py"))
    first, best = out.split("best ")
    assert first.strip() == "[1.25]"  # the enqueued guess ran first
    assert float(best) < 0.0625  # the guess's own (1.25 - 1.5)**2: the agent did better
    db = tmp_path / ".dse" / "dse.sqlite"
    conn = sqlite3.connect(db)
    try:
        kinds = [k for (k,) in conn.execute(
            "SELECT kind FROM agent_log WHERE campaign_id = 2 ORDER BY id")]
        assert kinds[:2] == ["warm", "enqueue"]
    finally:
        conn.close()


def test_the_conditional_example_gives_the_objective_the_active_params_only(
    tmp_path: Path,
) -> None:
    out = run_script(tmp_path, doc_block("# tree.py"))
    assert out.strip() == "[('momentum', 'optimizer'), ('optimizer',)]"
