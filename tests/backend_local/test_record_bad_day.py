"""The record on the bad day, on real controllers and real trial processes: a controller
killed -9 and its campaign run again changed (or ``--fresh``) closes the run it left before a
new one starts; a run's ownership survives a deleted lock file; a config a killed controller's
orphan still runs is not run beside it by another campaign; dse's own cancels before a restart
are not taken for someone else's.

Every trial is a real process that appends ``start <x> <time>`` and ``end <x> <time>`` to
``runs.log``, and holds while the file ``hold`` exists, so a test counts what actually ran,
and when, rather than what the record says.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dse
from support.cli import dse_env, run_dse, start_dse, write_plugin
from support.procs import alive
from support.waiting import wait_until

WORK = '''
import os, sys, time
import dse.trial
x = dse.trial.params()["x"]
def log(what):
    with open("runs.log", "a") as f:
        f.write(f"{what} {x} {time.time()} {os.getpid()}\\n")
log("start")
while os.path.exists("hold"):
    time.sleep(0.05)
log("end")
dse.trial.report({"value": float(x)})
'''


def campaign(name: str, xs: list[int], *, parallelism: int = 2) -> str:
    points = ", ".join(f"{{x = {x}}}" for x in xs)
    return f'''
[campaign]
name = "{name}"
agent = "list"
backend = "local"
max_parallelism = {parallelism}
poll_interval = ["0.05s", "0.2s"]

[agent.list]
points = [{points}]

[environment]
command = ["{sys.executable}", "work.py"]
code_version = "v1"
time_limit = "5m"

[backend.local]
cpus = 4

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 1000 }}
'''


def project(tmp_path: Path, campaigns: dict[str, str]) -> Path:
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "hold").touch()
    for name, text in campaigns.items():
        (tmp_path / f"{name}.toml").write_text(text)
    return tmp_path


def events(root: Path) -> list[tuple[str, int, float, int]]:
    """What the trials logged: (start|end, x, time, pid), in order."""
    path = root / "runs.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:  # a line being written is read next time
            out.append((parts[0], int(parts[1]), float(parts[2]), int(parts[3])))
    return out


def started(root: Path) -> Counter[int]:
    return Counter(x for what, x, _, _ in events(root) if what == "start")


def most_at_once(root: Path) -> int:
    """The most trial processes that ran at one time, from their own start and end lines."""
    at_once = top = 0
    for what, *_ in sorted(events(root), key=lambda e: (e[2], e[0] == "start")):
        at_once += 1 if what == "start" else -1
        top = max(top, at_once)
    return top


def record(root: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    db = sqlite3.connect(root / ".dse" / "dse.sqlite")
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def kill_controller(proc: subprocess.Popen[str]) -> None:
    """``kill -9`` of the controller alone: its trials' processes live on, orphans."""
    proc.kill()
    proc.communicate(timeout=60)


def test_a_changed_campaign_closes_the_killed_run_before_a_new_one(tmp_path: Path) -> None:
    root = project(tmp_path, {"c": campaign("c", [1, 2, 3, 4])})
    first = start_dse(root, "run", "c.toml")
    wait_until(lambda: len(started(root)) == 2, 120, "two trials started", seen=lambda: str(
        events(root)))
    kill_controller(first)
    orphans = [pid for what, _, _, pid in events(root) if what == "start"]
    assert all(alive(pid) for pid in orphans)
    second = start_dse(root, "run", "c.toml", "--set", "max_parallelism=1")
    (root / "hold").unlink()
    _, err = second.communicate(timeout=240)
    assert second.returncode == 0, err
    assert ("run 1 of c did not finish, but the campaign changed since: --set max_parallelism:"
            " 2 (the file) before, 1 now; its 2 running trials finish first, recorded in run 1"
            " (which then ends superseded); then a new run starts") in err, err
    # Run 1 is closed with its trials' results; run 2 reuses them and runs the rest.
    runs = record(root, "SELECT id, status, end_reason FROM campaigns ORDER BY id")
    assert runs == [(1, "stopped", "superseded"), (2, "completed", "agent_exhausted")], runs
    run1 = record(root, "SELECT status, metrics FROM trials WHERE campaign_id = 1")
    assert sorted(s for s, _ in run1) == ["completed", "completed"], run1
    run2 = Counter(s for (s,) in record(root, "SELECT status FROM trials WHERE campaign_id = 2"))
    assert run2 == {"cached": 2, "completed": 2}, run2
    # Each configuration ran once, never more than the two orphans at a time, and none of
    # run 2's trials beside them.
    assert started(root) == {1: 1, 2: 1, 3: 1, 4: 1}, events(root)
    assert most_at_once(root) == 2, events(root)
    orphans_ended = max(t for what, x, t, _ in events(root) if what == "end" and x in (1, 2))
    later = [t for what, x, t, _ in events(root) if what == "start" and x in (3, 4)]
    assert min(later) >= orphans_ended, events(root)


