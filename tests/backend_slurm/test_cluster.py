"""dse_slurm's scripts and parsers against the real local Slurm cluster.

``.ci/run`` starts the cluster (``scripts/slurm-local.sh start``); elsewhere these tests
skip, saying why (and ``tests/conftest.py`` turns that skip into a failure in CI).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from dse import JobSpec, JobState, Resources
from dse_slurm import (
    SACCT_ARGS,
    SQUEUE_ARGS,
    SlurmOptions,
    parse_sacct,
    parse_sbatch_output,
    parse_squeue,
    render_array_script,
    render_manifest,
    sbatch_argv,
    to_job_state,
)

pytestmark = pytest.mark.xdist_group("slurm")

HOSTILE = "$(touch pwned); rm -rf x"
WORKLOAD = (
    "import json, os, socket, sys; print(json.dumps({'argv': sys.argv[1:],"
    " 'task': os.environ.get('SLURM_ARRAY_TASK_ID'), 'value': os.environ.get('VALUE')}));"
    " sys.exit(int(sys.argv[2]))"
)


def run(argv: list[str], timeout: float = 30) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def wait_for_ends(
    job_ids: list[str], timeout: float = 90
) -> dict[str, tuple[JobState, int | None]]:
    """Poll as the backend will: squeue until the jobs left the queue, then sacct (which
    may lag) until each reports an end."""
    deadline = time.monotonic() + timeout
    while parse_squeue(run([*SQUEUE_ARGS, f"--jobs={','.join(job_ids)}"])):
        if time.monotonic() > deadline:
            pytest.fail(f"jobs {job_ids} still queued after {timeout} s")
        time.sleep(0.5)
    while True:
        rows = parse_sacct(run([*SACCT_ARGS, f"--jobs={','.join(job_ids)}"]))
        ends = {}
        for job_id, row in rows.items():
            state, code, _, _ = to_job_state(
                row.state, None if row.exit_code is None else f"{row.exit_code}:{row.signal or 0}"
            )
            if state.is_finished():
                ends[job_id] = (state, code)
        if len(ends) == len(job_ids):
            return ends
        if time.monotonic() > deadline:
            pytest.fail(f"sacct never reported every end: {rows}")
        time.sleep(0.5)


def test_an_array_runs_each_trial_verbatim_and_reports_its_exit(slurm_cluster, tmp_path):
    specs = [
        JobSpec(f"c-1-{i}", 1, {"v": v}, tmp_path / "trials" / str(i),
                argv=(sys.executable, "-c", WORKLOAD, v, str(code)),
                env={"VALUE": v}, resources=Resources(cpus=1), time_limit=120.0)
        for i, (v, code) in enumerate([("plain", 0), (HOSTILE, 0), ("three", 3)])
    ]
    (tmp_path / "x").write_text("sentinel\n")
    manifest = tmp_path / "slurm" / "batch 1.jsonl"
    manifest.parent.mkdir()
    manifest.write_text(render_manifest(specs))
    comment = "dse campaign=c run=1 trials=0,1,2"
    script = tmp_path / "slurm" / "batch 1.sh"
    script.write_text(render_array_script(
        specs, SlurmOptions(partition="batch", python=sys.executable),
        job_name="dse-c-1", comment=comment, manifest_path=manifest,
    ))
    array = parse_sbatch_output(run(sbatch_argv(script)))
    job_ids = [f"{array}_{i}" for i in range(3)]

    ends = wait_for_ends(job_ids)

    assert ends == {
        job_ids[0]: (JobState.SUCCEEDED, 0),
        job_ids[1]: (JobState.SUCCEEDED, 0),
        job_ids[2]: (JobState.FAILED, 3),
    }
    for i, spec in enumerate(specs):
        seen = json.loads((spec.trial_dir / "attempt-1" / "stdout.log").read_text())
        assert seen == {"argv": list(spec.argv[3:]), "task": str(i), "value": spec.env["VALUE"]}
    assert list(tmp_path.rglob("pwned")) == []
    assert (tmp_path / "x").read_text() == "sentinel\n"
    # sbatch read the quoted #SBATCH lines as meant: name and comment arrive verbatim.
    shown = run(["scontrol", "show", "job", "--oneliner", array])
    assert "JobName=dse-c-1 " in shown
    assert f"Comment={comment} " in shown or shown.rstrip().endswith(f"Comment={comment}")


def test_sbatch_accepts_every_option_dse_writes(slurm_cluster, tmp_path):
    spec = JobSpec("c-1-0", 1, {}, tmp_path / "t", argv=("true",),
                   resources=Resources(cpus=1, memory_mb=100), time_limit=90.0,
                   avoid_nodes=("n3",))
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(render_manifest([spec]))
    script = tmp_path / "job.sh"
    options = SlurmOptions(partition="batch", extra_sbatch=("--hint=nomultithread",),
                           setup=("export A='b c'",), signal_lead_s=60, array_throttle=1)
    script.write_text(render_array_script([spec], options, job_name="dse test",
                                          comment="a 'quoted' comment", manifest_path=manifest))
    proc = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "to start at" in proc.stderr
