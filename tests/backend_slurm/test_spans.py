"""Attempts of several tasks, without a cluster: the batch script they get, Slurm's node lists
expanded (by the backend and by the launcher alike), each task's contract and output files,
and which avoided nodes a partition can spare."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dse import JobSpec, Resources
from dse_slurm import (
    LAUNCHER,
    SlurmOptions,
    expand_hostlist,
    group_for_arrays,
    render_array_script,
    render_manifest,
)
from dse_slurm._script import spare_exclusion
from dse_slurm._states import node_is_failing

WIDE = Resources(cpus=4, gpus=1, memory_mb=2048, nodes=3, tasks_per_node=2)
# Writes what the task was told to its stdout (the launcher sends it to its own log).
TOLD = (
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('DSE_RANK',"
    " 'DSE_LOCAL_RANK', 'DSE_NODE_RANK', 'DSE_WORLD_SIZE', 'DSE_NODE', 'DSE_NODES')}))"
)


def spec(tmp: Path, resources: Resources, name: str = "t") -> JobSpec:
    return JobSpec(f"c-1-{name}", 1, {}, tmp / name, argv=(sys.executable, "-c", TOLD),
                   env={"DSE_RANK": "0", "DSE_WORLD_SIZE": str(resources.tasks)},
                   resources=resources, time_limit=600.0)


def script(specs: list[JobSpec], tmp: Path) -> str:
    return render_array_script(specs, SlurmOptions(python=sys.executable, signal_lead_s=60),
                               job_name="dse", comment="dse", manifest_path=tmp / "m.jsonl")


def sbatch_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH --")]


def test_a_multi_node_attempt_asks_per_node_and_starts_its_tasks_with_srun(tmp_path):
    text = script([spec(tmp_path, WIDE)], tmp_path)
    options = sbatch_lines(text)
    assert options[3:9] == [
        "#SBATCH --time=10:00", "#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=2",
        "#SBATCH --cpus-per-task=4", "#SBATCH --gres=gpu:1", "#SBATCH --mem=2048M",
    ]
    assert "#SBATCH --signal=B:USR1@60" in options
    body = text.split("\n\n")[-1].splitlines()
    assert body[1] == ('DSE_NODES="$(scontrol show hostnames "$SLURM_JOB_NODELIST"'
                       ' | paste -sd, -)" \\')
    assert body[2] == ("exec srun --kill-on-bad-exit=1 --nodes=3 --ntasks=6"
                       " --ntasks-per-node=2 --cpus-per-task=4 \\")
    assert body[3].startswith(f"    {sys.executable} -c ")
    proc = subprocess.run([shutil.which("bash") or "bash", "-n"], input=text,
                          capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_a_one_task_attempt_keeps_the_direct_exec(tmp_path):
    text = script([spec(tmp_path, Resources(cpus=2))], tmp_path)
    assert sbatch_lines(text)[4:7] == [
        "#SBATCH --nodes=1", "#SBATCH --ntasks=1", "#SBATCH --cpus-per-task=2"]
    assert "exec srun" not in text
    assert f"\nexec {sys.executable} -c " in text


def test_arrays_group_by_nodes_and_tasks_per_node(tmp_path):
    one, two, two_again = (spec(tmp_path, Resources(nodes=n), f"t{i}")
                           for i, n in enumerate((1, 2, 2)))
    by_tasks = spec(tmp_path, Resources(nodes=2, tasks_per_node=2), "t3")
    assert group_for_arrays([one, two, by_tasks, two_again]) == [
        [one], [two, two_again], [by_tasks]]


CASES = {
    "n1": ["n1"],
    "n[1-3,5]": ["n1", "n2", "n3", "n5"],
    "a1,b[2-3],c": ["a1", "b2", "b3", "c"],
    "gpu[08-11]": ["gpu08", "gpu09", "gpu10", "gpu11"],
    "r[1-2]n[1-2]": ["r1n1", "r1n2", "r2n1", "r2n2"],
    "x-[3]-y": ["x-3-y"],
    "n[1-": ["n[1-"],
    "n[a-b]": ["n[a-b]"],
    "n1,,n2": ["n1", "n2"],
    "": [],
}


@pytest.mark.parametrize(("text", "names"), CASES.items())
def test_node_lists_expand_in_slurms_order(text, names):
    assert expand_hostlist(text) == names


def run_task(manifest: Path, **slurm: str) -> subprocess.CompletedProcess[str]:
    """The launcher run as srun runs it in one task (its environment says which)."""
    env = {"PATH": os.environ["PATH"], **slurm}
    return subprocess.run([sys.executable, "-c", LAUNCHER, str(manifest), "0"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_each_task_is_told_its_place_and_writes_its_own_logs(tmp_path):
    job = spec(tmp_path, WIDE)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(render_manifest([job]))
    for rank in (0, 3):
        proc = run_task(manifest, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank % 2),
                        SLURM_NODEID=str(rank // 2), SLURM_NTASKS="6",
                        SLURMD_NODENAME=f"n{rank // 2 + 1}", SLURM_JOB_NODELIST="n[1-2,4]",
                        DSE_NODES="n1,n2,n4")  # as the batch script expands them
        assert (proc.returncode, proc.stderr) == (0, "")
    adir = job.trial_dir / "attempt-1"
    assert sorted(p.name for p in adir.iterdir()) == [
        "stderr.3.log", "stderr.log", "stdout.3.log", "stdout.log"]
    told = [json.loads((adir / name).read_text()) for name in ("stdout.log", "stdout.3.log")]
    assert told == [
        {"DSE_RANK": "0", "DSE_LOCAL_RANK": "0", "DSE_NODE_RANK": "0", "DSE_WORLD_SIZE": "6",
         "DSE_NODE": "n1", "DSE_NODES": "n1,n2,n4"},
        {"DSE_RANK": "3", "DSE_LOCAL_RANK": "1", "DSE_NODE_RANK": "1", "DSE_WORLD_SIZE": "6",
         "DSE_NODE": "n2", "DSE_NODES": "n1,n2,n4"},
    ]


def test_a_one_task_batch_job_is_rank_0_on_its_node(tmp_path):
    job = spec(tmp_path, Resources())
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(render_manifest([job]))
    proc = run_task(manifest, SLURMD_NODENAME="n2", SLURM_JOB_NODELIST="n2", SLURM_NTASKS="1")
    assert (proc.returncode, proc.stderr) == (0, "")
    told = json.loads((job.trial_dir / "attempt-1" / "stdout.log").read_text())
    assert told == {"DSE_RANK": "0", "DSE_LOCAL_RANK": None, "DSE_NODE_RANK": None,
                    "DSE_WORLD_SIZE": "1", "DSE_NODE": "n2", "DSE_NODES": "n2"}


def test_a_task_whose_log_is_a_symlink_fails_before_running(tmp_path):
    job = spec(tmp_path, WIDE)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(render_manifest([job]))
    adir = job.trial_dir / "attempt-1"
    adir.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.write_text("kept\n")
    (adir / "stdout.2.log").symlink_to(outside)
    proc = run_task(manifest, SLURM_PROCID="2")
    assert proc.returncode == 1
    assert "stdout.2.log" in proc.stderr
    assert outside.read_text() == "kept\n"


@pytest.mark.parametrize(
    ("avoid", "partition", "nodes", "expected"),
    [
        (["n2"], ["n1", "n2", "n3", "n5"], 3, (["n2"], [])),
        (["n2", "n1"], ["n1", "n2", "n3", "n5"], 3, (["n1"], ["n2"])),
        (["n1,n2", "n9"], ["n1", "n2", "n3", "n5"], 2, (["n1", "n2"], [])),
        (["n[1-3]"], ["n1", "n2", "n3"], 1, (["n1", "n2"], ["n3"])),
        (["n1"], ["n1", "n2"], 3, ([], ["n1"])),
        ([], ["n1"], 1, ([], [])),
    ],
)
def test_a_partition_spares_at_most_its_nodes_beyond_the_attempts(
    avoid, partition, nodes, expected
):
    assert spare_exclusion(avoid, partition, nodes) == expected


@pytest.mark.parametrize(
    ("state", "failing"),
    [("down", True), ("down*", True), ("drain", True), ("drng", True), ("fail", True),
     ("failg", True), ("idle*", True), ("mix*", True), ("idle", False), ("mix", False),
     ("alloc", False), ("comp", False), ("idle~", False), ("resv", False)],
)
def test_which_node_states_are_blamed(state, failing):
    assert node_is_failing(state) is failing