def test_fresh_closes_the_killed_run_too(tmp_path: Path) -> None:
    root = project(tmp_path, {"c": campaign("c", [1, 2])})
    first = start_dse(root, "run", "c.toml")
    wait_until(lambda: len(started(root)) == 2, 120, "two trials started",
               seen=lambda: str(events(root)))
    kill_controller(first)
    second = start_dse(root, "run", "c.toml", "--fresh")
    (root / "hold").unlink()
    _, err = second.communicate(timeout=240)
    assert second.returncode == 0, err
    assert "run 1 of c is running; its 2 running trials finish first" in err, err
    runs = record(root, "SELECT id, status, end_reason FROM campaigns ORDER BY id")
    assert runs == [(1, "stopped", "superseded"), (2, "completed", "agent_exhausted")], runs
    # --fresh reuses nothing: run 2 measures both again, after run 1's ended.
    assert started(root) == {1: 2, 2: 2}, events(root)
    assert most_at_once(root) == 2, events(root)
    assert record(root, "SELECT COUNT(*) FROM trials WHERE status = 'running'") == [(0,)]


def test_a_changed_campaign_closes_a_killed_run_with_nothing_running(tmp_path: Path) -> None:
    root = project(tmp_path, {"c": campaign("c", [1, 2])})
    (root / "hold").unlink()
    done = run_dse(root, "run", "c.toml", timeout=240)
    assert done.returncode == 0, done.stderr
    # The controller died between passes, its trials recorded: the run is left running.
    db = sqlite3.connect(root / ".dse" / "dse.sqlite")
    with db:
        db.execute("UPDATE campaigns SET status = 'running', end_reason = NULL, ended_at = NULL")
    db.close()
    again = run_dse(root, "run", "c.toml", "--set", "max_parallelism=1", timeout=240)
    assert again.returncode == 0, again.stderr
    assert "closing it (superseded), then starting a new run" in again.stderr, again.stderr
    runs = record(root, "SELECT id, status, end_reason FROM campaigns ORDER BY id")
    assert runs == [(1, "stopped", "superseded"), (2, "completed", "agent_exhausted")], runs
    assert started(root) == {1: 1, 2: 1}, events(root)


def test_python_run_closes_the_killed_run_too(tmp_path: Path) -> None:
    root = project(tmp_path, {"c": campaign("c", [1, 2, 3])})
    first = start_dse(root, "run", "c.toml")
    wait_until(lambda: len(started(root)) == 2, 120, "two trials started",
               seen=lambda: str(events(root)))
    kill_controller(first)
    (root / "hold").unlink()
    script = root / "again.py"
    script.write_text(
        "import dse\n"
        "r = dse.run('c.toml', quiet=True, fresh=False)\n"
        "print(r.counts)\n"
    )
    (root / "c.toml").write_text(campaign("c", [1, 2, 3], parallelism=1))
    done = subprocess_run(root, script)
    assert done.returncode == 0, done.stderr
    runs = record(root, "SELECT id, status, end_reason FROM campaigns ORDER BY id")
    assert runs == [(1, "stopped", "superseded"), (2, "completed", "agent_exhausted")], runs
    assert started(root) == {1: 1, 2: 1, 3: 1}, events(root)


def subprocess_run(root: Path, script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script)], cwd=root, env=dse_env(root),
                          capture_output=True, text=True, timeout=240, check=False)



def test_a_deleted_lock_file_does_not_let_a_second_controller_drive_the_run(
        tmp_path: Path) -> None:
    root = project(tmp_path, {"c": campaign("c", [1, 2, 3])})
    first = start_dse(root, "run", "c.toml")
    wait_until(lambda: len(started(root)) == 2, 120, "two trials started",
               seen=lambda: str(events(root)))
    (root / ".dse" / "c.lock").unlink()
    for args in (("run", "c.toml"), ("run", "c.toml", "--set", "max_parallelism=1")):
        second = run_dse(root, *args, timeout=120)
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(
            f"dse: error: campaign 'c' is already running: driven by pid {first.pid} on host"
        ), lines
        assert "as the record says (its lease" in lines[0], lines
    (root / "hold").unlink()
    _, err = first.communicate(timeout=240)
    assert first.returncode == 0, err
    runs = record(root, "SELECT id, status FROM campaigns ORDER BY id")
    assert runs == [(1, "completed")], runs
    assert started(root) == {1: 1, 2: 1, 3: 1}, events(root)


