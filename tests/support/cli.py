"""Running the `dse` command as a user does: a real subprocess, with a throwaway agent plugin.

The plugin registers the agent ``list``, which proposes the ``points`` of its
``[agent.list]`` table in order (forever, with ``repeat = true``), and appends what it is
told (trial number, status, score) to the JSON-lines file ``log`` names, if any. With
``LIST_AGENT_DELAY`` set in its environment each ``propose`` takes that many seconds (an agent
slow to replay), and touches the file ``LIST_AGENT_MARK`` names first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

PLUGIN_MODULE = "cli_plugin"
PLUGIN = '''
from __future__ import annotations
import dse
from dse.testing import ScriptedAgent


class ListAgent(ScriptedAgent):
    name = "list"
    version = "1"

    def __init__(self, space, *, seed=0, points=(), repeat=False, log=None):
        import itertools
        points = [dict(p) for p in points]
        super().__init__(itertools.cycle(points) if repeat else points)
        self.log = log

    def observe(self, observations):
        if self.log:
            import json
            with open(self.log, "a") as handle:
                for o in observations:
                    status = o.status.value if o.status else None
                    handle.write(json.dumps([o.trial_number, status, o.score]) + "\\n")
        super().observe(observations)

    def propose(self, n, in_flight=()):
        import os
        import pathlib
        import time
        if os.environ.get("LIST_AGENT_MARK"):
            pathlib.Path(os.environ["LIST_AGENT_MARK"]).touch()
        time.sleep(float(os.environ.get("LIST_AGENT_DELAY", "0")))
        return super().propose(n, in_flight)


@dse.hookimpl
def dse_register_agents():
    return [ListAgent]
'''


def write_plugin(project: Path) -> Path:
    """Put the plugin module in *project* (found through ``DSE_PLUGINS``); return *project*."""
    (project / f"{PLUGIN_MODULE}.py").write_text(PLUGIN)
    return project


def dse_env(project: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a `dse` run in *project*: the plugin loaded, no debug tracebacks
    (and *extra*)."""
    env = dict(os.environ) | (extra or {})
    env["PYTHONPATH"] = os.pathsep.join([str(project), env.get("PYTHONPATH", "")])
    env["DSE_PLUGINS"] = PLUGIN_MODULE
    env.pop("DSE_DEBUG", None)
    return env


def default_sigint() -> None:
    """In a child about to run: Ctrl+C acts as in a terminal, even when the tests run in a
    background job (whose SIGINT the shell ignores; dse, as Python, keeps it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_dse(project: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `dse ARGS` in *project* to its end."""
    return subprocess.run(
        [sys.executable, "-m", "dse", *args],
        cwd=project, env=dse_env(project), capture_output=True, text=True, timeout=timeout,
        check=False, preexec_fn=default_sigint,
    )


STARTED: list[subprocess.Popen[str]] = []
"""The controllers :func:`start_dse` started in the running test: :func:`reap_started` (an
autouse fixture of the suite's conftest) kills those still running when the test ends and
closes their pipes, whatever the test's outcome — a test that failed while its controller ran
must not leave it running (on under the next tests' load) nor leave its pipes to the garbage
collector, whose ResourceWarning then fails whichever test of the worker it lands in."""


def start_dse(project: Path, *args: str, env: dict[str, str] | None = None
              ) -> subprocess.Popen[str]:
    """Start `dse ARGS` in *project* (with *env* added to its environment), its output
    piped; killed at the end of the test if it still runs (:data:`STARTED`)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dse", *args],
        cwd=project, env=dse_env(project, env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=default_sigint,
    )
    STARTED.append(proc)
    return proc


def reap_started() -> None:
    """Kill each controller of :data:`STARTED` still running, wait for it, close its pipes."""
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        # (ValueError: its pipes were read and closed by the test already.)
        with contextlib.suppress(ValueError, OSError, subprocess.TimeoutExpired):
            proc.communicate(timeout=60)
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            if stream is not None:
                stream.close()


def wait_for_running(
    db_path: Path, count: int, timeout: float = 30,
    sql: str = "SELECT COUNT(*) FROM trials WHERE status = 'running'",
) -> None:
    """Wait until *sql* on the record counts at least *count* (default: running trials)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            db = sqlite3.connect(db_path)
            try:
                running = db.execute(sql).fetchone()[0]
            finally:
                db.close()
        except sqlite3.OperationalError:
            continue
        if running >= count:
            return
    pytest.fail(f"never reached {count}: {sql}")


def trajectory(project: Path) -> list[tuple[object, ...]]:
    """Every trial of the workspace's record in number order: number, params, status, score
    (what two runs of one campaign must share to have taken the same path)."""
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        return db.execute(
            "SELECT number, params, status, score FROM trials ORDER BY number"
        ).fetchall()
    finally:
        db.close()


def last_run(project: Path) -> dict[str, int]:
    """Status → trials of the latest run in *project*'s workspace."""
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        return dict(db.execute(
            "SELECT status, COUNT(*) FROM trials WHERE campaign_id ="
            " (SELECT MAX(id) FROM campaigns) GROUP BY status").fetchall())
    finally:
        db.close()


def run_exit(project: Path) -> int:
    """The exit code `dse run` gives the latest run in *project*'s workspace as recorded: 4
    (``NO_RESULT``) when no trial of it completed nor reused a completed result, else 0."""
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        (results,) = db.execute(
            "SELECT COUNT(*) FROM trials WHERE campaign_id = (SELECT MAX(id) FROM campaigns)"
            " AND proposal > 0 AND (status IN ('completed', 'stopped')"
            " OR (status = 'cached' AND score IS NOT NULL))").fetchone()
    finally:
        db.close()
    return 0 if results else 4
