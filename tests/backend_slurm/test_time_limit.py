"""Ends Slurm decides by its clock, on the ``aside`` partition's own node.

Slurm's shortest time limit is one minute and it checks limits every 30 s, so this test waits
60-90 s. Nothing else uses that node (the ``slurm`` group's tests take ``batch`` nodes down and
preempt them), so it runs beside them in its own group.
"""

from __future__ import annotations

import pytest

from support.campaign_record import attempts_by_trial, trials
from support.cli import run_dse
from support.slurm_work import INTERRUPTIONS, project_with

pytestmark = [pytest.mark.xdist_group("slurm-aside"), pytest.mark.usefixtures("slurm_aside")]


def test_exit_out_of_memory_and_timeout_end_as_slurm_says(tmp_path):
    points = [
        {"mode": "ok", "i": 1, "seconds": 0.0},
        {"mode": "exit3", "i": 2, "seconds": 0.0},
        {"mode": "oom", "i": 3, "seconds": 0.0},
        {"mode": "ok", "i": 4, "seconds": 300.0},
    ]
    project = project_with(tmp_path, "ends", points, parallelism=4, time_limit="1m",
                           partition="aside")

    proc = run_dse(project, "run", "campaign.toml", timeout=240)

    assert proc.returncode == 0, proc.stderr
    rows = trials(project)
    outcome = {n: (r["status"], r["failure"]) for n, r in rows.items()}
    assert outcome == {
        1: ("completed", None),
        2: ("failed", "nonzero_exit"),
        3: ("failed", "out_of_memory"),
        4: ("budget_exhausted", "time_limit"),
    }
    attempts = attempts_by_trial(project)
    # Reproducible failures are results about the design: never retried. (A loaded CI
    # machine may make a node miss its heartbeat: such an interruption is retried, so only
    # interruptions may come before an attempt's end.)
    assert {n: attempts[n][-1]["state"] for n in rows} == {
        1: "succeeded", 2: "failed", 3: "out_of_memory", 4: "timeout",
    }
    for tries in attempts.values():
        assert {a["state"] for a in tries[:-1]} <= INTERRUPTIONS, [a["state"] for a in tries]
    assert attempts[2][-1]["exit_code"] == 3