def test_a_project_moved_after_a_kill_resumes_where_it_is_now(tmp_path: Path) -> None:
    (tmp_path / "before").mkdir()
    root = project(tmp_path / "before", {"c": campaign("c", [1, 2, 3])})
    first = start_dse(root, "run", "c.toml")
    wait_until(lambda: len(started(root)) == 2, 120, "two trials started",
               seen=lambda: str(events(root)))
    kill_controller(first)
    moved = root.rename(tmp_path / "after")  # the orphans run on, in the moved directories
    again = start_dse(moved, "run", "c.toml")
    (moved / "hold").unlink()
    _, err = again.communicate(timeout=240)
    assert again.returncode == 0, err
    assert "internal error" not in err, err
    assert "run 1 of c did not finish: resuming it" in err, err
    assert record(moved, "SELECT id, status FROM campaigns") == [(1, "completed")]
    trials = record(moved, "SELECT number, status FROM trials ORDER BY number")
    assert trials == [(n, "completed") for n in (1, 2, 3)], trials
    # Every trial is read, and measured, where the project is now.
    store = dse.Store(moved / ".dse" / "dse.sqlite", read_only=True)
    try:
        dirs = [t.trial_dir for t in store.reads.trials(1)]
    finally:
        store.close()
    assert dirs == [str(moved / ".dse" / "c" / "run-1" / f"{n:06d}") for n in (1, 2, 3)]
    # The orphans could not hand in their results (the paths they were given went with the
    # move): that is no result about their configurations, which are measured again.
    failures = record(moved, "SELECT COUNT(*) FROM trials WHERE failure IS NOT NULL")
    assert failures == [(0,)], err
    assert all((moved / ".dse" / "c" / "run-1" / f"{n:06d}" / "result.json").is_file()
               for n in (1, 2, 3))
    assert record(moved, "PRAGMA integrity_check") == [("ok",)]


TERM_NOTED = """
import os, signal, time
def noted(signum, frame):
    with open("runs.log", "a") as f:
        f.write(f"term 0 {time.time()} {os.getpid()}\\n")
signal.signal(signal.SIGTERM, noted)
"""


def test_dse_s_own_cancels_before_a_restart_are_not_taken_for_someone_else_s(
        tmp_path: Path) -> None:
    root = project(tmp_path, {"c": campaign("c", [1, 2, 3]).replace(
        "cpus = 4", 'cpus = 4\ngrace = "2s"')})
    # Trials that note SIGTERM and go on: the first Ctrl+C's cancel is still waited on when
    # the second comes, and the controller leaves them to end (SIGKILL after the grace).
    (root / "work.py").write_text(TERM_NOTED + WORK)
    first = start_dse(root, "run", "c.toml")
    wait_until(lambda: len(started(root)) == 2, 120, "two trials started",
               seen=lambda: str(events(root)))
    first.send_signal(signal.SIGINT)
    wait_until(lambda: len({pid for what, _, _, pid in events(root) if what == "term"}) == 2, 60,
               "both trials asked to end", seen=lambda: str(events(root)))
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    # Left without waiting: the two trials' ends are not recorded yet.
    assert record(root, "SELECT COUNT(*) FROM trials WHERE status = 'running'") == [(2,)]
    (root / "hold").unlink()
    again = run_dse(root, "run", "c.toml", timeout=240)
    assert again.returncode == 0, again.stderr
    assert "outside this campaign" not in again.stdout + again.stderr, again.stderr
    reasons = record(root, "SELECT reason FROM attempts WHERE state != 'succeeded'")
    assert not any("outside" in str(r) for (r,) in reasons), reasons
    # The cancelled configurations are measured again, as a cancelled run's are.
    statuses = record(root, "SELECT number, status FROM trials ORDER BY number")
    assert statuses == [(1, "completed"), (2, "completed"), (3, "completed")], statuses



def test_a_config_a_killed_controller_s_orphan_runs_is_not_run_beside_it(
        tmp_path: Path) -> None:
    root = project(tmp_path, {"a": campaign("a", [1, 2]), "b": campaign("b", [1])})
    first = start_dse(root, "run", "a.toml")
    wait_until(lambda: len(started(root)) == 2, 120, "two trials started",
               seen=lambda: str(events(root)))
    kill_controller(first)
    other = start_dse(root, "run", "b.toml")
    # Campaign b's trial of x = 1 is recorded as soon as its controller decided: it waits on
    # the orphan of a that still runs it, rather than running it beside it.
    waiting = wait_until(lambda: record(
        root, "SELECT t.status, t.cache_of FROM trials t JOIN campaigns c"
        " ON c.id = t.campaign_id WHERE c.name = 'b'"), 120, "b's trial recorded")
    assert waiting[0][1] is not None, waiting
    assert started(root)[1] == 1, events(root)
    (root / "hold").unlink()  # the orphans end; a's controller never records them
    _, err = other.communicate(timeout=240)
    assert other.returncode == 0, err
    # Once the orphan is gone, b runs x = 1 itself: twice in all, never at once.
    assert started(root) == {1: 2, 2: 1}, events(root)
    runs = sorted((t, what) for what, x, t, _ in events(root) if x == 1)
    assert [what for _, what in runs] == ["start", "end", "start", "end"], runs
