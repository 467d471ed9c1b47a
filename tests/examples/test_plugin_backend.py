"""The third-party backend in ``examples/plugin-backend`` works as its users would install it.

A fresh virtual environment gets dse-core and the example (``dse-backend-unshare``) from their
sources with pip, as wheels, nothing editable and nothing from this repository's own
environment: dse must find the backend through its entry point alone, and the example's own
test suite (dse's ``BackendContract`` and its namespace tests) must pass there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

from support.contracts import failed, run_suite
from support.venv import REPO, clean_env, install_example, run, run_example_tests

if TYPE_CHECKING:
    from pathlib import Path

EXAMPLE = REPO / "examples" / "plugin-backend"

_BROKEN = '''
import dataclasses
import shutil

import pytest

from dse import JobState
from dse.testing.contracts import BackendContract
from dse_unshare import UnshareBackend
from dse_unshare import _backend


class DropsTheEnv(UnshareBackend):
    """Runs the command without the job's environment."""

    def _launch(self, job_id, job, unshare):
        job.spec = dataclasses.replace(job.spec, env={})
        super()._launch(job_id, job, unshare)


class IgnoresTheLimit(UnshareBackend):
    """Never stops a job past its time limit."""

    def _launch(self, job_id, job, unshare):
        job.spec = dataclasses.replace(job.spec, time_limit=None)
        super()._launch(job_id, job, unshare)


class SignalIsAFailure(UnshareBackend):
    """Reports a signal death as FAILED."""

    def _ended(self, job_id, job):
        status = super()._ended(job_id, job)
        if status.state is JobState.KILLED:
            return dataclasses.replace(status, state=JobState.FAILED, ambiguous=False)
        return status


class NoTimes(UnshareBackend):
    """Reports no start or end time."""

    def _ended(self, job_id, job):
        return dataclasses.replace(super()._ended(job_id, job), started_at=None,
                                   ended_at=None)


def _contract(cls):
    class Test(BackendContract):
        @pytest.fixture
        def backend_factory(self):
            return lambda: cls(grace=0.5)

    return Test


TestDropsTheEnv = _contract(DropsTheEnv)
TestIgnoresTheLimit = _contract(IgnoresTheLimit)
TestSignalIsAFailure = _contract(SignalIsAFailure)
TestNoTimes = _contract(NoTimes)


class TestTrustsAnyCommand(_contract(UnshareBackend)):
    """Starts any command without looking for it first."""

    @pytest.fixture(autouse=True)
    def trusting(self, monkeypatch):
        real = shutil.which
        monkeypatch.setattr(_backend.shutil, "which",
                            lambda cmd, path=None: real(cmd, path=path) or "/found")
'''

_CAUGHT_BY = {
    "TestDropsTheEnv": "test_the_job_environment_reaches_the_command",
    "TestIgnoresTheLimit": "test_a_time_limit_ends_the_job",
    "TestSignalIsAFailure": "test_a_signal_death_is_reported_killed",
    "TestNoTimes": "test_start_and_end_times_are_reported",
    "TestTrustsAnyCommand": "test_a_missing_command_is_invalid",
}
"""Each copy's mistake and the test that must catch it. (Cancel cannot leave a grandchild
here: the backend kills the namespace's init, and the kernel every process of it.)"""


def _can_unshare() -> bool:
    exe = shutil.which("unshare")
    if exe is None:
        return False
    probe = subprocess.run([exe, "--fork", "--pid", "--mount-proc", "--kill-child", "true"],
                           capture_output=True, check=False)
    return probe.returncode == 0


pytestmark = [
    pytest.mark.slow,
    # Both tests share one environment: keep them on one worker under `--dist loadgroup`.
    pytest.mark.xdist_group("plugin-backend"),
    pytest.mark.skipif(not _can_unshare(),
                       reason="needs util-linux unshare and the right to create namespaces"),
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh venv, a copy of the example) with dse-core and the example installed."""
    return install_example(EXAMPLE, tmp_path_factory.mktemp("plugin-backend"))


def test_dse_plugins_lists_the_backend_found_through_its_entry_point(
    installed: tuple[Path, Path],
) -> None:
    venv, _ = installed
    table = run([str(venv / "bin" / "dse"), "plugins"], timeout=120)
    assert "unshare" in table
    assert "dse-backend-unshare" in table
    rows = json.loads(run([str(venv / "bin" / "dse"), "plugins", "--json"], timeout=120))
    backends = {row["name"]: row for row in rows if row["kind"] == "backend"}
    # Only dse-core's probe besides it: nothing of this repository's environment leaked in.
    assert sorted(backends) == ["probe", "unshare"]
    unshare = backends["unshare"]
    assert unshare["plugin"] == "unshare"  # the entry point's name
    assert unshare["distribution"] == "dse-backend-unshare"
    assert unshare["distribution_version"] == "0.1.0"


def test_the_examples_own_tests_pass_in_that_environment(
    installed: tuple[Path, Path],
) -> None:
    venv, example = installed
    run_example_tests(venv, example)


def test_each_broken_copy_fails_the_test_of_its_mistake(installed: tuple[Path, Path]) -> None:
    venv, example = installed
    (example / "broken").mkdir()
    out = run_suite(example / "broken", "test_broken", _BROKEN,
                    python=venv / "bin" / "python", env=clean_env())
    assert failed(out) == {f"{copy}::{test}" for copy, test in _CAUGHT_BY.items()}, out[-4000:]
