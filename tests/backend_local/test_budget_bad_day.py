"""Budgets on the bad day, on real processes: a wrapper (or its trial) stopped from outside,
a rerun of a campaign whose budget is spent, and a wall clock that steps while dse runs.

Each runs `dse` as a user does (a real controller, real wrappers, the record a real SQLite
file) and waits, bounded, on the state it needs (``support.waiting``): beside a CPU hog at
load 8 every step takes longer, and the bounds are set for that.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from support.cli import run_dse, start_dse, write_plugin
from support.procs import stat_fields
from support.waiting import wait_until

PRICE = 3600.0
"""USD per CPU-hour: one USD per second of a one-CPU trial."""
LIMIT, GRACE, MARGIN = 3.0, 1.0, 1.0
RESERVED = LIMIT + GRACE + MARGIN
"""What each trial reserves, in USD (seconds): its time limit, the local backend's grace and
the second its wrapper has to end it (``LocalBackend.overrun_s``)."""
CEILING = 12.0
PASS = 3.0
"""The bound of docs/budgets.md: a ceiling is passed by at most one pass's worth of what
runs at once; here one trial at a time, and a pass of at most 3 s beside the hog."""
FROZEN_S = 30.0
"""How long the test keeps a process stopped at most (then continues it, whatever dse did)."""

CAMPAIGN = """
[campaign]
name = "bad"
agent = "list"
backend = "local"
mode = "rolling"
max_parallelism = 1
poll_interval = ["0.05s", "0.2s"]

[agent.list]
points = [POINTS]

[environment]
command = ["python", "work.py", "{x}", "{s}"]
time_limit = "LIMITs"

[backend.local]
cpus = 2
grace = "GRACEs"

[backend.local.price]
cpu_hour = PRICE

BUDGET

[[objectives]]
metric = "value"

[space]
x = { type = "int", low = 0, high = 1000 }
s = { type = "float", low = 0, high = 1000 }
"""

# The trial notes its pid, starts a grandchild in a session of its own (out of reach of a
# kill of the wrapper's session alone), then works for s seconds.
WORK = """
import os, subprocess, sys, time
import dse.trial
trial_dir = os.environ["DSE_TRIAL_DIR"]
if float(sys.argv[2]) > 10:
    subprocess.Popen(["sleep", "300"], start_new_session=True)
with open(os.path.join(trial_dir, "pid.tmp"), "w") as handle:
    handle.write(str(os.getpid()))
