"""The backend contract catches the mistakes that break real runs. A small backend that runs
commands correctly passes the whole suite; each copy of it that makes one mistake fails the
test named for that mistake and no other (the suite run as a plugin author runs it, in a
pytest process)."""

from __future__ import annotations

import pytest

from support.contracts import failed, run_suite

_BACKENDS = '''
import os
import shutil
import signal
import subprocess
import time

import pytest

from dse import Backend, JobState, JobStatus
from dse.testing.contracts import BackendContract


class Mini(Backend):
    """Runs each job's argv as a process of its own session; ``BROKEN`` names the one
    mistake a copy makes."""

    name = "mini"
    version = "0"
    BROKEN = ""

    def __init__(self, registry):
        super().__init__()
        self.jobs = registry  # shared by the backends of one factory (a "restart")

    def _submit(self, jobs):
        ids = []
        for spec in jobs:
            job_id = f"{spec.trial_id}.{spec.attempt}"
            ids.append(job_id)
            env = dict(os.environ) if self.BROKEN == "env" else {**os.environ, **spec.env}
            if self.BROKEN != "missing" and shutil.which(spec.argv[0]) is None:
                self.jobs[job_id] = {"final": JobStatus(job_id, JobState.INVALID)}
                continue
            try:
                proc = subprocess.Popen(spec.argv, env=env, cwd=spec.trial_dir,
                                        start_new_session=True, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
            except OSError as exc:
                self.jobs[job_id] = {"final": JobStatus(job_id, JobState.LAUNCH_ERROR,
                                                        reason=str(exc))}
                continue
            self.jobs[job_id] = {"proc": proc, "start": time.time(),
                                 "limit": spec.time_limit, "stop": None}
        return ids

    def _poll(self, job_ids):
        out = {}
        for job_id in job_ids:
            job = self.jobs.get(job_id)
            if job is None:
                out[job_id] = JobStatus(job_id, JobState.LOST)
                continue
            if "final" in job:
                out[job_id] = job["final"]
                continue
            proc = job["proc"]
            if proc.poll() is None:
                late = job["limit"] and time.time() - job["start"] > job["limit"]
                if late and self.BROKEN != "limit" and job["stop"] is None:
                    job["stop"] = "timeout"
                    self._kill(proc)
                continue
            code = proc.returncode
            if job["stop"] == "cancelled":
                state = JobState.CANCELLED
            elif job["stop"] == "timeout":
                state = JobState.TIMEOUT
            elif code == 0:
                state = JobState.SUCCEEDED
            elif code < 0 and self.BROKEN != "signal":
                state = JobState.KILLED
            else:
                state = JobState.FAILED
            times = ({} if self.BROKEN == "times"
                     else {"started_at": job["start"], "ended_at": time.time()})
            job["final"] = out[job_id] = JobStatus(
                job_id, state, exit_code=code if code >= 0 else None,
                signal=-code if code < 0 else None, **times)
        return out

    def _kill(self, proc):
        if self.BROKEN == "tree":
            proc.kill()  # the command only: what it started runs on
        else:
            os.killpg(proc.pid, signal.SIGKILL)

    def _cancel(self, job_ids):
        for job_id in job_ids:
            job = self.jobs.get(job_id, {})
            if "proc" in job and job["proc"].poll() is None and job["stop"] is None:
                job["stop"] = "cancelled"
                self._kill(job["proc"])

    def _shutdown(self):
        for job in self.jobs.values():  # leave no process behind, broken or not
            if "proc" in job:
                try:
                    os.killpg(job["proc"].pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def contract(broken):
    class Copy(Mini):
        BROKEN = broken

    class Test(BackendContract):
        @pytest.fixture
        def backend_factory(self):
            registry = {}
            return lambda: Copy(registry)

    return Test


TestCorrect = contract("")
TestEnv = contract("env")
TestMissing = contract("missing")
TestLimit = contract("limit")
TestSignal = contract("signal")
TestTree = contract("tree")
TestTimes = contract("times")
'''

_CAUGHT_BY = {
    "TestEnv": "test_the_job_environment_reaches_the_command",
    "TestMissing": "test_a_missing_command_is_invalid",
    "TestLimit": "test_a_time_limit_ends_the_job",
    "TestSignal": "test_a_signal_death_is_reported_killed",
    "TestTree": "test_cancel_ends_the_whole_process_tree",
    "TestTimes": "test_start_and_end_times_are_reported",
}


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run_suite(tmp_path_factory.mktemp("broken_backends"), "test_broken_backends", _BACKENDS)


def test_a_backend_that_runs_commands_right_passes_the_whole_suite(outcome: str) -> None:
    assert not any(f.startswith("TestCorrect::") for f in failed(outcome)), outcome[-3000:]
    assert " passed" in outcome


def test_each_mistake_fails_its_own_test_and_no_other(outcome: str) -> None:
    expected = {f"{copy}::{test}" for copy, test in _CAUGHT_BY.items()}
    assert failed(outcome) == expected, outcome[-4000:]


@pytest.mark.parametrize("says", [
    "job.env was not passed", "not INVALID", "not TIMEOUT", "not KILLED",
    "the job's grandchild still runs after cancel", "no started_at"])
def test_each_failure_says_what_went_wrong(outcome: str, says: str) -> None:
    assert says in outcome, outcome[-4000:]
