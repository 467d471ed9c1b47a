"""A busy record: a controller stopped (SIGSTOP, as Ctrl+Z does) in the middle of a write
holds the workspace's record; the other controllers and the reading commands wait for it as
long as it takes, saying once who holds it, and go on when it is continued.

Real controllers, real trial processes, a real SIGSTOP caught while the stopped controller
holds SQLite's write lock (the kernel's ``/proc/locks`` says when it does). Every trial appends
``start``/``end`` lines to ``runs.log`` and holds while its campaign's ``hold-<name>`` file
exists, so a test knows what ran, and when, from the trials themselves.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from support.cli import STARTED, default_sigint, dse_env, write_plugin
from support.procs import stat_fields
from support.waiting import wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/locks").exists(),
                                reason="needs Linux's /proc/locks")

WORK = '''
import json, os, sys, time
import dse.trial
name, x = sys.argv[1], dse.trial.params()["x"]
def log(what):
    with open("runs.log", "a") as f:
        f.write(f"{what} {name} {x} {time.time()}\\n")
log("start")
step = 0
while os.path.exists(f"hold-{name}"):
    if name == "b":  # many points a pass: b's controller writes much, and often
        with open(os.environ["DSE_PROGRESS_FILE"], "a") as f:
            f.write("".join(json.dumps({"step": step + i, "metrics": {"loss": 1.0}}) + "\\n"
                            for i in range(200)))
        step += 200
    time.sleep(0.05)
log("end")
dse.trial.report({"value": float(x)})
'''

BUSY_TIMEOUT_S = 30
"""What a write waited for a busy record before this fix, then failed."""


def campaign(name: str, xs: list[int]) -> str:
    points = ", ".join(f"{{x = {x}}}" for x in xs)
    return f'''
[campaign]
name = "{name}"
agent = "list"
backend = "local"
max_parallelism = 2
poll_interval = ["0.05s", "0.2s"]

[agent.list]
points = [{points}]

[environment]
command = ["{sys.executable}", "work.py", "{name}"]
code_version = "v1"
time_limit = "10m"

[backend.local]
cpus = 4

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 1000 }}
'''


def project(tmp_path: Path) -> Path:
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "a.toml").write_text(campaign("a", [1, 2, 3, 4]))
    (tmp_path / "b.toml").write_text(campaign("b", [101, 102]))
    (tmp_path / "hold-a").touch()
    (tmp_path / "hold-b").touch()
    return tmp_path


def start(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`dse ARGS` in *root*, its stderr in ``<first arg>.<pid>.err`` (read while it runs)."""
    err = (root / f"{args[0]}.{len(STARTED)}.err").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "dse", *args], cwd=root,
                            env=dse_env(root, env), stdout=subprocess.PIPE, stderr=err,
                            text=True, preexec_fn=default_sigint)
    err.close()
    proc.err_path = Path(err.name)  # type: ignore[attr-defined]  # the test's note
    STARTED.append(proc)
    return proc


def stderr(proc: subprocess.Popen[str]) -> str:
    return Path(proc.err_path).read_text()  # type: ignore[attr-defined]


def said(proc: subprocess.Popen[str], line: str) -> bool:
    return line in stderr(proc)


