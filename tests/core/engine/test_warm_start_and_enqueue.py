"""``[agent] warm_start`` and ``[[enqueue]]`` through real ``dse run`` processes (the probe
backend, an agent of the test's own that logs every call it gets):

* a new run's agent is told the valid results of the runs ``warm_start`` names before its
  first proposal — values outside its space left out and counted, params the source lacked
  filled or the trial left out, extra params dropped — and a resumed run (its controller
  SIGKILLed) replays exactly what it was told, from the record;
* enqueued configurations (the campaign file's, ``dse enqueue``'s while a run runs, and
  ``dse.enqueue``'s) run before the agent's proposals, once each, and the agent is told their
  results like its own; a bad one is refused in one line before anything is written.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest

import dse

if TYPE_CHECKING:
    from pathlib import Path

AGENT = """\
import json, os, random, signal

class Logged:
    def __init__(self, space, seed=0):
        self.space, self.rng, self.calls = space, random.Random(seed), 0

    exhausted = False

    def propose(self, n, in_flight):
        self.calls += 1
        if str(self.calls) == os.environ.get("DIE_AT_PROPOSE"):
            os.kill(os.getpid(), signal.SIGKILL)
        out = [self.space.sample(self.rng) for _ in range(n)]
        self._log({"propose": n, "got": out, "in_flight": [dict(p) for p in in_flight]})
        return out

    def observe(self, observations):
        self._log({"observe": [{"params": dict(o.params), "score": o.score,
                                "status": None if o.status is None else o.status.value,
                                "proposal": o.proposal} for o in observations]})

    def _log(self, item):
        with open(os.environ["AGENT_LOG"], "a") as f:
            f.write(json.dumps(item) + "\\n")
"""

SCRIPT = """\
from dse.testing import ProbeScript

def script(p):
    return ProbeScript(passes=1, metrics={"loss": (p["x"] - 1) ** 2 + p.get("y", 0)})
"""

SOURCE = """\
[campaign]
name = "source"
agent = "logged_agent:Logged"
backend = "probe"
max_parallelism = 2
max_trials = 12
seed = 3
poll_interval = "1ms"

[backend.probe]
script = "quad:script"

[[objectives]]
metric = "loss"

[space]
x = { type = "float", low = -4, high = 4 }
y = { type = "int", low = 0, high = 3 }
"""

WARM = """\
[campaign]
name = "warm"
agent = "logged_agent:Logged"
backend = "probe"
max_parallelism = 2
max_trials = 6
seed = 4
poll_interval = "1ms"

[agent]
warm_start = ["source"]

[backend.probe]
script = "quad:script"

[[objectives]]
metric = "loss"

[space]
x = { type = "float", low = 0, high = 4 }
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "logged_agent.py").write_text(AGENT)
    (tmp_path / "quad.py").write_text(SCRIPT)
    (tmp_path / "source.toml").write_text(SOURCE)
    return tmp_path


