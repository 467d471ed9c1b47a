"""The local backend runs one task per trial: it tells that task its place, and refuses a
campaign whose trials span more tasks or nodes in one line, before anything runs."""

from __future__ import annotations

import socket
import sys

from support.cli import run_dse, write_plugin


def test_a_local_trial_is_rank_0_of_one_on_this_host(run_local):
    run = run_local([{"x": 1, "sleep": 0.0}])
    assert run.trials[1]["status"] == "completed"
    host = socket.gethostname()
    assert run.traces()[1]["place"] == {"RANK": "0", "LOCAL_RANK": "0", "NODE_RANK": "0",
                                        "WORLD_SIZE": "1", "NODE": host, "NODES": host}


CAMPAIGN = """
[campaign]
name = "spread"
backend = "local"
max_trials = 3

[[objectives]]
metric = "value"

[environment]
command = ["{python}", "-c", "raise SystemExit(3)"]
{resources}

[space]
nodes = [1, 2, 3]
"""


def test_trials_spanning_nodes_are_refused_in_one_line_before_anything_runs(tmp_path):
    for resources in ('nodes = "{nodes}"', "nodes = 2", "tasks_per_node = 2"):
        (tmp_path / "campaign.toml").write_text(
            CAMPAIGN.format(python=sys.executable, resources=resources))
        proc = run_dse(write_plugin(tmp_path), "run", "campaign.toml")
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert "campaign.toml" in lines[0]
        assert "the local backend runs one task per trial" in lines[0]
        assert "backend = \"slurm\"" in lines[0]
        # Nothing ran: no trial directory was made.
        assert not list(tmp_path.glob(".dse/*/run-*/0*")), resources
