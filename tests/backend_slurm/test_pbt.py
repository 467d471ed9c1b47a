"""Population-based training on the real Slurm cluster, in job arrays and in an allocation: a
population of 8 whose poor members are replaced by copies of good members' checkpoints in the
shared trial directories, each new trial a new job (a new task of the pilot); with the
controller killed (``kill -9``) part way and the run resumed, no lineage is broken, no
checkpoint overwritten, no step run twice and the budget charges exactly what ran."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from support.cli import run_dse, start_dse, write_plugin
from support.pbt import CAMPAIGN, MAX_STEP, pbt_workload
from support.pbt_checks import check_population, lineage_rows
from support.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

SLURM = f"""
[backend.slurm]
partition = "batch"
mode = "MODE"
python = "{sys.executable}"

[budget]
compute = "10 cpu-hours"
"""


@pytest.mark.xdist_group("slurm")
@pytest.mark.parametrize("mode", ["jobs", "allocation"])
def test_pbt_on_slurm_survives_a_controller_killed_mid_population(slurm_cluster, tmp_path: Path,
                                                                 mode: str) -> None:
    project = write_plugin(tmp_path)
    name = f"pbt{secrets.token_hex(3)}"  # its jobs' names: no other test's on the cluster
    (project / "trial.py").write_text(pbt_workload())
    (project / "c.toml").write_text(CAMPAIGN.format(
        name=name, backend="slurm", parallel=8, extra_campaign="", python="python",
        workload="trial.py", extra_environment="", max_step=MAX_STEP, population=8).replace(
            'poll_interval = ["10ms", "40ms"]', 'poll_interval = ["0.2s", "1s"]')
        + SLURM.replace("MODE", mode))
    controller = start_dse(project, "run", "c.toml", env={"STEP_S": "0.3"})
    try:
        wait_until(lambda: controller.poll() is not None or lineage_rows(project) >= 2, 300,
                   "2 exploits")
        assert controller.poll() is None, controller.communicate()
        controller.send_signal(signal.SIGKILL)  # no cleanup: the jobs keep running
        controller.wait(timeout=30)
    finally:
        if controller.poll() is None:
            controller.kill()
        controller.communicate()
    try:
        done = run_dse(project, "run", "c.toml", timeout=600)
    finally:
        for pilot_id in project.rglob("pilot.id"):
            subprocess.run(["scancel", pilot_id.read_text().strip()], check=False, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    lineage = check_population(project, population=8, name=name)
    assert lineage
    jobs = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True,
                          timeout=30)
    assert not [j for j in jobs.stdout.split() if j.startswith(f"{name}-")]
