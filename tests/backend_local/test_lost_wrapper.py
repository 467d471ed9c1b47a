"""A wrapper killed from outside (an OOM killer, an operator's ``kill -9``) takes its session
with it: real ``dse run`` processes, real trials with a child and a grandchild.

Every process of attempt 1 appends its pid and the time to ``beats.log`` in the trial dir
every 20 ms; attempt 2 reports a result at once. The test ``kill -9``s attempt 1's wrapper
and watches the record: by the time attempt 1 is recorded as ended, no process of its
session may be alive, none may have written after that end, and the trial is retried.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from support.cli import run_dse, start_dse, write_plugin
from support.procs import alive, stat_fields
from support.waiting import wait_until

WORKLOAD = r"""
import json, os, subprocess, sys, time

trial_dir = os.environ["DSE_TRIAL_DIR"]
if os.environ["DSE_ATTEMPT"] != "1":
    with open(os.path.join(trial_dir, "result.json"), "w") as handle:
        json.dump({"complete": True, "metrics": {"value": 1.0}}, handle)
    sys.exit(0)
role = sys.argv[1] if len(sys.argv) > 1 else "workload"
below = {"workload": "child", "child": "grandchild"}.get(role)
if below is not None:
    subprocess.Popen([sys.executable, __file__, below])
with open(os.path.join(trial_dir, "pid-" + role), "w") as handle:
    handle.write(str(os.getpid()))
while True:
    fd = os.open(os.path.join(trial_dir, "beats.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, ("%d %r\n" % (os.getpid(), time.time())).encode())
    os.close(fd)
    time.sleep(0.02)
"""

CAMPAIGN = """
[campaign]
name = "orphans"
agent = "list"
backend = "local"
max_parallelism = 1
poll_interval = ["50ms", "200ms"]

[agent.list]
points = [{{x = 1}}]

[backend.local]
cpus = 1
gpus = 0
grace = "1s"

[environment]
command = [{python}, {workload}]
time_limit = "120s"

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 10 }}
"""

ROLES = ("workload", "child", "grandchild")


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session *sid*."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = stat_fields(int(name))
            if fields is not None and int(fields[3]) == sid and fields[0] != b"Z":
                found.append(int(name))
    return found


def attempts(db_path: Path) -> list[tuple[int, str, float | None, str | None]]:
    with sqlite3.connect(db_path) as db:
        return db.execute(
            "SELECT attempt, state, ended_at, reason FROM attempts ORDER BY attempt"
        ).fetchall()


def start_campaign(tmp_path: Path) -> tuple[Path, subprocess.Popen[str], Path, list[int]]:
    """Start ``dse run`` of the campaign; once attempt 1's three processes run, return the
    project, the controller, the trial dir and their pids."""
    project = write_plugin(tmp_path)
    workload = project / "workload.py"
    workload.write_text(WORKLOAD)
    campaign = project / "campaign.toml"
    campaign.write_text(CAMPAIGN.format(python=json.dumps(sys.executable),
                                        workload=json.dumps(str(workload))))
    proc = start_dse(project, "run", str(campaign))
    try:
        trial_dir = wait_until(lambda: next(project.glob(".dse/orphans/run-*/000001"), None),
                               60, "the trial directory")
        pid_files = [trial_dir / f"pid-{role}" for role in ROLES]
        wait_until(lambda: all(p.exists() and p.read_text() for p in pid_files), 60,
                   "the workload, its child and its grandchild")
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return project, proc, trial_dir, [int(p.read_text()) for p in pid_files]


def wrapper_of(trial_dir: Path, pids: list[int]) -> int:
    """Attempt 1's wrapper, checked to be alive and to lead the session of *pids*."""
    wrapper, ticks = map(int, (trial_dir / "attempt-1" / "wrapper.pid").read_text().split())
    assert alive(wrapper, ticks)
    assert set(pids) <= set(session_members(wrapper))
    return wrapper


def assert_nothing_outlived_attempt_1(project: Path, trial_dir: Path, pids: list[int]) -> None:
    """Attempt 1 ended lost, nothing of it wrote after its recorded end, the retry completed
    the trial."""
    rows = attempts(project / ".dse" / "dse.sqlite")
    assert [(n, s) for n, s, _, _ in rows] == [(1, "lost"), (2, "succeeded")], rows
    _, _, ended_at, reason = rows[0]
    assert reason is not None
    assert "exit.json" in reason
    assert ended_at is not None
    beats = [line.split() for line in (trial_dir / "beats.log").read_text().splitlines()]
    assert {int(pid) for pid, _ in beats} == set(pids)
    assert max(float(at) for _, at in beats) <= ended_at
    assert not any(alive(pid) for pid in pids)
    shown = run_dse(project, "status", "--json")
    assert json.loads(shown.stdout)[0]["completed"] == 1, shown.stdout


def test_a_wrapper_killed_from_outside_takes_its_whole_session_with_it(tmp_path: Path) -> None:
    project, proc, trial_dir, pids = start_campaign(tmp_path)
    try:
        wrapper = wrapper_of(trial_dir, pids)
        os.kill(wrapper, signal.SIGKILL)
        db_path = project / ".dse" / "dse.sqlite"

        def first_ended() -> bool:
            rows = attempts(db_path)
            return bool(rows) and rows[0][2] is not None

        # The moment the record says attempt 1 ended, its session is already gone.
        wait_until(first_ended, 60, "attempt 1 to be recorded as ended")
        assert session_members(wrapper) == []
        assert not any(alive(pid) for pid in pids)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert_nothing_outlived_attempt_1(project, trial_dir, pids)


def test_a_restarted_controller_kills_the_session_of_a_wrapper_that_died_meanwhile(
    tmp_path: Path,
) -> None:
    project, proc, trial_dir, pids = start_campaign(tmp_path)
    wrapper = wrapper_of(trial_dir, pids)
    proc.kill()
    proc.communicate()
    os.kill(wrapper, signal.SIGKILL)
    # The workload's first process dies with its wrapper; what it started lives on (its
    # beats go on) until a controller comes back.
    wait_until(lambda: not alive(pids[0]), 30, "the workload to die with its wrapper")
    survivors = session_members(wrapper)
    try:
        assert set(survivors) == set(pids[1:])
        size = (trial_dir / "beats.log").stat().st_size
        wait_until(lambda: (trial_dir / "beats.log").stat().st_size > size, 30,
                   "the orphans to write")
        rerun = run_dse(project, "run", str(project / "campaign.toml"), timeout=120)
        assert session_members(wrapper) == []
    except BaseException:
        for pid in session_members(wrapper):
            os.kill(pid, signal.SIGKILL)
        raise
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming" in rerun.stderr
    assert_nothing_outlived_attempt_1(project, trial_dir, pids)
