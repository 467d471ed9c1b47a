"""One controller per campaign: real `dse run` processes contending for one campaign."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dse
from support.cli import run_dse, start_dse, write_plugin
from support.waiting import wait_until

CAMPAIGN = """
[campaign]
name = "demo"
agent = "list"
backend = "probe"
max_parallelism = 2
poll_interval = "1ms"

[agent.list]
points = [{{x = 1, outcome = "{outcome}"}}, {{x = 2, outcome = "{outcome}"}}, {{x = 3}}]

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 10 }}
outcome = ["succeed", "hang"]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory holding the throwaway agent plugin, where campaign files go."""
    return write_plugin(tmp_path)


def write_campaign(project: Path, *, outcome: str = "succeed") -> Path:
    path = project / "campaign.toml"
    path.write_text(CAMPAIGN.format(outcome=outcome))
    return path


def lock_file(project: Path) -> Path:
    return project / ".dse" / "demo.lock"


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one `dse: error:` line of a refused run (exit 2, no traceback)."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dse: error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def write_lock(path: Path, *, host: str, pid: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"host": host, "pid": pid, "started_at": "2026-01-02T03:04:05+00:00"})
    path.write_text(text)
    return text


def running_trials(db_path: Path) -> int:
    if not db_path.exists():
        return 0
    try:
        db = sqlite3.connect(db_path)
        try:
            return int(db.execute("SELECT COUNT(*) FROM trials WHERE status = 'running'")
                       .fetchone()[0])
        finally:
            db.close()
    except sqlite3.OperationalError:
        return 0


def test_a_second_run_is_refused_naming_the_holder(project: Path) -> None:
    campaign = write_campaign(project, outcome="hang")
    first = start_dse(project, "run", str(campaign))
    try:
        db_path = project / ".dse" / "dse.sqlite"
        deadline = time.monotonic() + 30
        while running_trials(db_path) < 2 and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()[1]
            time.sleep(0.02)
        assert running_trials(db_path) == 2

        second = run_dse(project, "run", str(campaign))

        line = error_line(second)
        assert "campaign 'demo' is already running" in line
        assert f"pid {first.pid} on host {socket.gethostname()}" in line
        assert str(lock_file(project)) in line
        assert first.poll() is None  # the holder runs on, undisturbed
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=30)
    assert first.returncode == 130, err
    assert not lock_file(project).exists()
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    # The refused run recorded nothing: one campaign run, the first one, cancelled.
    assert db.execute("SELECT status FROM campaigns").fetchall() == [("cancelled",)]
    db.close()


def test_a_stale_lock_of_a_dead_pid_on_this_host_is_taken_over(project: Path) -> None:
    campaign = write_campaign(project)
    pid = dead_pid()
    write_lock(lock_file(project), host=socket.gethostname(), pid=pid)

    proc = run_dse(project, "run", str(campaign))

    assert proc.returncode == 0, proc.stderr
    notices = [line for line in proc.stderr.splitlines() if "stale lock" in line]
    assert len(notices) == 1, proc.stderr
    assert f"pid {pid} on host {socket.gethostname()}" in notices[0]
    assert "no longer running" in notices[0]
    assert "completed (agent_exhausted)" in proc.stdout
    assert not lock_file(project).exists()


def test_a_lock_held_on_another_host_is_refused_and_kept(project: Path) -> None:
    campaign = write_campaign(project)
    text = write_lock(lock_file(project), host="node7.elsewhere.invalid", pid=dead_pid())

    line = error_line(run_dse(project, "run", str(campaign)))

    assert "held by pid" in line
    assert "on host node7.elsewhere.invalid since 2026-01-02 03:04:05" in line
    assert "taken over once its lease in the record expires" in line
    assert lock_file(project).read_text() == text
    assert not (project / ".dse" / "dse.sqlite").exists()


def test_a_live_pid_that_does_not_hold_the_lock_is_stale(tmp_path: Path) -> None:
    # The pid names a living process, but not the one that wrote the lock (a reused pid):
    # nobody holds the flock, so the lock is taken over.
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        write_lock(tmp_path / "demo.lock", host=socket.gethostname(), pid=sleeper.pid)
        with dse.CampaignLock(tmp_path, "demo") as lock:
            assert lock.took_over is not None
            assert lock.took_over.pid == sleeper.pid
            assert lock.notice is not None
            assert "no longer holds it" in lock.notice
            assert json.loads((tmp_path / "demo.lock").read_text())["pid"] == os.getpid()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not (tmp_path / "demo.lock").exists()


CONTENDER = r"""
import os, sys, time
import dse

workspace, ready, start, answered, count = sys.argv[1:]
open(ready, "w").close()
while not os.path.exists(start):
    time.sleep(0.001)


def answer():
    open(os.path.join(answered, str(os.getpid())), "w").close()


try:
    with dse.CampaignLock(workspace, "demo"):
        print("won", flush=True)
        answer()
        # Held until every contender has its answer: on a loaded machine one may try only
        # after a held-for-a-while lock was released, and would find none to contend for.
        deadline = time.monotonic() + 60
        while len(os.listdir(answered)) < int(count) and time.monotonic() < deadline:
            time.sleep(0.01)
except dse.LockedError as exc:
    print("refused", exc, flush=True)
    answer()
"""


def test_of_many_runs_finding_one_stale_lock_exactly_one_takes_it(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    write_lock(workspace / "demo.lock", host=socket.gethostname(), pid=dead_pid())
    start, answered = tmp_path / "start", tmp_path / "answered"
    answered.mkdir()
    contenders = []
    for i in range(6):
        ready = tmp_path / f"ready-{i}"
        proc = subprocess.Popen(
            [sys.executable, "-c", CONTENDER, str(workspace), str(ready), str(start),
             str(answered), "6"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        contenders.append((proc, ready))
    wait_until(lambda: all(ready.exists() for _, ready in contenders), 60,
               "every contender to start")
    start.touch()
    outputs = {}
    for proc, _ in contenders:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs[proc.pid] = out.strip()
    winners = [pid for pid, out in outputs.items() if out == "won"]
    assert len(winners) == 1, outputs
    for pid, out in outputs.items():
        if pid != winners[0]:
            assert out.startswith("refused campaign 'demo' is already running"), out
            assert f"pid {winners[0]} on host" in out
    assert not (workspace / "demo.lock").exists()


ORPHANING_HOLDER = r"""
import os, sys, time
import dse

lock = dse.CampaignLock(sys.argv[1], "demo")
lock.acquire()
child = os.fork()
if child == 0:  # the child inherits the locked descriptor and outlives its parent
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep(30)
    os._exit(0)
print(os.getpid(), child, flush=True)
os._exit(0)  # the holder dies without releasing
"""


def test_a_dead_holder_whose_lock_is_still_open_elsewhere_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", ORPHANING_HOLDER, str(tmp_path)],
        capture_output=True, text=True, timeout=30, check=True,
    )
    holder, orphan = (int(pid) for pid in proc.stdout.split())
    try:
        with pytest.raises(dse.LockedError) as caught:
            dse.CampaignLock(tmp_path, "demo", settle=0.2).acquire()
        message = str(caught.value)
        assert f"pid {holder} on host {socket.gethostname()}" in message
        assert "has ended, but another process still holds its lock file" in message
        assert (tmp_path / "demo.lock").exists()
    finally:
        os.kill(orphan, signal.SIGKILL)
