"""``BackendContract``: the suite every backend passes, dse's own and third parties' alike.

Subclass it in your test module and override the one fixture ``backend_factory``::

    from dse.testing import BackendContract

    class TestMyBackend(BackendContract):
        @pytest.fixture
        def backend_factory(self, tmp_path):
            return lambda: MyBackend(work_dir=tmp_path)

``backend_factory`` returns a callable that builds a backend. Two backends built by the same
factory must see the same jobs (that is how a controller restart is simulated for
``reattach``). Jobs follow a portable convention: the params carry ``outcome`` (``"succeed"``,
``"fail"`` or ``"hang"``) and the argv is a Python command that behaves accordingly and writes
``result.json``, so a backend that runs commands and the probe (which reads ``outcome``)
both pass.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import pytest

from dse._types import JobSpec, JobState, JobStatus

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

    from dse._backend import Backend

_WORKLOAD = r"""
import json, os, sys, time
outcome = sys.argv[1]
if outcome == "hang":
    time.sleep(600)
if outcome == "fail":
    sys.exit(3)
doc = {"complete": True, "metrics": {"value": 1.0}}
path = os.path.join(os.environ.get("DSE_TRIAL_DIR", "."), "result.json")
with open(path + ".tmp", "w") as f:
    json.dump(doc, f)
os.replace(path + ".tmp", path)
"""


def contract_job(root: Path, name: str, outcome: str, attempt: int = 1) -> JobSpec:
    """A job of the contract convention in ``root/name`` (created)."""
    trial_dir = root / name
    trial_dir.mkdir(parents=True, exist_ok=True)
    return JobSpec(
        trial_id=f"contract-{name}",
        attempt=attempt,
        params={"outcome": outcome},
        trial_dir=trial_dir,
        argv=(sys.executable, "-c", _WORKLOAD, outcome),
        env={"DSE_TRIAL_DIR": str(trial_dir), "DSE_TRIAL_ID": f"contract-{name}"},
        time_limit=120.0,
    )


def wait_for(
    backend: Backend, job_ids: Sequence[str], timeout: float = 60.0
) -> dict[str, JobStatus]:
    """Poll until every id in *job_ids* reported an end; return their final statuses."""
    final: dict[str, JobStatus] = {}
    deadline = time.monotonic() + timeout
    wait = 0.01
    while len(final) < len(job_ids):
        for status in backend.poll():
            if status.job_id in job_ids and status.state.is_finished():
                final[status.job_id] = status
        if len(final) < len(job_ids):
            if time.monotonic() > deadline:
                missing = [j for j in job_ids if j not in final]
                pytest.fail(f"jobs {missing} did not end within {timeout}s")
            time.sleep(wait)
            wait = min(wait * 2, 0.5)
    return final


class BackendContract:
    """The behaviour dse's engine relies on from every backend."""

    @pytest.fixture
    def backend_factory(self) -> Callable[[], Backend]:
        """Override: return a callable building the backend under test."""
        raise NotImplementedError("override the backend_factory fixture")

    @pytest.fixture
    def backend(self, backend_factory: Callable[[], Backend]) -> Iterator[Backend]:
        backend = backend_factory()
        yield backend
        backend.shutdown()

    def test_name_and_version_are_strings(self, backend: Backend) -> None:
        assert isinstance(type(backend).name, str)
        assert type(backend).name
        assert isinstance(type(backend).version, str)

    def test_empty_batch_is_a_no_op(self, backend: Backend) -> None:
        assert backend.submit([]) == []
        assert backend.outstanding == ()

    def test_batch_submit_returns_one_distinct_id_per_job(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        jobs = [contract_job(tmp_path, f"j{i}", "succeed") for i in range(4)]
        ids = backend.submit(jobs)
        assert len(ids) == 4
        assert len(set(ids)) == 4
        assert set(backend.outstanding) == set(ids)
        wait_for(backend, ids)

    def test_success_and_failure_are_reported_with_exit_codes(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        ok, bad = backend.submit(
            [contract_job(tmp_path, "ok", "succeed"), contract_job(tmp_path, "bad", "fail")]
        )
        final = wait_for(backend, [ok, bad])
        assert final[ok].state is JobState.SUCCEEDED
        assert final[ok].exit_code == 0
        assert final[bad].state is JobState.FAILED
        assert final[bad].exit_code not in (None, 0)

    def test_a_finished_job_is_reported_once_and_not_queried_again(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        (job_id,) = backend.submit([contract_job(tmp_path, "once", "succeed")])
        wait_for(backend, [job_id])
        assert job_id not in backend.outstanding
        for _ in range(3):
            assert all(s.job_id != job_id for s in backend.poll())

    def test_cancel_ends_a_running_job_as_cancelled(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        hang, ok = backend.submit(
            [contract_job(tmp_path, "hang", "hang"), contract_job(tmp_path, "ok2", "succeed")]
        )
        backend.cancel([hang])
        final = wait_for(backend, [hang, ok])
        assert final[hang].state is JobState.CANCELLED
        assert final[ok].state is JobState.SUCCEEDED

    def test_cancel_of_unknown_or_finished_ids_is_harmless(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        (job_id,) = backend.submit([contract_job(tmp_path, "fin", "succeed")])
        wait_for(backend, [job_id])
        backend.cancel([job_id, "no-such-job"])
        assert backend.poll() == []

    def test_poll_with_nothing_outstanding_returns_nothing(self, backend: Backend) -> None:
        assert backend.poll() == []

    def test_reattach_after_a_controller_restart_learns_the_end(
        self, backend_factory: Callable[[], Backend], tmp_path: Path
    ) -> None:
        first = backend_factory()
        job = contract_job(tmp_path, "re", "succeed")
        (job_id,) = first.submit([job])
        # The controller dies without shutting its backend down; a new one adopts the job.
        second = backend_factory()
        try:
            second.reattach({job_id: job})
            assert job_id in second.outstanding
            final = wait_for(second, [job_id])
            assert final[job_id].state is JobState.SUCCEEDED
        finally:
            second.shutdown()
            first.shutdown()

    def test_shutdown_cancels_what_still_runs(
        self, backend_factory: Callable[[], Backend], tmp_path: Path
    ) -> None:
        backend = backend_factory()
        job = contract_job(tmp_path, "sd", "hang")
        (job_id,) = backend.submit([job])
        backend.shutdown()
        observer = backend_factory()
        try:
            observer.reattach({job_id: job})
            final = wait_for(observer, [job_id])
            assert final[job_id].state is JobState.CANCELLED
        finally:
            observer.shutdown(cancel=False)
