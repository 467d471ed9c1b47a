"""A failed attempt's message on Slurm, without a cluster: the end of the ``stderr.log`` the
launcher wrote in the attempt's directory (``dse.stderr_tail``), read as the allocation mode
reads a step's end from its exit document — here from a real failing Python process."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

from dse import JobSpec, JobState
from dse_slurm._allocation import _step_end

if TYPE_CHECKING:
    from pathlib import Path


def failed_attempt(tmp_path: Path, code: str) -> JobSpec:
    """A job whose attempt 1 ran *code* (a real process), its stderr in the attempt's log."""
    spec = JobSpec("c-1-1", 1, {}, tmp_path / "000001", argv=(sys.executable, "-c", code))
    attempt = spec.trial_dir / "attempt-1"
    attempt.mkdir(parents=True)
    with (attempt / "stderr.log").open("wb") as err:
        rc = subprocess.run(spec.argv, stderr=err, check=False, timeout=120).returncode
    assert rc == 1
    return spec


def test_a_failed_step_says_the_exception_its_command_raised(tmp_path):
    spec = failed_attempt(tmp_path, "import json\njson.loads('{')\n")
    state, code, _, _, reason = _step_end({"rc": 1}, started=True, spec=spec, pilot_job="7")
    assert (state, code) == (JobState.FAILED, 1)
    assert reason == "json.decoder.JSONDecodeError: Expecting property name enclosed in double" \
        " quotes: line 1 column 2 (char 1)"


def test_a_failed_step_that_said_nothing_says_its_exit_code(tmp_path):
    spec = failed_attempt(tmp_path, "import sys\nsys.exit(1)\n")
    _, _, _, _, reason = _step_end({"rc": 1}, started=True, spec=spec, pilot_job="7")
    assert reason == "exit code 1"
