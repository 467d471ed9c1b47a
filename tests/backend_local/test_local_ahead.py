"""Queued ahead on the local backend, through `dse run`: in rolling mode with an agent that
proposes ahead (grid), the backend is handed more trials than it runs (three rounds) and starts
the next the moment a slot frees — never more than ``max_parallelism`` at once, even when it
has more CPUs (each trial is a real process that records when it ran)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from support.cli import run_dse, write_plugin

WORK = '''
import json, os, time
import dse.trial
start = time.time()
time.sleep(0.3)
with open(os.path.join(os.environ["DSE_TRIAL_DIR"], "trace.json"), "w") as f:
    json.dump({"start": start, "end": time.time()}, f)
dse.trial.report({"value": dse.trial.params()["x"]})
'''

CAMPAIGN = f'''
[campaign]
name = "ahead"
agent = "grid"
backend = "local"
mode = "rolling"
max_parallelism = 2

[backend.local]
cpus = 4

[environment]
command = ["{sys.executable}", "work.py"]

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 15 }}
'''


def test_a_rolling_grid_queues_ahead_and_never_runs_more_than_max_parallelism(
    tmp_path: Path,
) -> None:
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "c.toml").write_text(CAMPAIGN)
    done = run_dse(tmp_path, "run", "c.toml", timeout=120)
    assert done.returncode == 0, done.stderr

    db = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    statuses = [row[0] for row in db.execute("SELECT status FROM trials")]
    # The wrapper of each attempt writes when its workload started and ended.
    attempts = db.execute("SELECT submitted_at, started_at, ended_at FROM attempts").fetchall()
    dirs = [row[0] for row in db.execute("SELECT trial_dir FROM trials")]
    db.close()
    assert statuses == ["completed"] * 16
    assert len(attempts) == 16  # one attempt each: nothing ran twice

    def running_at(t: float) -> int:
        return sum(1 for _, start, end in attempts if start <= t < end)

    # Four CPUs, but max_parallelism = 2 holds: by the wrappers' times, and by the traces
    # the workloads wrote themselves.
    assert max(running_at(start) for _, start, _ in attempts) <= 2
    spans = [json.loads((Path(d) / "trace.json").read_text()) for d in dirs]
    assert max(sum(1 for s in spans if s["start"] <= t["start"] < s["end"]) for t in spans) <= 2
    # Without queueing ahead the engine submits a trial only once a slot is free; here some
    # trials were handed to the backend while two were still running.
    assert any(running_at(submitted) == 2 for submitted, _, _ in attempts)