def _dse(project: Path, *args: str, log: str = "agent.log",
         extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH="", AGENT_LOG=str(project / log), **(extra or {}))
    env.pop("DSE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "dse", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _calls(project: Path, log: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (project / log).read_text().splitlines()]


def _rows(project: Path, run: int) -> list[tuple[int, dict[str, Any], str]]:
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        return [(n, json.loads(p), s) for n, p, s in db.execute(
            "SELECT proposal, params, status FROM trials WHERE campaign_id = ? ORDER BY number",
            (run,))]
    finally:
        db.close()


def test_warm_start_tells_the_agent_the_sources_results_before_its_first_proposal(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    assert _dse(project, "run", "source.toml", log="source.log").returncode == 0
    source = _rows(project, 1)
    assert len(source) == 12
    # The new space has x in [0, 4] and no y: y is dropped (its results projected), and the
    # source's x < 0 are outside the space: left out and counted.
    inside = [p for _, p, _ in source if p["x"] >= 0]
    (project / "warm.toml").write_text(WARM)
    done = _dse(project, "run", "warm.toml")
    assert done.returncode == 0, done.stderr
    outside = len(source) - len(inside)
    assert (f"warm start: the agent was told {len(inside)} result(s) of source (run 1); left"
            f" out {outside} outside the space") in done.stderr
    calls = _calls(project, "agent.log")
    first = calls[0]["observe"]  # before any proposal
    assert "propose" in calls[1]
    assert sorted(o["params"]["x"] for o in first) == sorted(p["x"] for p in inside)
    assert all(o["proposal"] is None and o["status"] == "completed" for o in first)
    # Scored by this campaign's scorer, from the source's metrics.
    by_x = {p["x"]: (p["x"] - 1) ** 2 + p["y"] for p in inside}
    assert all(o["score"] == pytest.approx(by_x[o["params"]["x"]]) for o in first)
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    kinds = [k for (k,) in db.execute("SELECT kind FROM agent_log WHERE campaign_id = 2"
                                      " ORDER BY id")]
    assert kinds[0] == "warm"
    ((data,),) = db.execute("SELECT data FROM events WHERE campaign_id = 2"
                            " AND kind = 'warm_start'").fetchall()
    event = json.loads(data)
    assert event["sources"] == [1]
    assert event["dropped"] == {"outside the space": outside}
    assert len(event["told"]) == len(inside)


def test_a_param_the_sources_lacked_is_filled_or_the_trial_left_out(tmp_path: Path) -> None:
    project = _project(tmp_path)
    assert _dse(project, "run", "source.toml", log="source.log").returncode == 0
    wider = WARM.replace('x = { type = "float", low = 0, high = 4 }',
                         'x = { type = "float", low = -4, high = 4 }\n'
                         'y = { type = "int", low = 0, high = 3 }\nz = ["a", "b"]')
    (project / "lacking.toml").write_text(wider.replace('name = "warm"', 'name = "lacking"'))
    done = _dse(project, "run", "lacking.toml", log="lacking.log")
    assert done.returncode == 0, done.stderr
    assert "told 0 result(s) of source (run 1); left out 12 lacking params" in done.stderr
    filled = wider.replace('name = "warm"', 'name = "filled"').replace(
        'warm_start = ["source"]', 'warm_start = ["source"]\nwarm_start_fill = { z = "b" }')
    (project / "filled.toml").write_text(filled)
    done = _dse(project, "run", "filled.toml", log="filled.log")
    assert done.returncode == 0, done.stderr
    first = _calls(project, "filled.log")[0]["observe"]
    assert len(first) == 12
    assert {o["params"]["z"] for o in first} == {"b"}


def test_a_resumed_run_replays_the_warm_start_it_recorded(tmp_path: Path) -> None:
    project = _project(tmp_path)
    assert _dse(project, "run", "source.toml", log="source.log").returncode == 0
    (project / "warm.toml").write_text(WARM)
    killed = _dse(project, "run", "warm.toml", extra={"DIE_AT_PROPOSE": "2"})
    assert killed.returncode == -signal.SIGKILL
    told = _calls(project, "agent.log")[0]["observe"]
    # More results for the source after the kill: the replay tells what was told, not these.
    more = SOURCE.replace("max_trials = 12", "max_trials = 20")
    (project / "source.toml").write_text(more)
    assert _dse(project, "run", "source.toml", log="source.log").returncode == 0
    (project / "agent.log").unlink()
    done = _dse(project, "run", "warm.toml")
    assert done.returncode == 0, done.stderr
    calls = _calls(project, "agent.log")
    assert calls[0]["observe"] == told  # the resumed run's agent: the same warm start
    assert len(_rows(project, 2)) == 6


def test_a_warm_start_from_runs_the_record_lacks_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    assert _dse(project, "run", "source.toml", log="source.log").returncode == 0
    (project / "warm.toml").write_text(WARM.replace('["source"]', '["sorce"]'))
    done = _dse(project, "run", "warm.toml")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "agent.warm_start: no campaign 'sorce' in the record" in lines[0]
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    assert db.execute("SELECT COUNT(*) FROM campaigns").fetchone() == (1,)


ENQUEUED = SOURCE.replace('name = "source"', 'name = "queued"') + """
[[enqueue]]
x = 1
y = 0

[[enqueue]]
x = 2.5
y = 3
"""


def test_enqueued_configurations_run_before_the_agents_proposals_and_are_told(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    (project / "queued.toml").write_text(ENQUEUED)
    # Enqueued before the first run, from Python and from the command line.
    dse.enqueue(project / "queued.toml", {"x": -3, "y": 1})
    added = _dse(project, "enqueue", "queued.toml", "--set", "x=0.5", "--set", "y=2")
    assert added.returncode == 0, added.stderr
    assert "enqueued 1 configuration for campaign queued (2 waiting)" in added.stdout
    done = _dse(project, "run", "queued.toml")
    assert done.returncode == 0, done.stderr
    rows = _rows(project, 1)
    assert len(rows) == 12
    # The record's queue first (oldest first), then the campaign file's, then the agent's.
    assert [p for _, p, _ in rows[:4]] == [
        {"x": -3.0, "y": 1}, {"x": 0.5, "y": 2}, {"x": 1.0, "y": 0}, {"x": 2.5, "y": 3}]
    assert [n for n, _, _ in rows] == list(range(1, 13))
    calls = _calls(project, "agent.log")
    proposed = [c for c in calls if "propose" in c]
    assert sum(len(c["got"]) for c in proposed) == 8  # the agent made the other 8
    told = {o["proposal"]: o for c in calls if "observe" in c for o in c["observe"]}
    assert sorted(told) == list(range(1, 13))  # every result told, the enqueued ones too
    assert told[3]["score"] == pytest.approx(0.0)
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    assert db.execute("SELECT COUNT(*) FROM enqueued WHERE run IS NULL").fetchone() == (0,)
    # A rerun of the campaign: its file's queue again, answered from the record.
    more = ENQUEUED.replace("max_trials = 12", "max_trials = 14")
    (project / "queued.toml").write_text(more)
    again = _dse(project, "run", "queued.toml", "--json")
    assert again.returncode == 0, again.stderr
    rerun = _rows(project, 2)
    assert [p for _, p, _ in rerun[:2]] == [{"x": 1.0, "y": 0}, {"x": 2.5, "y": 3}]


def test_a_configuration_enqueued_while_the_run_runs_is_taken_next(tmp_path: Path) -> None:
    project = _project(tmp_path)
    slow = ENQUEUED.replace("max_trials = 12", "max_trials = 5000")
    (project / "queued.toml").write_text(slow)
    (project / "quad.py").write_text(SCRIPT.replace("passes=1", "passes=40"))
    env = dict(os.environ, PYTHONPATH="", AGENT_LOG=str(project / "agent.log"))
    run = subprocess.Popen([sys.executable, "-m", "dse", "run", "queued.toml"], cwd=project,
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        db = project / ".dse" / "dse.sqlite"
        _wait(lambda: db.exists() and _count(db, "SELECT COUNT(*) FROM trials") >= 4)
        added = _dse(project, "enqueue", "queued.toml", "--set", "x=3.75", "--set", "y=1")
        assert added.returncode == 0, added.stderr
        _wait(lambda: _count(db, "SELECT COUNT(*) FROM trials WHERE params ="
                                 " '{\"x\":3.75,\"y\":1}'") == 1)
        run.send_signal(signal.SIGINT)
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    conn = sqlite3.connect(project / ".dse" / "dse.sqlite")
    ((source, taken),) = conn.execute(
        "SELECT source, run FROM enqueued WHERE params LIKE '%3.75%'").fetchall()
    assert (source, taken) == ("dse enqueue", 1)


def test_a_bad_configuration_is_refused_in_one_line_and_nothing_is_enqueued(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    (project / "queued.toml").write_text(ENQUEUED)
    refused = _dse(project, "enqueue", "queued.toml", "--set", "x=9", "--set", "y=1")
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert "param 'x': 9.0 is outside [-4.0, 4.0]" in lines[0]
    (project / "bad.toml").write_text(ENQUEUED.replace("x = 2.5", "x = 25"))
    run = _dse(project, "run", "bad.toml")
    assert run.returncode != 0
    assert "bad.toml: enqueue[1]: param 'x': 25.0 is outside" in run.stderr
    assert not (project / ".dse" / "dse.sqlite").exists() or _count(
        project / ".dse" / "dse.sqlite", "SELECT COUNT(*) FROM enqueued") == 0


def _count(db: Path, sql: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(sql).fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def _wait(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
