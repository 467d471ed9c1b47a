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

import json
import sys
import time
from typing import TYPE_CHECKING

import pytest

from dse.model._types import JobSpec, JobState, JobStatus

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

    from dse.plugins._backend import Backend

_WORKLOAD = r"""
import json, os, signal, subprocess, sys, time
outcome = sys.argv[1]
trial = os.environ.get("DSE_TRIAL_DIR", ".")
if outcome == "hang":
    time.sleep(600)
if outcome == "fail":
    sys.exit(3)
if outcome == "signal":
    import ctypes, resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.kill(os.getpid(), signal.SIGKILL)
    ctypes.string_at(0)  # PID 1 of a namespace ignores its own SIGKILL; not a fault
if outcome == "tree":
    beat = os.path.join(trial, "heartbeat")
    grandchild = ("import sys, time\nwhile True:\n    with open(sys.argv[1], 'a') as f:\n"
                  "        f.write('.')\n    time.sleep(0.1)\n")
    subprocess.Popen([sys.executable, "-c", grandchild, beat])
    time.sleep(600)
metrics = {"value": 1.0}
if outcome == "env":
    metrics["mark"] = float(os.environ.get("DSE_CONTRACT_MARK", "-1"))
path = os.path.join(trial, "result.json")
# Every task of a multi-node job writes the same result: each through its own temporary
# file, or one task's rename takes the file another is about to rename.
tmp = "%s.%s-%d.tmp" % (path, os.uname().nodename, os.getpid())
with open(tmp, "w") as f:
    json.dump({"complete": True, "metrics": metrics}, f)
os.replace(tmp, path)
"""
"""The contract's command: ``argv[1]`` says what it does (``succeed``, ``fail`` with status 3,
``hang``, ``signal`` (kills itself with SIGKILL, or where it is a PID namespace's init and
survives that, with a segmentation fault), ``tree`` (starts a grandchild that appends
to ``heartbeat`` in the trial directory ten times a second, then hangs), ``env`` (succeeds,
its metric ``mark`` read from the job's environment)."""

MARK = 42.5
"""The value of ``DSE_CONTRACT_MARK`` in every contract job's environment."""


def contract_job(
    root: Path, name: str, outcome: str, attempt: int = 1, *, time_limit: float = 120.0,
    argv: Sequence[str] | None = None,
) -> JobSpec:
    """A job of the contract convention in ``root/name`` (created): the contract's command
    with *outcome* (or *argv*), its environment ``DSE_TRIAL_DIR``, ``DSE_TRIAL_ID`` and
    ``DSE_CONTRACT_MARK`` (none of them in the controller's own environment)."""
    trial_dir = root / name
    trial_dir.mkdir(parents=True, exist_ok=True)
    return JobSpec(
        trial_id=f"contract-{name}",
        attempt=attempt,
        params={"outcome": outcome},
        trial_dir=trial_dir,
        argv=tuple(argv) if argv is not None else (sys.executable, "-c", _WORKLOAD, outcome),
        env={"DSE_TRIAL_DIR": str(trial_dir), "DSE_TRIAL_ID": f"contract-{name}",
             "DSE_CONTRACT_MARK": str(MARK)},
        time_limit=time_limit,
    )


def wait_for(
    backend: Backend, job_ids: Sequence[str], timeout: float = 60.0, *, late: str = ""
) -> dict[str, JobStatus]:
    """Poll until every id in *job_ids* reported an end; return their final statuses (the
    test fails after *timeout* seconds, saying *late* as well)."""
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
                pytest.fail(f"jobs {missing} did not end within {timeout}s{late}")
            time.sleep(wait)
            wait = min(wait * 2, 0.5)
    return final