os.replace(os.path.join(trial_dir, "pid.tmp"), os.path.join(trial_dir, "pid"))
time.sleep(float(sys.argv[2]))
dse.trial.report({"value": float(sys.argv[1])})
"""


def project(tmp_path: Path, points: list[tuple[int, float]], budget: str,
            extra: str = "") -> Path:
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK + extra)
    text = (CAMPAIGN.replace("POINTS", ", ".join(f"{{ x = {x}, s = {s} }}" for x, s in points))
            .replace("LIMIT", f"{LIMIT:g}").replace("GRACE", f"{GRACE:g}")
            .replace("PRICE", f"{PRICE:g}").replace("BUDGET", budget))
    (tmp_path / "c.toml").write_text(text)
    return tmp_path


def rows(project_dir: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """What the record says now (read-only; it may be mid-run)."""
    try:
        db = sqlite3.connect(f"file:{project_dir / '.dse' / 'dse.sqlite'}?mode=ro", uri=True,
                             timeout=30)
    except sqlite3.OperationalError:
        return []  # not made yet
    try:
        return db.execute(sql, args).fetchall()
    except sqlite3.OperationalError:
        return []  # its tables not made yet
    finally:
        db.close()


def of_trial(trial_dir: Path) -> list[int]:
    """The live processes carrying *trial_dir* as their DSE_TRIAL_DIR."""
    marker = b"DSE_TRIAL_DIR=" + os.fsencode(trial_dir) + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        fields = stat_fields(int(name))
        if marker in environ + b"\0" and fields is not None and fields[0] != b"Z":
            found.append(int(name))
    return found


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@pytest.mark.parametrize("frozen", ["wrapper", "trial", "both"])
def test_a_stopped_wrapper_or_trial_ends_at_its_limit_and_is_charged_the_controllers_time(
    tmp_path: Path, frozen: str
) -> None:
    # Trial 1 works 60 s against a 3 s limit; the test stops its wrapper (or the trial, or
    # both) at once. A stopped wrapper could not end it: it ran on, and was charged the
    # wrapper's own stamps once continued (30 USD against a 12 USD ceiling).
    proj = project(tmp_path, [(1, 60.0), *((x, 0.5) for x in range(2, 30))],
                   f'[budget]\nmoney = "{CEILING:g} USD"')
    controller = start_dse(proj, "run", "c.toml")
    trial_dir = proj / ".dse" / "bad" / "run-1" / "000001"
    pid = int(wait_until(lambda: (trial_dir / "pid").exists() and (trial_dir / "pid").read_text(),
                         60, "trial 1 to start"))
    fields = stat_fields(pid)
    assert fields is not None
    wrapper = int(fields[1])  # the workload's parent
    stopped = {"wrapper": [wrapper], "trial": [pid], "both": [wrapper, pid]}[frozen]
    signal_all(stopped, signal.SIGSTOP)
    began = time.monotonic()
    try:
        # Ended, every process of it gone, the grandchild in its own session too.
        wait_until(lambda: not of_trial(trial_dir), FROZEN_S, "trial 1's processes to be gone",
                   seen=lambda: f"pids {of_trial(trial_dir)} " + " | ".join(
                       Path(f"/proc/{p}/stat").read_text() for p in of_trial(trial_dir))
                   + f" wrapper {wrapper} pid {pid}")
        gone_after = time.monotonic() - began
    finally:
        signal_all(stopped, signal.SIGCONT)
    out, err = controller.communicate(timeout=180)

    assert controller.returncode == 0, err
    assert gone_after <= RESERVED + PASS + 2.0
    ((state, reason, spend),) = rows(
        proj, "SELECT a.state, a.reason, json_extract(a.spend, '$.money') FROM attempts a"
        " JOIN trials t ON t.id = a.trial_id WHERE t.number = 1")
    assert state == "timeout", reason
    assert spend <= RESERVED + PASS
    ((status, failure),) = rows(proj, "SELECT status, failure FROM trials WHERE number = 1")
    assert (status, failure) == ("budget_exhausted", "time_limit")
    ((total,),) = rows(proj, "SELECT SUM(json_extract(spend, '$.money')) FROM attempts")
    assert total <= CEILING + PASS
    assert "budget exhausted: money ceiling 12 USD" in out
    assert not of_trial(trial_dir)
    ((check,),) = rows(proj, "PRAGMA integrity_check")
    assert check == "ok"


def run(proj: Path, *args: str) -> tuple[int, str]:
    proc = run_dse(proj, "run", "c.toml", *args, timeout=240)
    return proc.returncode, proc.stdout + proc.stderr


def dispatched(proj: Path) -> list[int]:
    """Trials each run dispatched (not cache hits), by run."""
    return [n for _, n in rows(proj, "SELECT campaign_id, dispatched FROM run_totals"
                                     " ORDER BY campaign_id")]


def test_a_rerun_of_a_spent_campaign_runs_nothing_new_and_says_how_to_spend_more(
    tmp_path: Path,
) -> None:
    proj = project(tmp_path, [(x, 0.0) for x in range(1, 14)], "[budget]\ntrials = 4")
    assert run(proj)[0] == 0
    for again in (2, 3):
        code, text = run(proj)
        assert code == 0, text
        spent = [line for line in text.splitlines() if line.startswith("budget spent:")]
        assert spent == [
            "budget spent: trials ceiling 4 reached, 4 of 4 trials (4 by earlier runs "
            + ", ".join(str(r) for r in range(1, again)) + " of the campaign, 0 by this one);"
            " to spend more, raise it (--set budget.trials=8) or give each run its own"
            " (--set budget.scope=run)"]
        # Answered from the record: its four configurations, cache hits.
        assert rows(proj, "SELECT status, COUNT(*) FROM trials WHERE campaign_id = ?"
                          " GROUP BY status ORDER BY status", (again,)) == [
            ("budget_exhausted", 1), ("cached", 4)]
    assert dispatched(proj) == [4, 0, 0]
    ((ran,),) = rows(proj, "SELECT COUNT(*) FROM trials WHERE status = 'completed'")
    assert ran == 4

    code, text = run(proj, "--set", "budget.trials=8")  # raised: four more, no more
    assert code == 0, text
    assert dispatched(proj) == [4, 0, 0, 4]


def test_a_resumed_run_continues_the_campaigns_ceiling(tmp_path: Path) -> None:
    # Killed (-9) with trials to go; the resume dispatches only what the ceiling has left.
    proj = project(tmp_path, [(x, 1.0) for x in range(1, 14)], "[budget]\ntrials = 4")
    controller = start_dse(proj, "run", "c.toml")
    wait_until(lambda: rows(proj, "SELECT COUNT(*) FROM trials WHERE status = 'completed'")
               in ([(2,)], [(3,)]), 120, "two trials to end")
    controller.kill()
    controller.wait(timeout=60)
    code, text = run(proj)
    assert code == 0, text
    assert "resuming it" in text
    assert dispatched(proj) == [4]
    code, text = run(proj)  # and a rerun after it: nothing new
    assert code == 0, text
    assert dispatched(proj) == [4, 0]


# -- a wall clock that steps -----------------------------------------------------------------

FAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), None)
"""libfaketime (Debian's ``faketime`` package): the controller's wall clock is moved from
outside while it runs, its monotonic clock left alone."""

# libfaketime 0.9.10 fails Python's time.sleep (clock_nanosleep on an absolute monotonic
# time) with EINVAL when it leaves the monotonic clock alone: sleep through select instead,
# in every Python the test starts (the controller and the trials; not `python -S`).
SHIM = """
import os, select, time
if "faketime" in os.environ.get("LD_PRELOAD", ""):
    def _sleep(seconds):
        select.select([], [], [], max(float(seconds), 0.0))
    time.sleep = _sleep
"""


@pytest.mark.skipif(FAKETIME is None, reason="needs libfaketime (apt-get install faketime)")
@pytest.mark.parametrize("step", ["+3600", "-3600"], ids=["forward-1h", "back-1h"])
def test_a_wall_clock_step_neither_ends_nor_stretches_a_wall_clock_budget(
    tmp_path: Path, step: str
) -> None:
    # A 12 s wall-clock budget, trials of 0.3 s; the wall clock steps by an hour after the
    # first trial ends. Measured on the monotonic clock, it ends 12 s after it began: a step
    # forward ended it at once, a step back would have let it run an hour.
    proj = project(tmp_path, [(x, 0.3) for x in range(1, 300)],
                   '[budget]\nwall_clock = "12s"')
    (proj / "sitecustomize.py").write_text(SHIM)
    offset = tmp_path / "faketime.rc"
    offset.write_text("+0\n")
    env = {"LD_PRELOAD": str(FAKETIME), "FAKETIME_TIMESTAMP_FILE": str(offset),
           "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    began = time.monotonic()
    controller = start_dse(proj, "run", "c.toml", env=env)
    wait_until(lambda: rows(proj, "SELECT COUNT(*) FROM trials WHERE status = 'completed'")
               not in ([], [(0,)]), 60, "a first trial to end")
    offset.write_text(f"{step}\n")
    stepped = time.monotonic()
    try:
        out, err = controller.communicate(timeout=120)
    finally:
        offset.write_text("+0\n")
    took = time.monotonic() - began

    assert controller.returncode == 0, err
    ((status, reason, run_s),) = rows(proj, "SELECT status, end_reason, run_s FROM campaigns")
    assert (status, reason) == ("budget_exhausted", "budget_exhausted")
    assert "wall-clock ceiling reached" in out + err
    # It ran its 12 s after the step as before it, and no more than a trial and passes past.
    assert time.monotonic() - stepped > 2.0
    assert 12.0 - 1.0 <= run_s <= took
    assert took <= 12.0 + 30.0  # the controller's start beside the hog, not an hour
    # No attempt was charged the step (its run time is the controller's measure).
    walls = [w for (w,) in rows(proj, "SELECT json_extract(spend, '$.wall_s') FROM attempts"
                                      " WHERE spend IS NOT NULL")]
    assert walls
    assert max(walls) < 10.0
