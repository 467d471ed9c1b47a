"""Whole campaigns on a real local three-node Ray cluster, driven by `dse run` as a user runs it.

Each trial runs ``work.py`` (``support.ray_work``), which records where each of its runs ran,
so a test checks what ran, not what the engine believes ran. These tests take nodes away, so
they run one after another on one cluster (``xdist_group("ray")``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from support.campaign_record import (
    attempts_by_trial,
    runs_of,
    sleepers,
    starts,
    trials,
)
from support.cli import run_dse, start_dse
from support.ray_work import (
    project_with,
    release,
    run_losing_a_node,
    stop,
    unique,
)
from support.waiting import wait_until

if TYPE_CHECKING:
    from support.raycluster import RayCluster

pytestmark = pytest.mark.xdist_group("ray")


def test_a_lost_node_fails_its_attempt_which_is_retried_elsewhere_and_named(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    name = unique("nodefail")
    project = project_with(tmp_path, name, ray_cluster.address, sleepers(4, 120.0),
                           parallelism=4)
    victim = ray_cluster.workers[0]
    run_losing_a_node(ray_cluster, project, victim, ray_cluster.kill_raylet, "node_fail")
    assert [row["status"] for row in trials(project).values()] == ["completed"] * 4
    attempts = attempts_by_trial(project)
    hit = {n: a for n, a in attempts.items() if a[0]["state"] == "node_fail"}
    assert hit, {n: [x["state"] for x in a] for n, a in attempts.items()}
    runs = runs_of(project)
    for number, tries in hit.items():
        assert [a["state"] for a in tries] == ["node_fail", "succeeded"]
        assert tries[0]["node"] == victim
        assert tries[1]["node"] != victim  # the node that interrupted it is avoided
        # Its first run ended with the node, nothing of it ran on (its supervisor ends the
        # workload with the actor): one line per attempt. Another trial the node held may
        # have been lost between its actor's start and its workload's first line.
        assert runs[number] in ([f"1 {victim}", f"2 {tries[1]['node']}"],
                                [f"2 {tries[1]['node']}"]), runs[number]
        shown = run_dse(project, "show", f"{name}:{number}")
        assert shown.returncode == 0, shown.stderr
        assert victim in shown.stdout, shown.stdout
        assert "node_fail" in shown.stdout, shown.stdout
    assert any(runs[number][0] == f"1 {victim}" for number in hit), runs
    for number, tries in attempts.items():
        if number not in hit:
            assert [a["state"] for a in tries] == ["succeeded"]


def drain_for_preemption(ray_cluster: RayCluster, name: str) -> None:
    """Tell Ray node *name* is about to be preempted (as the autoscaler does before a spot
    node is taken back), then take it away (its raylet killed)."""
    import ray

    (node_id,) = [n["NodeID"] for n in ray.nodes() if n["NodeName"] == name and n["Alive"]]
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ray")), "drain-node",
         f"--address={ray_cluster.address}", f"--node-id={node_id}",
         "--reason=DRAIN_NODE_REASON_PREEMPTION", "--reason-message=spot node taken back",
         "--deadline-remaining-seconds=1"],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    ray_cluster.kill_raylet(name)


def test_a_node_preempted_under_a_trial_is_an_interruption_retried_elsewhere(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    name = unique("preempt")
    project = project_with(tmp_path, name, ray_cluster.address, sleepers(4, 120.0),
                           parallelism=4)
    victim = ray_cluster.workers[-1]
    run_losing_a_node(ray_cluster, project, victim,
                      lambda name: drain_for_preemption(ray_cluster, name), "preempted")
    assert [row["status"] for row in trials(project).values()] == ["completed"] * 4
    attempts = attempts_by_trial(project)
    hit = {n: a for n, a in attempts.items() if a[0]["state"] == "preempted"}
    assert hit, {n: [x["state"] for x in a] for n, a in attempts.items()}
    for tries in hit.values():
        assert [a["state"] for a in tries] == ["preempted", "succeeded"]
        assert tries[0]["node"] == victim
        assert tries[1]["node"] != victim


def test_a_controller_killed_three_times_resumes_and_nothing_runs_twice(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    name = unique("restart")
    project = project_with(tmp_path, name, ray_cluster.address, sleepers(8, 4.0),
                           parallelism=3, mode="rolling")
    for kill in range(3):
        before = starts(project)
        dse = start_dse(project, "run", "campaign.toml")
        try:
            # Killed once a workload it started runs: its attempts live on without it.
            wait_until(lambda before=before: starts(project) > before, 120,
                       f"a new trial running (controller {kill + 1})")
        finally:
            stop(dse)  # SIGKILL
    release(project)
    proc = run_dse(project, "run", "campaign.toml", timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = trials(project)
    assert len(rows) == 8
    assert {row["status"] for row in rows.values()} == {"completed"}
    runs = runs_of(project)
    assert all(len(lines) == 1 for lines in runs.values()), runs  # counted by the workload
    attempts = attempts_by_trial(project)
    assert all([a["state"] for a in tries] == ["succeeded"] for tries in attempts.values()), {
        n: [a["state"] for a in t] for n, t in attempts.items()}


def test_a_two_node_trial_gets_ranks_0_and_1_on_two_nodes(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    name = unique("spans")
    project = project_with(tmp_path, name, ray_cluster.address, sleepers(1, 0.0),
                           parallelism=1, environment="nodes = 2")
    proc = run_dse(project, "run", "campaign.toml", timeout=240)
    assert proc.returncode == 0, proc.stderr
    (row,) = trials(project).values()
    assert row["status"] == "completed"
    ranks = [json.loads((Path(row["trial_dir"]) / f"rank-{r}.json").read_text())
             for r in (0, 1)]
    assert [r["DSE_RANK"] for r in ranks] == ["0", "1"]
    assert [r["DSE_NODE_RANK"] for r in ranks] == ["0", "1"]
    assert {r["DSE_WORLD_SIZE"] for r in ranks} == {"2"}
    nodes = [r["DSE_NODE"] for r in ranks]
    assert len(set(nodes)) == 2, nodes
    assert {r["DSE_NODES"] for r in ranks} == {",".join(nodes)}
    (attempt,) = attempts_by_trial(project)[1]
    assert attempt["state"] == "succeeded"
    assert attempt["node"] == ",".join(nodes)


def test_a_trial_over_its_memory_fails_out_of_memory_and_the_rest_complete(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    name = unique("oom")
    points = [{"mode": "oom", "i": 0, "seconds": 0.0}, {"mode": "ok", "i": 1, "seconds": 0.0}]
    project = project_with(tmp_path, name, ray_cluster.address, points, parallelism=2,
                           environment="memory_mb = 200")
    proc = run_dse(project, "run", "campaign.toml", timeout=240)
    assert proc.returncode == 0, proc.stderr
    rows = trials(project)
    assert [rows[n]["status"] for n in (1, 2)] == ["failed", "completed"]
    assert rows[1]["failure"] == "out_of_memory", dict(rows[1])
    (attempt,) = attempts_by_trial(project)[1]
    assert attempt["state"] == "out_of_memory"
    assert runs_of(project)[1] == [f"1 {attempt['node']}"]  # not retried
