"""Two campaigns sharing one pool of local slots, run by `dse run pool.toml` as a user runs it.

Each trial is a real process that sleeps a little and records when it ran; the pool has three
slots and weights the campaigns 2:1.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from pathlib import Path

import pytest

from support.cli import run_dse, write_plugin

WORK = '''
import json, os, time
import dse.trial
start = time.time()
time.sleep(0.4)
with open(os.path.join(os.environ["DSE_TRIAL_DIR"], "trace.json"), "w") as f:
    json.dump({"start": start, "end": time.time()}, f)
dse.trial.report({"value": dse.trial.params()["x"]})
'''


def campaign(name: str, trials: int) -> str:
    # Its own seed: campaigns of one workspace that propose the same config run it once (the
    # second reuses the first's trial), and these campaigns are to run trials of their own.
    seed = sum(map(ord, name))
    return f'''
[campaign]
name = "{name}"
agent = "random"
seed = {seed}
backend = "local"
mode = "rolling"
max_parallelism = 3
max_trials = {trials}

[backend.local]
cpus = 3

[environment]
command = ["{sys.executable}", "work.py"]
time_limit = "60s"

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 100000 }}
'''


def spans(project: Path, name: str) -> list[tuple[float, float]]:
    """(start, end) of every trial of campaign *name*, from the traces its processes wrote."""
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    rows = db.execute(
        "SELECT t.trial_dir FROM trials t JOIN campaigns c ON c.id = t.campaign_id"
        " WHERE c.name = ?", (name,)).fetchall()
    db.close()
    out = []
    for (trial_dir,) in rows:
        trace = json.loads((Path(trial_dir) / "trace.json").read_text())
        out.append((trace["start"], trace["end"]))
    return out


def test_two_campaigns_share_the_pool_2_to_1_and_both_finish_with_their_shares(tmp_path):
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "heavy.toml").write_text(campaign("heavy", 16))
    (tmp_path / "light.toml").write_text(campaign("light", 16))
    (tmp_path / "pool.toml").write_text(
        '[pool]\nslots = 3\n\n[[campaign]]\nfile = "heavy.toml"\nweight = 2\n\n'
        '[[campaign]]\nfile = "light.toml"\nweight = 1\n'
    )
    done = run_dse(tmp_path, "run", "pool.toml", timeout=120)

    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "campaign heavy run 1: completed (max_trials); 16 trials: 16 completed" in out
    assert "campaign light run 2: completed (max_trials); 16 trials: 16 completed" in out
    pool_line = next(line for line in out.splitlines() if line.startswith("pool (3 slots)"))
    shown = re.findall(r"(\w+) used (\d+)% \(weight (\d), target (\d+)%\)", pool_line)
    assert [(name, weight, target) for name, _, weight, target in shown] == [
        ("heavy", "2", "67"), ("light", "1", "33")]
    # The share heavy used while light competed: two thirds, less its last round, where it
    # had fewer trials left than slots (and real processes on a loaded machine jitter).
    assert 55 <= int(shown[0][1]) <= 75
    # While both had trials to run, heavy held two of the three slots and light one.
    heavy, light = spans(tmp_path, "heavy"), spans(tmp_path, "light")
    assert len(heavy) == len(light) == 16
    everything = sorted(heavy + light)
    assert max(sum(1 for s, e in everything if s <= t < e) for t, _ in everything) <= 3
    until = max(e for _, e in heavy)  # heavy ends first: it runs twice as fast
    assert until < max(e for _, e in light)
    first_light = sorted(light)[:8]
    # Heavy's 16 trials ran beside light's first 8: 2:1 while both were running.
    assert sum(1 for s, _ in first_light if s < until) >= 7
    # Until heavy launched its last trial, light held one slot: about 8 launches (a round of
    # jitter either way). Afterwards heavy has nothing left to launch and light may use the
    # slots heavy frees (the pool never leaves a slot idle), so that span is not counted.
    last_heavy_start = max(s for s, _ in heavy)
    assert sum(1 for s, _ in light if s < last_heavy_start) <= 10


def test_two_campaign_files_on_the_command_line_share_one_pool_with_equal_weights(tmp_path):
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "a.toml").write_text(campaign("a", 4))
    (tmp_path / "b.toml").write_text(campaign("b", 4))
    done = run_dse(tmp_path, "run", "a.toml", "b.toml", "--json", timeout=120)

    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["pool"] == {"slots": 3}
    assert [(c["campaign"], c["completed"]) for c in out["campaigns"]] == [("a", 4), ("b", 4)]
    assert [c["pool"]["target_share"] for c in out["campaigns"]] == [0.5, 0.5]
    assert sum(c["pool"]["share"] for c in out["campaigns"]) == pytest.approx(1.0)


def test_campaigns_on_different_backends_cannot_share_a_pool(tmp_path):
    write_plugin(tmp_path)
    (tmp_path / "a.toml").write_text(campaign("a", 1))
    (tmp_path / "b.toml").write_text(campaign("b", 1).replace('"local"', '"probe"'))
    done = run_dse(tmp_path, "run", "a.toml", "b.toml")

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "b.toml: backend: the campaigns of a pool run on one backend" in done.stderr
    assert not (tmp_path / ".dse" / "dse.sqlite").exists() or not sqlite3.connect(
        tmp_path / ".dse" / "dse.sqlite").execute("SELECT * FROM trials").fetchall()
