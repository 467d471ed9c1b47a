"""The Bayesian agent in a campaign that stops trials early, on real processes: `dse run` with
``asha`` and a workload that checkpoints and reports its learning curve, killed (SIGKILL) once
trials were stopped, then resumed. The resumed controller restores the agent's snapshot (its
stopped results, their fidelities) and replays the calls after it, or, without a snapshot,
every call the record logs: the stopped trials must be told as they were live (their step,
their partial score, the campaign's max_step), else the agent proposes otherwise than the
record says and dse warns that it did not replay."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from support.cli import run_dse, start_dse, wait_for_running, write_plugin

CAMPAIGN = """
[campaign]
name = "fid"
agent = "bayesian"
backend = "local"
max_parallelism = 3
mode = "rolling"
max_trials = 40
seed = 7
poll_interval = ["5ms", "20ms"]

[agent.bayesian]
initial = 5
candidates = 128

[[objectives]]
metric = "loss"

[environment]
command = ["{python}", "w.py"]
time_limit = "60s"

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}
r = {{ type = "float", low = 0.0, high = 1.0 }}

[stopping]
rule = "asha"
max_step = 9
"""

WORKLOAD = """\
import json, math, os, time, dse.trial
p = dse.trial.params()
final = 2 * (p["x"] - 0.6) ** 2 + (p["r"] - 0.3) ** 2
state = dse.trial.checkpoint_dir() / "state.json"
start = json.loads(state.read_text())["step"] if state.exists() else 0
# Early on, a term that looks random in the params decides the ranking (a rung's peers come
# in any order, however good the agent's proposals become): a stopped trial is often among
# the best third later, so ASHA promotes some.
luck = (math.sin(9973.0 * p["x"] + 7919.0 * p["r"]) + 1.0) / 2.0
def loss(step):
    return final + math.exp(-(0.5 + 3 * p["r"]) * step / 3) + 2.0 * luck * math.exp(-step / 2)
# The later trials wait while the file `hold` exists: the test kills the controller while
# the run is on, whatever the machine's load (at load 13 all 40 once ended first).
number = int(dse.trial.trial_id().rsplit("-", 1)[1])
while number > 28 and os.path.exists("hold"):
    time.sleep(0.05)
for step in range(start + 1, 10):
    # Steps slow enough for a loaded controller to review a rung before the trial is past it.
    time.sleep(0.05)
    tmp = state.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, state)
    dse.trial.checkpointed()
    dse.trial.report_progress(step, {"loss": loss(step)})
dse.trial.report({"loss": loss(9)})  # resumed after its last step, it just reports
"""


@pytest.mark.parametrize("snapshot", [True, False], ids=["from-its-snapshot", "whole-log"])
def test_a_killed_campaign_with_stopped_and_promoted_trials_replays_the_agent(
    tmp_path: Path, snapshot: bool,
) -> None:
    write_plugin(tmp_path)
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(python=sys.executable))
    (tmp_path / "w.py").write_text(WORKLOAD)
    db_path = tmp_path / ".dse" / "dse.sqlite"
    (tmp_path / "hold").touch()
    proc = start_dse(tmp_path, "run", "c.toml")
    # The model proposes from the sixth trial on: kill once it has learnt from stopped ones.
    wait_for_running(db_path, 12, timeout=240,
                     sql="SELECT COUNT(*) FROM trials WHERE status IN ('stopped', 'completed')")
    wait_for_running(db_path, 4, timeout=240,
                     sql="SELECT COUNT(*) FROM trials WHERE status = 'stopped'")
    proc.kill()
    proc.communicate(timeout=30)
    (tmp_path / "hold").unlink()
    if not snapshot:
        # The agent is snapshot at almost every commit, so a resume replays only the last
        # calls; without its snapshot it replays every call the record logs.
        db = sqlite3.connect(db_path)
        with db:
            db.execute("DELETE FROM agent_snapshots")
        db.close()

    resumed = run_dse(tmp_path, "run", "c.toml", timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming it" in resumed.stderr
    assert "did not replay" not in resumed.stderr, resumed.stderr

    db = sqlite3.connect(db_path)
    try:
        statuses = dict(db.execute("SELECT status, COUNT(*) FROM trials GROUP BY status"))
        promoted = db.execute("SELECT COUNT(*) FROM decisions WHERE verdict = 'promote'"
                              ).fetchone()[0]
    finally:
        db.close()
    assert sum(statuses.values()) == 40, statuses
    assert set(statuses) <= {"completed", "stopped"}, statuses
    assert statuses.get("stopped", 0) >= 4
    assert promoted >= 1  # a trial was told twice: stopped, then again when it ended
