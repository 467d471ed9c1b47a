"""The Ray backend passes dse's ``BackendContract`` on a real three-node Ray cluster."""

from __future__ import annotations

import dataclasses
import json
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dse import JobState, Resources
from dse.testing import BackendContract
from dse.testing.contracts import contract_job, wait_for
from dse_ray import RayBackend

if TYPE_CHECKING:
    from collections.abc import Callable

    from support.raycluster import RayCluster

pytestmark = pytest.mark.xdist_group("ray")


class TestRayBackend(BackendContract):
    @pytest.fixture
    def backend_factory(self, ray_cluster: RayCluster) -> Callable[[], RayBackend]:
        # A namespace per test: a test's actors are never another's.
        namespace = f"contract-{secrets.token_hex(4)}"
        return lambda: RayBackend(address=ray_cluster.address, namespace=namespace,
                                  grace=1.0, linger=60.0)


@pytest.mark.parametrize(("nodes", "per_node"), [(1, 2), (2, 1)])
def test_one_rank_failing_ends_the_others_and_the_attempt_fails(
    ray_cluster: RayCluster, tmp_path: Path, nodes: int, per_node: int
) -> None:
    """As srun's ``--kill-on-bad-exit``: rank 1 exits 3, rank 0 (which would sleep ten
    minutes) is ended, on its node or on another, and the attempt is ``FAILED`` with 3."""
    # Rank 1 fails once rank 0 runs (rank 0's actor killed before it started is another
    # case: test_states).
    script = ("import os, sys, time\nup = os.path.join(os.environ['DSE_TRIAL_DIR'], 'rank0-up')\n"
              "if os.environ['DSE_RANK'] == '1':\n    deadline = time.time() + 120\n"
              "    while not os.path.exists(up) and time.time() < deadline:\n"
              "        time.sleep(0.05)\n    sys.exit(3)\n"
              "open(up, 'w').close()\ntime.sleep(600)\n")
    job = dataclasses.replace(
        contract_job(tmp_path, "ranks", "succeed", argv=(sys.executable, "-c", script)),
        resources=Resources(cpus=1, nodes=nodes, tasks_per_node=per_node))
    backend = RayBackend(address=ray_cluster.address, namespace=f"ranks-{secrets.token_hex(4)}",
                         grace=1.0)
    try:
        (job_id,) = backend.submit([job])
        status = wait_for(backend, [job_id], timeout=120)[job_id]
    finally:
        backend.shutdown()
    assert (status.state, status.exit_code) == (JobState.FAILED, 3), status
    ends = [json.loads(p.read_text()) for p in sorted(job.trial_dir.glob("attempt-1/exit*.json"))]
    assert len(ends) == 2, ends
    assert all(isinstance(e.get("ended_at"), float) for e in ends)
