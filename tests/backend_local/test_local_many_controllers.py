"""One workspace, many campaigns, many controllers: several `dse run` processes started at once
on campaign files of one directory share its `.dse/` record.

Every trial is a real process that appends its campaign and ``x`` to ``runs.log`` before it
reports, so a test counts the runs that actually happened rather than what the record says.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from support.cli import run_dse, start_dse, write_plugin

WORK = '''
import os, sys, time
import dse.trial
x = dse.trial.params()["x"]
with open("runs.log", "a") as log:
    log.write(f"{sys.argv[1]} {x}\\n")
time.sleep(float(sys.argv[2]))
dse.trial.report({"value": float(x)})
'''


def campaign(name: str, xs: list[int], *, sleep: float = 0.3, parallelism: int = 2) -> str:
    points = ", ".join(f"{{x = {x}}}" for x in xs)
    # The environment is the same in every campaign (the campaign's name is no part of a
    # config's identity), so the same x is the same configuration in all of them.
    return f'''
[campaign]
name = "{name}"
agent = "list"
backend = "local"
max_parallelism = {parallelism}
poll_interval = ["0.05s", "0.2s"]

[agent.list]
points = [{points}]
log = "{name}.told.jsonl"

[environment]
command = ["{sys.executable}", "work.py", "{{trial_id}}", "{sleep}"]
code_version = "v1"
time_limit = "60s"

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
    for name, text in campaigns.items():
        (tmp_path / f"{name}.toml").write_text(text)
    return tmp_path


def runs(path: Path) -> Counter[int]:
    """How many times each x actually ran, from the workload's own log."""
    lines = (path / "runs.log").read_text().split("\n")
    return Counter(int(line.split()[1]) for line in lines if line)


def record(path: Path, sql: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path / ".dse" / "dse.sqlite")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def told(path: Path, name: str) -> dict[int, tuple[str, float | None]]:
    """What campaign *name*'s agent was told: trial number → (status, score)."""
    out = {}
    for line in (path / f"{name}.told.jsonl").read_text().splitlines():
        number, status, score = json.loads(line)
        out[number] = (status, score)
    return out


def wait_all(procs: dict[str, subprocess.Popen[str]],
             timeout: float = 240) -> dict[str, tuple[int, str]]:
    """Wait for every `dse run` of *procs*; each one's exit code and stderr."""
    out = {}
    deadline = time.monotonic() + timeout
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        out[name] = (proc.returncode, err)
    return out


def test_two_campaigns_proposing_the_same_configs_at_once_run_each_once(tmp_path: Path) -> None:
    xs = [1, 2, 3, 4, 5, 6]
    path = project(tmp_path, {
        "left": campaign("left", xs, sleep=0.5),
        "right": campaign("right", xs, sleep=0.5),
    })
    procs = {name: start_dse(path, "run", f"{name}.toml") for name in ("left", "right")}
    ended = wait_all(procs)

    for name, (code, err) in ended.items():
        assert code == 0, f"{name}: {err}"
    assert runs(path) == Counter(dict.fromkeys(xs, 1))
    # Each campaign recorded every config: run by itself, or reusing the other's trial.
    rows = record(path, "SELECT c.name, t.params, t.status, t.cache_of, t.metrics FROM trials t"
                        " JOIN campaigns c ON c.id = t.campaign_id")
    for name in ("left", "right"):
        mine = [r for r in rows if r[0] == name]
        assert sorted(json.loads(str(r[1]))["x"] for r in mine) == xs
        assert all(r[2] in ("completed", "cached") for r in mine), mine
        assert all(json.loads(str(r[4]))["value"] == json.loads(str(r[1]))["x"] for r in mine)
        # Its agent was told a scored result of every config.
        heard = told(path, name)
        assert len(heard) == len(xs)
        assert all(status in ("completed", "cached") and score is not None
                   for status, score in heard.values()), heard
    ran = Counter(json.loads(str(r[1]))["x"] for r in rows if r[3] is None)
    assert ran == Counter(dict.fromkeys(xs, 1))
    assert record(path, "SELECT COUNT(*) FROM claims") == [(0,)]
    assert record(path, "PRAGMA integrity_check") == [("ok",)]


def test_three_controllers_one_killed_and_rerun_all_finish_and_nothing_runs_twice(
    tmp_path: Path,
) -> None:
    # "one" and "two" share configs 1-4; "three" (killed) has its own.
    plan = {"one": [1, 2, 3, 4, 11, 12], "two": [3, 4, 1, 2, 21, 22],
            "three": [31, 32, 33, 34, 35, 36]}
    path = project(tmp_path, {name: campaign(name, xs, sleep=0.6) for name, xs in plan.items()})
    procs = {name: start_dse(path, "run", f"{name}.toml") for name in plan}
    victim = procs.pop("three")
    # Kill it mid-run: once it has run something, before it has run everything.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        log = path / "runs.log"
        if log.exists() and any(x in runs(path) for x in plan["three"]):
            break
        time.sleep(0.05)
    assert victim.poll() is None, "the campaign to kill ended before it could be killed"
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=30)
    # A reader beside the writers waits for the record rather than failing.
    while all(proc.poll() is None for proc in procs.values()):
        status = run_dse(path, "status", "--json", timeout=60)
        assert status.returncode == 0, status.stderr
    ended = wait_all(procs)
    rerun = run_dse(path, "run", "three.toml", timeout=240)

    for name, (code, err) in ended.items():
        assert code == 0, f"{name}: {err}"
    assert rerun.returncode == 0, rerun.stderr
    assert "internal error" not in rerun.stderr
    assert record(path, "PRAGMA integrity_check") == [("ok",)]
    # Every config ran exactly once, though "one" and "two" proposed four of theirs each.
    everything = {x for xs in plan.values() for x in xs}
    assert runs(path) == Counter(dict.fromkeys(everything, 1))
    rows = record(path, "SELECT c.name, c.status, t.params, t.status, t.cache_of FROM trials t"
                        " JOIN campaigns c ON c.id = t.campaign_id")
    assert {r[1] for r in rows} == {"completed"}
    results = Counter(json.loads(str(r[2]))["x"] for r in rows
                      if r[4] is None and r[3] == "completed")
    assert results == Counter(dict.fromkeys(everything, 1))
    for name, xs in plan.items():
        assert sorted(json.loads(str(r[2]))["x"] for r in rows if r[0] == name) == sorted(xs)
    assert record(path, "SELECT COUNT(*) FROM claims") == [(0,)]
