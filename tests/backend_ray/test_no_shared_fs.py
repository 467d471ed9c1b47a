"""Trials on Ray nodes that share no filesystem with the controller (``shared_filesystem =
false``), on the real local three-node cluster.

The nodes of the test cluster are raylets of this machine, so they could read the controller's
directories; each keeps its trial directories under ``node_dir/<node>`` instead, and every
test checks that the workload ran there (its ``DSE_TRIAL_DIR``) and that what the controller
has came back through Ray: the params went out, the result, the logs, the progress lines and
the checkpoint came back, and a file over ``return_limit`` stayed on its node, which the record
names.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dse.testing import BackendContract
from dse_ray import RayBackend
from support.campaign_record import (
    attempts_by_trial,
    runs_of,
    sleepers,
    starts,
    trials,
)
from support.cli import run_dse, start_dse
from support.ray_work import (
    finish,
    project_with,
    release,
    run_losing_a_node,
    stop,
    unique,
)
from support.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable

    from support.raycluster import RayCluster

pytestmark = pytest.mark.xdist_group("ray")


class TestRayBackendWithoutASharedFilesystem(BackendContract):
    @pytest.fixture
    def backend_factory(self, ray_cluster: RayCluster, tmp_path: Path
                        ) -> Callable[[], RayBackend]:
        namespace = f"contract-nfs-{secrets.token_hex(4)}"
        return lambda: RayBackend(address=ray_cluster.address, namespace=namespace,
                                  grace=1.0, linger=60.0, shared_filesystem=False,
                                  node_dir=str(tmp_path / "nodes"))


def no_shared_fs(nodes: Path, limit: str = "32KiB") -> str:
    return (f'shared_filesystem = false\nnode_dir = "{nodes}"\n'
            f'return_limit = "{limit}"\n')


def ran_in(trial_dir: Path) -> Path:
    """The trial directory the workload of *trial_dir*'s trial saw (its node's)."""
    return Path(json.loads((trial_dir / "rank-0.json").read_text())["DSE_TRIAL_DIR"])


def test_a_trials_files_travel_through_ray_and_a_large_one_stays_on_its_node(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    name = unique("nofs")
    nodes = tmp_path / "nodes"
    points = [{"mode": "big", "i": i, "seconds": 0.0} for i in range(2)]
    (tmp_path / "p").mkdir()
    project = project_with(tmp_path / "p", name, ray_cluster.address, points, parallelism=2,
                           backend=no_shared_fs(nodes))
    proc = run_dse(project, "run", "campaign.toml", timeout=240)
    assert proc.returncode == 0, proc.stderr
    rows = trials(project)
    assert [r["status"] for r in rows.values()] == ["completed", "completed"]
    for number, row in rows.items():
        here = Path(row["trial_dir"])
        there = ran_in(here)
        assert there.is_relative_to(nodes), there  # it ran in its node's directory
        (attempt,) = attempts_by_trial(project)[number]
        assert there.parent.name == attempt["node"]
        # Back through Ray: the result (scored), the logs and exit file, the checkpoint.
        assert json.loads((here / "result.json").read_text())["metrics"] == {
            "value": number - 1 + (number - 1) * 0.5}
        assert (here / "attempt-1" / "exit.json").is_file()
        assert runs_of(project)[number] == [f"1 {attempt['node']}"]
        assert "step" in (here / "progress.jsonl").read_text()
        # The 64 KiB model is over the 32 KiB limit: on the node only, as the record says.
        assert (there / "model.bin").stat().st_size == 65536
        assert not (here / "model.bin").exists()
        assert json.loads(attempt["left_files"]) == {
            "node": attempt["node"], "dir": str(there), "files": {"model.bin": 65536}}
        shown = run_dse(project, "show", f"{name}:{number}")
        assert shown.returncode == 0, shown.stderr
        assert f"left on node {attempt['node']} in {there}: model.bin (64.0 KiB)" in (
            shown.stdout), shown.stdout


def test_progress_and_checkpoint_come_back_while_the_trial_runs(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    name = unique("nofsrun")
    points = [{"mode": "big", "i": 1, "seconds": 300.0}]
    project = project_with(tmp_path, name, ray_cluster.address, points, parallelism=1,
                           backend=no_shared_fs(tmp_path / "nodes"))
    dse = start_dse(project, "run", "campaign.toml")
    try:
        def curve() -> str:
            found = list(project.glob(".dse/*/run-*/*/progress.jsonl"))
            return found[0].read_text() if found else ""

        # Early stopping reads the curve in the controller's trial directory: it is there
        # while the trial still runs on its node, with the checkpoint it wrote.
        wait_until(lambda: '"step": 1' in curve() or '"step":1' in curve(), 120,
                   "the first progress line in the controller's trial directory",
                   seen=curve)
        assert starts(project) == 1
        assert [a["ended_at"] for a in attempts_by_trial(project)[1]] == [None]
        release(project)
        finish(dse, 120)
    finally:
        stop(dse)
    assert [r["status"] for r in trials(project).values()] == ["completed"]


def test_a_lost_node_s_trial_resumes_elsewhere_from_the_checkpoint_it_sent_back(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    name = unique("nofsfail")
    project = project_with(tmp_path, name, ray_cluster.address, sleepers(4, 120.0),
                           parallelism=4, backend=no_shared_fs(tmp_path / "nodes"))
    victim = ray_cluster.workers[0]
    # The node is lost once the controller's copy of the checkpoint says a trial started
    # there: that came back while the trial ran.
    run_losing_a_node(ray_cluster, project, victim, ray_cluster.kill_raylet, "node_fail")
    assert [row["status"] for row in trials(project).values()] == ["completed"] * 4
    runs = runs_of(project)
    hit = {n: a for n, a in attempts_by_trial(project).items() if a[0]["state"] == "node_fail"}
    assert hit
    resumed = [n for n, tries in hit.items() if runs[n][:1] == [f"1 {victim}"]]
    assert resumed, runs
    for number in resumed:
        tries = hit[number]
        assert [a["state"] for a in tries] == ["node_fail", "succeeded"]
        assert tries[1]["node"] != victim
        # The retry's checkpoint held the lost node's line: it started from what came back.
        assert runs[number] == [f"1 {victim}", f"2 {tries[1]['node']}"], runs[number]
