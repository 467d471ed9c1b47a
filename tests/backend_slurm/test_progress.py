"""A trial's learning curve on Slurm: the points a workload reports on a compute node are read
from the shared trial directory at every pass and kept in the record, in job arrays and in an
allocation alike (the real cluster)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from support.cli import run_dse, write_plugin

CAMPAIGN = """\
[campaign]
name = "curves"
agent = "grid"
backend = "slurm"
max_parallelism = 3

[environment]
command = ["python", "trial.py"]
time_limit = "1m"

[backend.slurm]
partition = "batch"
mode = "{mode}"
python = "{python}"

[[objectives]]
metric = "loss"

[space]
x = {{ type = "categorical", choices = [1, 2, 3] }}
"""

TRIAL = """\
import time, dse.trial
x = dse.trial.params()["x"]
for step in (10, 20, 30):
    dse.trial.report_progress(step, {"loss": x / step})
    time.sleep(0.4)
dse.trial.report({"loss": x / 30})
"""


@pytest.mark.xdist_group("slurm")
@pytest.mark.parametrize("mode", ["jobs", "allocation"])
def test_the_points_a_slurm_trial_reports_are_its_learning_curve_in_the_record(
    slurm_cluster, tmp_path, mode
):
    project = write_plugin(tmp_path)
    (project / "trial.py").write_text(TRIAL)
    (project / "c.toml").write_text(CAMPAIGN.format(mode=mode, python=sys.executable))
    try:
        proc = run_dse(project, "run", "c.toml", timeout=240)
    finally:
        for pilot_id in project.rglob("pilot.id"):
            subprocess.run(["scancel", pilot_id.read_text().strip()], check=False, timeout=30)
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    curves: dict[int, list[tuple[int, int, float]]] = {}
    for x, attempt, step, metrics in db.execute(
        "SELECT json_extract(t.params, '$.x'), p.attempt, p.step, p.metrics FROM progress p"
        " JOIN trials t ON t.id = p.trial_id ORDER BY p.trial_id, p.attempt, p.step"
    ):
        curves.setdefault(x, []).append((attempt, step, json.loads(metrics)["loss"]))
    db.close()
    assert curves == {x: [(1, s, x / s) for s in (10, 20, 30)] for x in (1, 2, 3)}
