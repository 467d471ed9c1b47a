"""Output is optional: a reader that goes away (`dse run … | head -3`) never changes the
campaign. The console goes quiet and the run goes on to its normal end, on real processes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import dse_env, write_plugin

CAMPAIGN = """
[campaign]
name = "piped"
agent = "list"
backend = "local"
max_parallelism = 2
poll_interval = ["10ms", "100ms"]

[agent.list]
points = [{x = 1}, {x = 2}, {x = 3}, {x = 4}, {x = 5}, {x = 6}]

[[objectives]]
metric = "value"

[environment]
command = ["python", "-c", "import time, dse.trial; time.sleep(0.5); \
dse.trial.report(dict(value={x}))"]
time_limit = "60s"

[space]
x = { type = "int", low = 1, high = 6 }
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write_plugin(tmp_path)
    (tmp_path / "c.toml").write_text(CAMPAIGN)
    return tmp_path


def assert_finished_as_if_read(project: Path) -> None:
    """The run is recorded as it would be with a reader: completed, every trial done, nothing
    cancelled, no error."""
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    assert db.execute("SELECT status FROM campaigns").fetchall() == [("completed",)]
    trials = db.execute("SELECT number, status FROM trials ORDER BY number").fetchall()
    assert trials == [(n, "completed") for n in range(1, 7)]
    kinds = {k for (k,) in db.execute("SELECT kind FROM events")}
    assert not kinds & {"error", "cancel"}, kinds


def test_a_run_piped_into_head_finishes_its_campaign(project: Path) -> None:
    # The user's own command line: head exits after three lines, and every later line dse
    # writes (four trials' lines and the outcome, at least a second later) meets EPIPE.
    shell = f"{sys.executable} -m dse run c.toml 2>&1 | head -3; exit ${{PIPESTATUS[0]}}"
    proc = subprocess.run(["bash", "-c", shell], cwd=project, env=dse_env(project),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(proc.stdout.splitlines()) == 3
    assert proc.stdout.startswith("campaign piped (run 1)")
    assert proc.stderr == ""
    assert_finished_as_if_read(project)


@pytest.mark.parametrize("json_flag", [(), ("--json",)], ids=["text", "json"])
def test_a_reader_that_closes_the_pipe_changes_nothing(
    project: Path, json_flag: tuple[str, ...]
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dse", "run", "c.toml", *json_flag], cwd=project,
        env=dse_env(project), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("campaign piped (run 1)"), first
    # From now on every write dse makes, to stdout or stderr, fails with EPIPE.
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0
    assert_finished_as_if_read(project)