class _CoreChecks:
    """What every backend does, simulated or not."""

    @pytest.fixture
    def backend_factory(self) -> Callable[[], Backend]:
        """Override: return a callable building the backend under test."""
        raise NotImplementedError("override the backend_factory fixture")

    @pytest.fixture
    def time_limit(self) -> float:
        """Override: the shortest time limit (seconds) the backend enforces promptly, for
        :meth:`test_a_time_limit_ends_the_job` (Slurm counts in minutes: 60)."""
        return 2.0

    @pytest.fixture
    def backend(self, backend_factory: Callable[[], Backend]) -> Iterator[Backend]:
        """The backend :meth:`backend_factory` builds, shut down after the test."""
        backend = backend_factory()
        yield backend
        backend.shutdown()

    def test_name_and_version_are_strings(self, backend: Backend) -> None:
        """The class's ``name`` is a non-empty string and its ``version`` a string."""
        assert isinstance(type(backend).name, str)
        assert type(backend).name
        assert isinstance(type(backend).version, str)

    def test_empty_batch_is_a_no_op(self, backend: Backend) -> None:
        """Submitting no job returns no id and leaves nothing outstanding."""
        assert backend.submit([]) == []
        assert backend.outstanding == ()

    def test_batch_submit_returns_one_distinct_id_per_job(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        """One submit of four jobs returns four distinct ids, all outstanding."""
        jobs = [contract_job(tmp_path, f"j{i}", "succeed") for i in range(4)]
        ids = backend.submit(jobs)
        assert len(ids) == 4
        assert len(set(ids)) == 4
        assert set(backend.outstanding) == set(ids)
        wait_for(backend, ids)

    def test_success_and_failure_are_reported_with_exit_codes(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        """An exit 0 ends ``SUCCEEDED`` with code 0; a non-zero exit ``FAILED`` with its code."""
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
        """A job's end is reported by one poll only; the job is then no longer outstanding."""
        (job_id,) = backend.submit([contract_job(tmp_path, "once", "succeed")])
        wait_for(backend, [job_id])
        assert job_id not in backend.outstanding
        for _ in range(3):
            assert all(s.job_id != job_id for s in backend.poll())

    def test_cancel_ends_a_running_job_as_cancelled(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        """A cancelled job ends ``CANCELLED``; the job beside it is not touched."""
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
        """Cancelling a finished or an unknown id changes nothing."""
        (job_id,) = backend.submit([contract_job(tmp_path, "fin", "succeed")])
        wait_for(backend, [job_id])
        backend.cancel([job_id, "no-such-job"])
        assert backend.poll() == []

    def test_poll_with_nothing_outstanding_returns_nothing(self, backend: Backend) -> None:
        """A poll with nothing outstanding answers nothing."""
        assert backend.poll() == []

    def test_reattach_after_a_controller_restart_learns_the_end(
        self, backend_factory: Callable[[], Backend], tmp_path: Path
    ) -> None:
        """A second backend that reattaches to the first one's job learns how it ended."""
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
        """``shutdown()`` cancels a running job: a backend reattaching sees it ``CANCELLED``."""
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


class _CommandChecks:
    """The part of :class:`BackendContract` about the commands a backend runs: what a
    backend that runs the job's ``argv`` must get right for a trial's end to mean what the
    engine takes it to mean. (A backend that simulates jobs, as the probe, leaves these out
    by setting each to ``None`` in its subclass.)"""

    def test_the_job_environment_reaches_the_command(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        """The command sees ``job.env`` (the trial contract's ``DSE_*`` variables)."""
        # Without DSE_TRIAL_DIR the command writes its result elsewhere: every trial would
        # then fail as a result about its design, and be reused.
        job = contract_job(tmp_path, "env", "env")
        (job_id,) = backend.submit([job])
        final = wait_for(backend, [job_id])
        assert final[job_id].state is JobState.SUCCEEDED, final[job_id]
        result = job.trial_dir / "result.json"
        assert result.exists(), (
            f"no result.json in the trial directory {job.trial_dir}: the command did not see"
            " DSE_TRIAL_DIR from job.env")
        mark = json.loads(result.read_text())["metrics"]["mark"]
        assert mark == MARK, (
            f"the command saw DSE_CONTRACT_MARK={mark}, not {MARK}: job.env was not passed")

    def test_start_and_end_times_are_reported(self, backend: Backend, tmp_path: Path) -> None:
        """An end carries ``started_at`` and ``ended_at``, in seconds since the epoch."""
        # Budgets charge wall time from these: a backend without them is never charged.
        before = time.time()
        (job_id,) = backend.submit([contract_job(tmp_path, "times", "succeed")])
        status = wait_for(backend, [job_id])[job_id]
        after = time.time()
        assert status.started_at is not None, f"no started_at: {status}"
        assert status.ended_at is not None, f"no ended_at: {status}"
        # Slurm keeps whole seconds: a second's slack on either side.
        assert before - 1.0 <= status.started_at <= status.ended_at <= after + 1.0, (
            f"started_at {status.started_at} and ended_at {status.ended_at} are not seconds"
            f" since the epoch within the job's life ({before} .. {after})")

    def test_a_time_limit_ends_the_job(
        self, backend: Backend, tmp_path: Path, time_limit: float
    ) -> None:
        """A job running past ``job.time_limit`` is ended ``TIMEOUT``."""
        job = contract_job(tmp_path, "limit", "hang", time_limit=time_limit)
        (job_id,) = backend.submit([job])
        status = wait_for(backend, [job_id], timeout=2.0 * time_limit + 30.0,
                          late=f": past its {time_limit:g} s time limit, not TIMEOUT")[job_id]
        assert status.state is JobState.TIMEOUT, (
            f"a job past its {time_limit} s limit ended {status.state.name}, not TIMEOUT")

    def test_a_signal_death_is_reported_killed(self, backend: Backend, tmp_path: Path) -> None:
        """A command killed by a signal the backend did not send ends ``KILLED``."""
        # A signal the backend did not send is ambiguous (the OOM killer, an operator): the
        # engine retries it; FAILED would make it a result about the design.
        (job_id,) = backend.submit([contract_job(tmp_path, "sig", "signal")])
        status = wait_for(backend, [job_id])[job_id]
        assert status.state is JobState.KILLED, (
            f"a command killed by a signal ended {status.state.name}, not KILLED")
        assert status.signal is None or status.signal > 0, status

    def test_a_missing_command_is_invalid(self, backend: Backend, tmp_path: Path) -> None:
        """A command that does not exist ends ``INVALID``."""
        # The trial's own mistake, the same on every node: INVALID, not LAUNCH_ERROR (an
        # infrastructure fault the engine would retry for ever on other nodes).
        missing = str(tmp_path / "no-such-command")
        (job_id,) = backend.submit([contract_job(tmp_path, "missing", "succeed",
                                                 argv=(missing, "--flag"))])
        status = wait_for(backend, [job_id])[job_id]
        assert status.state is JobState.INVALID, (
            f"a command that does not exist ended {status.state.name}, not INVALID")

    def test_cancel_ends_the_whole_process_tree(self, backend: Backend, tmp_path: Path) -> None:
        """Cancelling a job also ends the processes its command started."""
        # A grandchild left running holds the node's cores (and GPUs) after dse freed them.
        job = contract_job(tmp_path, "tree", "tree")
        beat = job.trial_dir / "heartbeat"
        (job_id,) = backend.submit([job])
        deadline = time.monotonic() + 120.0
        while not (beat.exists() and beat.stat().st_size > 3):
            assert time.monotonic() < deadline, "the job's grandchild never started"
            backend.poll()
            time.sleep(0.1)
        backend.cancel([job_id])
        final = wait_for(backend, [job_id])
        assert final[job_id].state is JobState.CANCELLED
        time.sleep(1.0)  # a write under way when the tree died
        size = beat.stat().st_size
        time.sleep(2.0)
        assert beat.stat().st_size == size, (
            "the job's grandchild still runs after cancel: kill the job's process group (or"
            " cgroup), not only its first process")


class BackendContract(_CoreChecks, _CommandChecks):
    """The behaviour dse's engine relies on from every backend: subclass it and override the
    ``backend_factory`` fixture (and ``time_limit`` if the backend's limits are coarse)."""