def record(root: Path, sql: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(root / ".dse" / "dse.sqlite", timeout=60)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def events(root: Path) -> list[tuple[str, str, int, float]]:
    """(start|end, campaign, x, time) the trials logged."""
    path = root / "runs.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(p[0], p[1], int(p[2]), float(p[3])) for p in map(str.split, lines) if len(p) == 4]


def state(pid: int) -> bytes:
    fields = stat_fields(pid)
    return b"gone" if fields is None else fields[0]


def holds_write_lock(pid: int, db: Path) -> bool:
    """Whether *pid* holds the WAL write lock of *db* (byte 120 of its -shm file)."""
    inode = os.stat(f"{db}-shm").st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if (len(f) >= 8 and f[1] == "POSIX" and f[3] == "WRITE" and f[4] == str(pid)
                and f[5].endswith(f":{inode}") and int(f[6]) <= 120 <= int(f[7])):
            return True
    return False


def stop_inside_a_write(proc: subprocess.Popen[str], db: Path) -> None:
    """SIGSTOP *proc* at a moment it holds the record's write lock (stop, look, continue and
    try again until it does: a bounded hunt, each step waited on)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        os.kill(proc.pid, signal.SIGSTOP)
        wait_until(lambda: state(proc.pid) == b"T", 30, "the controller stopped")
        if holds_write_lock(proc.pid, db):
            return
        os.kill(proc.pid, signal.SIGCONT)
        wait_until(lambda: state(proc.pid) != b"T", 30, "the controller continued")
        time.sleep(random.uniform(0, 0.03))
    pytest.fail("never caught the controller inside a write")


def two_controllers(root: Path) -> tuple[subprocess.Popen[str], subprocess.Popen[str], Path]:
    """b, then a, both with their first two trials running; b stopped inside a write."""
    db = root / ".dse" / "dse.sqlite"
    b = start(root, "run", "b.toml")
    wait_until(lambda: Counter(c for w, c, _, _ in events(root) if w == "start")["b"] == 2,
               120, "b's two trials started", seen=lambda: stderr(b))
    wait_until(lambda: db.exists() and record(root, "SELECT COUNT(*) FROM progress")[0][0],
               120, "b's trials' progress recorded", seen=lambda: stderr(b))
    a = start(root, "run", "a.toml")
    wait_until(lambda: Counter(c for w, c, _, _ in events(root) if w == "start")["a"] == 2,
               120, "a's two trials started", seen=lambda: stderr(a))
    stop_inside_a_write(b, db)
    return a, b, db


def test_a_controller_stopped_inside_a_write_holds_the_others_until_continued(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    a, b, _ = two_controllers(root)
    stopped_at = time.time()
    (root / "hold-a").unlink()  # a's running trials end: a has their ends to record
    line = f"record busy: {root / '.dse' / 'dse.sqlite'} is held by campaign b (pid {b.pid}," \
           " stopped); waiting until it is continued"
    wait_until(lambda: line in stderr(a), 120, "a saying who holds the record",
               seen=lambda: stderr(a))
    # The readers of a WAL record are not held up: `dse status` answers meanwhile.
    status = subprocess.run([sys.executable, "-m", "dse", "status"], cwd=root,
                            env=dse_env(root), capture_output=True, text=True, timeout=120,
                            check=False)
    assert status.returncode == 0, status.stderr
    assert " a " in status.stdout, status.stdout
    assert " b " in status.stdout, status.stdout
    # a's trials ran on and ended while b was stopped; a outlives the old busy timeout.
    wait_until(lambda: sum(1 for w, c, _, at in events(root) if (w, c) == ("end", "a")
                           and at > stopped_at) == 2, 120, "a's trials ended meanwhile")
    waited = time.monotonic() + BUSY_TIMEOUT_S + 5
    while time.monotonic() < waited:
        assert a.poll() is None, stderr(a)
        assert state(b.pid) == b"T"
        time.sleep(0.5)
    assert stderr(a).count("record busy") == 1, stderr(a)  # said once
    assert record(root, "SELECT COUNT(*) FROM trials t JOIN campaigns c ON c.id = t.campaign_id"
                        " WHERE c.name = 'a' AND t.status = 'completed'") == [(0,)]

    os.kill(b.pid, signal.SIGCONT)
    (root / "hold-b").unlink()
    for proc in (a, b):
        proc.communicate(timeout=240)
        assert proc.returncode == 0, stderr(proc)
        assert "internal error" not in stderr(proc), stderr(proc)
    assert "record free again after" in stderr(a), stderr(a)
    # Nothing lost, nothing run twice.
    ran = Counter((c, x) for w, c, x, _ in events(root) if w == "start")
    assert ran == Counter({("a", 1): 1, ("a", 2): 1, ("a", 3): 1, ("a", 4): 1,
                           ("b", 101): 1, ("b", 102): 1}), ran
    assert sorted(record(root, "SELECT c.name, t.status, COUNT(*) FROM trials t JOIN campaigns"
                               " c ON c.id = t.campaign_id GROUP BY 1, 2")) == [
        ("a", "completed", 4), ("b", "completed", 2)]
    assert record(root, "PRAGMA integrity_check") == [("ok",)]


def test_ctrl_c_twice_while_waiting_on_a_stopped_controller_stops_at_once(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    a, b, _ = two_controllers(root)
    (root / "hold-a").unlink()
    wait_until(lambda: "record busy" in stderr(a), 120, "a waiting on the record",
               seen=lambda: stderr(a))
    # Ctrl+C, and again (two signals at once are one to Python): a exits while b is stopped.
    deadline = time.monotonic() + 60
    while a.poll() is None and time.monotonic() < deadline:
        os.kill(a.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            a.wait(timeout=3)
    a.communicate(timeout=60)
    assert state(b.pid) == b"T"
    assert a.returncode == 130, stderr(a)
    assert "internal error" not in stderr(a), stderr(a)
    assert "Traceback" not in stderr(a), stderr(a)

    os.kill(b.pid, signal.SIGCONT)
    (root / "hold-b").unlink()
    b.communicate(timeout=240)
    assert b.returncode == 0, stderr(b)
    # a's run resumes and ends: what it had recorded kept, nothing of it run twice.
    again = start(root, "run", "a.toml")
    again.communicate(timeout=240)
    assert again.returncode == 0, stderr(again)
    assert record(root, "SELECT COUNT(DISTINCT t.params) FROM trials t JOIN campaigns c"
                        " ON c.id = t.campaign_id WHERE c.name = 'a' AND t.status IN"
                        " ('completed', 'cached')") == [(4,)]
    assert record(root, "PRAGMA integrity_check") == [("ok",)]


HOLDER = r"""
import os, signal, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")  # what a writer holds while it commits to a rollback journal
os.kill(os.getpid(), signal.SIGSTOP)
db.execute("COMMIT")
"""


def test_the_reading_commands_wait_out_a_writer_stopped_on_a_rollback_journal(
    tmp_path: Path,
) -> None:
    # A record on a network file system has a rollback journal: its readers wait for a
    # writer's exclusive lock (a WAL record's never do).
    root = project(tmp_path)
    (root / "hold-a").unlink()
    env = {"DSE_SQLITE_JOURNAL": "delete"}
    first = start(root, "run", "a.toml", env=env)
    first.communicate(timeout=240)
    assert first.returncode == 0, stderr(first)
    db = root / ".dse" / "dse.sqlite"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)])
    STARTED.append(holder)  # type: ignore[arg-type]  # reaped like a controller
    wait_until(lambda: state(holder.pid) == b"T", 60, "the writer stopped holding the record")

    readers = [start(root, *args, env=env)
               for args in (("status",), ("report", "a.toml"), ("show", "a:2"))]
    command = Path(f"/proc/{holder.pid}/comm").read_text().strip()  # python, python3...
    line = f"dse.sqlite is held by {command} (pid {holder.pid}, stopped); waiting until it is"
    for reader in readers:
        wait_until(functools.partial(said, reader, line), 120,
                   "the reader saying who holds it", seen=functools.partial(stderr, reader))
    waited = time.monotonic() + BUSY_TIMEOUT_S + 5
    while time.monotonic() < waited:
        assert all(r.poll() is None for r in readers), [stderr(r) for r in readers]
        time.sleep(0.5)
    os.kill(holder.pid, signal.SIGCONT)
    holder.wait(timeout=60)
    for reader in readers:
        out, _ = reader.communicate(timeout=120)
        assert reader.returncode == 0, stderr(reader)
        assert "record free again" in stderr(reader), stderr(reader)
        assert "a" in out
    assert "trial a-1-2" in out  # dse show's record, read once the writer let go
