"""Early stopping on Slurm: a campaign with ASHA stops trials on the compute nodes (scancel)
and promotes one later, which resumes from its checkpoint in the shared trial directory as a
new job — in job arrays and in an allocation alike (the real cluster)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from support.cli import run_dse, write_plugin
from support.resumable import resumable_workload, steps_run

CAMPAIGN = """\
[campaign]
name = "es"
agent = "grid"
backend = "slurm"
max_parallelism = 1
mode = "rolling"

[environment]
command = ["python", "trial.py"]
time_limit = "2m"

[backend.slurm]
partition = "batch"
mode = "{mode}"
python = "{python}"

[[objectives]]
metric = "loss"

[space]
x = {{ type = "categorical", choices = [2, 3, 10, 11, 12, 13] }}

[stopping]
rule = "asha"
max_step = 9
"""



@pytest.mark.xdist_group("slurm")
@pytest.mark.parametrize("mode", ["jobs", "allocation"])
def test_asha_on_slurm_stops_trials_and_promotes_one_from_its_checkpoint(
    slurm_cluster, tmp_path, mode
):
    project = write_plugin(tmp_path)
    (project / "trial.py").write_text(resumable_workload(0.4))
    (project / "c.toml").write_text(CAMPAIGN.format(mode=mode, python=sys.executable))
    try:
        proc = run_dse(project, "run", "c.toml", timeout=400)
    finally:
        for pilot_id in project.rglob("pilot.id"):
            subprocess.run(["scancel", pilot_id.read_text().strip()], check=False, timeout=30)
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    statuses = dict(db.execute("SELECT number, status FROM trials"))
    # Trial 2 (x=3) is stopped at rung 1 behind trial 1, promoted once six trials are there
    # (it is then second of the best two), and beats trial 1 from rung 3 on.
    assert statuses == {1: "completed", 2: "completed", 3: "stopped", 4: "stopped",
                        5: "stopped", 6: "stopped"}
    made = db.execute("SELECT t.number, d.verdict, d.rung, d.rule FROM decisions d JOIN trials"
                      " t ON t.id = d.trial_id WHERE d.verdict != 'continue' ORDER BY d.id"
                      ).fetchall()
    assert (2, "stop", 1, "asha") in made
    # Promoted from rung 1 — also when the cancel landed after it reported step 3 (the rule
    # counts every point a trial reported: 2.0 there beats trial 1's 2.33, so it would have
    # gone on) — or from rung 3 once a third late-stopped trial is there (best 1 of 3).
    promoted = [m for m in made if m[1] == "promote"]
    assert [(n, r) for n, _, _, r in promoted] == [(2, "asha")]
    assert promoted[0][2] in (1, 3)
    attempts = db.execute(
        "SELECT a.attempt, a.state, a.resumed, a.job_id FROM attempts a JOIN trials t ON"
        " t.id = a.trial_id WHERE t.number = 2 ORDER BY a.attempt").fetchall()
    assert [(a, s, r) for a, s, r, _ in attempts] == [(1, "cancelled", 0), (2, "succeeded", 1)]
    assert attempts[0][3] != attempts[1][3]  # a new job for the promoted attempt
    ran = steps_run(project / ".dse" / "es" / "run-1" / "000002")
    assert [s for _, s in ran] == list(range(1, 10)), ran  # no step run twice
    curve = db.execute("SELECT attempt, MIN(step), MAX(step) FROM progress p JOIN trials t"
                       " ON t.id = p.trial_id WHERE t.number = 2 GROUP BY attempt").fetchall()
    resumed_at = min(s for a, s in ran if a == 2)
    assert curve == [(1, 1, resumed_at - 1), (2, resumed_at, 9)]
    db.close()
