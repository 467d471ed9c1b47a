"""Asking for more parallelism than the backend (or the pool) can give, through `dse run`: one
warning line names the figure the campaign gets, the header shows it, and no more trials than
that run at once (each trial is a real process that records when it ran)."""

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


def campaign(name: str, *, parallelism: int, cpus: int) -> str:
    return f'''
[campaign]
name = "{name}"
agent = "grid"
backend = "local"
mode = "waves"
max_parallelism = {parallelism}

[backend.local]
cpus = {cpus}

[environment]
command = ["{sys.executable}", "work.py"]

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 5 }}
'''


def most_at_once(project: Path) -> int:
    """The most trials whose processes ran at the same time (from the traces they wrote)."""
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    dirs = [row[0] for row in db.execute("SELECT trial_dir FROM trials")]
    db.close()
    spans = [json.loads((Path(d) / "trace.json").read_text()) for d in dirs]
    assert len(spans) == 6
    return max(sum(1 for s in spans if s["start"] <= t["start"] < s["end"]) for t in spans)


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("dse: warning:")]


def run(project: Path, *, parallelism: int, cpus: int, pool_slots: int | None = None):
    """`dse run` of the campaign (in a pool of *pool_slots* when given); it must succeed."""
    write_plugin(project)
    (project / "work.py").write_text(WORK)
    (project / "c.toml").write_text(campaign("c", parallelism=parallelism, cpus=cpus))
    target = "c.toml"
    if pool_slots is not None:
        (project / "pool.toml").write_text(
            f'[pool]\nslots = {pool_slots}\n\n[[campaign]]\nfile = "c.toml"\n')
        target = "pool.toml"
    done = run_dse(project, "run", target, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_more_parallelism_than_cpu_slots_is_one_warning_naming_what_runs(tmp_path):
    done = run(tmp_path, parallelism=3, cpus=2)

    assert warnings_of(done.stderr) == [
        "dse: warning: max_parallelism = 3 but the local backend runs at most 2 trials at"
        " once (2 CPUs, 1 per trial): running 2 at a time"
    ]
    assert "backend local, waves x2, record" in done.stderr
    assert "6 trials: 6 completed" in done.stdout
    assert most_at_once(tmp_path) == 2


def test_parallelism_the_backend_can_give_is_not_warned_about(tmp_path):
    done = run(tmp_path, parallelism=3, cpus=3)

    assert warnings_of(done.stderr) == []
    assert "backend local, waves x3, record" in done.stderr


def test_more_parallelism_than_pool_slots_is_one_warning_naming_the_pool(tmp_path):
    done = run(tmp_path, parallelism=3, cpus=4, pool_slots=2)

    assert warnings_of(done.stderr) == [
        "dse: warning: max_parallelism = 3 but the pool runs at most 2 trials at once"
        " (slots = 2, 1 per trial): running 2 at a time"
    ]
    assert "backend local, waves x2, record" in done.stderr
    assert most_at_once(tmp_path) == 2
