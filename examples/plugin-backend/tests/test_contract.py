"""The unshare backend passes dse's backend contract, and its trials really are contained."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest
from dse_unshare import UnshareBackend, attempt_dir

from dse import ConfigError, JobSpec, JobState
from dse.testing.contracts import BackendContract, wait_for

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from dse import Backend


def _can_unshare() -> bool:
    exe = shutil.which("unshare")
    if exe is None:
        return False
    probe = subprocess.run([exe, "--fork", "--pid", "--mount-proc", "--kill-child", "true"],
                           capture_output=True, check=False)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(
    not _can_unshare(), reason="needs util-linux unshare and the right to create namespaces"
)


class TestUnshareBackend(BackendContract):
    @pytest.fixture
    def backend_factory(self) -> Callable[[], Backend]:
        return lambda: UnshareBackend(grace=0.5)


@pytest.fixture
def backend() -> Iterator[UnshareBackend]:
    backend = UnshareBackend(grace=0.5)
    yield backend
    backend.shutdown()


def _job(
    tmp_path: Path,
    *argv: str,
    shell: bool = False,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    time_limit: float | None = None,
) -> JobSpec:
    trial_dir = tmp_path / "trial"
    trial_dir.mkdir()
    return JobSpec(trial_id="t-1", attempt=1, params={}, trial_dir=trial_dir, argv=argv,
                   env=env or {}, shell=shell, cwd=cwd, time_limit=time_limit)


def _wait_for_file(path: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)
    return path.read_text()


def _pids_in_namespace(ns: str) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == ns:
                    pids.append(int(name))
            except OSError:
                continue  # ended while we looked
    return pids


WHOAMI = r"""
import json, os
print(json.dumps({
    "pid": os.getpid(), "ppid": os.getppid(),
    "visible": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "pidns": os.readlink("/proc/self/ns/pid"),
}))
"""


def test_the_trial_is_pid_1_of_a_pid_namespace_of_its_own(
    backend: UnshareBackend, tmp_path: Path
) -> None:
    job = _job(tmp_path, sys.executable, "-c", WHOAMI)
    (job_id,) = backend.submit([job])
    assert wait_for(backend, [job_id])[job_id].state is JobState.SUCCEEDED
    seen = json.loads((attempt_dir(job) / "stdout.log").read_text())
    assert seen["pid"] == 1
    assert seen["ppid"] == 0  # its parent, unshare, lives outside the namespace
    assert seen["visible"] == [1]  # its own /proc shows no process but itself
    assert seen["pidns"] != os.readlink("/proc/self/ns/pid")


def test_a_shell_command_gets_the_jobs_env_and_cwd_and_its_output_lands_in_files(
    backend: UnshareBackend, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    job = _job(tmp_path, 'echo "$$ $GREETING $(pwd -P)"; echo oops >&2; exit 4',
               shell=True, env={"GREETING": "hello"}, cwd=workdir)
    (job_id,) = backend.submit([job])
    final = wait_for(backend, [job_id])[job_id]
    assert final.state is JobState.FAILED
    assert final.exit_code == 4
    assert (attempt_dir(job) / "stdout.log").read_text() == f"1 hello {workdir.resolve()}\n"
    assert (attempt_dir(job) / "stderr.log").read_text() == "oops\n"


def test_a_trial_over_its_time_limit_ends_as_timeout(
    backend: UnshareBackend, tmp_path: Path
) -> None:
    job = _job(tmp_path, sys.executable, "-c", "import time; time.sleep(600)", time_limit=0.5)
    (job_id,) = backend.submit([job])
    final = wait_for(backend, [job_id], timeout=30.0)[job_id]
    assert final.state is JobState.TIMEOUT
    assert final.reason == "over its time limit of 0.5s"


def test_cancel_kills_every_process_of_the_namespace(
    backend: UnshareBackend, tmp_path: Path
) -> None:
    # PID 1 (a shell that ignores SIGTERM, as every init does) with two children of its own.
    job = _job(tmp_path, "readlink /proc/self/ns/pid > ns; sleep 600 & sleep 600 &"
               " echo > ready; wait", shell=True)
    (job_id,) = backend.submit([job])
    _wait_for_file(job.trial_dir / "ready")
    ns = (job.trial_dir / "ns").read_text().strip()
    assert len(_pids_in_namespace(ns)) == 3
    backend.cancel([job_id])
    assert wait_for(backend, [job_id])[job_id].state is JobState.CANCELLED
    # The kernel kills the namespace's processes with its PID 1, but on a loaded machine a
    # killed one may still be in /proc (exiting, not yet reaped) a moment after: wait for it.
    deadline = time.monotonic() + 30.0
    while (left := _pids_in_namespace(ns)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []


def test_a_workload_sigkilled_from_outside_ends_killed_not_failed(
    backend: UnshareBackend, tmp_path: Path
) -> None:
    # The OOM killer or an operator: not a result about the design, so not FAILED (util-linux
    # 2.38's unshare reports it as exit status 1; the backend reads what it printed).
    job = _job(tmp_path, "readlink /proc/self/ns/pid > ns; echo > ready; exec sleep 600",
               shell=True)
    (job_id,) = backend.submit([job])
    _wait_for_file(job.trial_dir / "ready")
    (pid,) = _pids_in_namespace((job.trial_dir / "ns").read_text().strip())
    os.kill(pid, signal.SIGKILL)
    final = wait_for(backend, [job_id], timeout=30.0)[job_id]
    assert (final.state, final.signal, final.exit_code) == (JobState.KILLED, 9, None)
    assert final.ambiguous
    assert final.reason == "killed by SIGKILL from outside dse"


def test_a_workload_exiting_1_by_itself_still_fails(
    backend: UnshareBackend, tmp_path: Path
) -> None:
    job = _job(tmp_path, "echo 'unshare: sigprocmask unblock failed' >&2; exit 2", shell=True)
    (job_id,) = backend.submit([job])
    final = wait_for(backend, [job_id], timeout=30.0)[job_id]
    assert (final.state, final.exit_code, final.signal) == (JobState.FAILED, 2, None)
    (tmp_path / "b").mkdir()
    job = _job(tmp_path / "b", sys.executable, "-c", "import sys; sys.exit(1)")
    (job_id,) = backend.submit([job])
    final = wait_for(backend, [job_id], timeout=30.0)[job_id]
    assert (final.state, final.exit_code, final.signal) == (JobState.FAILED, 1, None)


HANDLES_SIGTERM = r"""
import signal, sys, time
def stop(signum, frame):
    print("stopping cleanly", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open("ready", "w").close()
time.sleep(600)
"""


def test_a_workload_that_handles_sigterm_gets_it_on_cancel(tmp_path: Path) -> None:
    with UnshareBackend(grace=60.0) as backend:  # ending by SIGKILL would take a minute
        job = _job(tmp_path, sys.executable, "-c", HANDLES_SIGTERM)
        (job_id,) = backend.submit([job])
        _wait_for_file(job.trial_dir / "ready")
        backend.cancel([job_id])
        final = wait_for(backend, [job_id], timeout=30.0)[job_id]
    assert final.state is JobState.CANCELLED
    assert (attempt_dir(job) / "stdout.log").read_text() == "stopping cleanly\n"


def test_options_come_from_the_campaign_table() -> None:
    assert UnshareBackend.from_options({"grace": "2s"}).grace == 2.0
    with pytest.raises(ConfigError, match=r"campaign.toml: backend\.unshare"):
        UnshareBackend.from_options({"cpus": 4}, source="campaign.toml")
