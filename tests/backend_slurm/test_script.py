"""Batch scripts and manifests for Slurm arrays: exact text, valid bash, values kept verbatim."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from dse import ConfigError, JobSpec, Resources
from dse_slurm import (
    SlurmOptions,
    group_for_arrays,
    parse_sbatch_output,
    render_array_script,
    render_manifest,
    sbatch_argv,
    slurm_time,
)

GOLDEN = Path(__file__).with_name("golden") / "array_script.sh"
HOSTILE = "$(touch pwned); rm -rf x"
NASTY_ENV = "it's \"quoted\"\nsecond line $HOME `id`"
# Writes what the trial saw to its stdout (which the launcher sends to attempt-<n>/stdout.log).
PROBE = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(),"
    " 'nasty': os.environ.get('NASTY'), 'setup': os.environ.get('FROM_SETUP')}))"
)


def make_specs(root: PurePosixPath | Path, python: str = "python3") -> list[JobSpec]:
    """Three attempts of one batch, sharing resources, with hostile values in the second."""
    res = Resources(cpus=4, gpus=1, memory_mb=2048)
    campaign = root / "my campaign"
    return [
        JobSpec("c1-r1-1", 1, {"lr": 0.1}, Path(campaign / "trials" / "1"),
                argv=(python, "-c", PROBE, "--lr", "0.1"), env={"DSE_TRIAL": "1"},
                resources=res, time_limit=3600.0, avoid_nodes=("n1", "n2")),
        JobSpec("c1-r1-2", 2, {"lr": HOSTILE}, Path(campaign / "trials" / "2"),
                argv=(python, "-c", PROBE, "--lr", HOSTILE),
                env={"DSE_TRIAL": "2", "NASTY": NASTY_ENV}, resources=res,
                time_limit=3599.5, avoid_nodes=("n2", "n1")),
        JobSpec("c1-r1-3", 1, {"lr": 0.3}, Path(campaign / "trials" / "3"),
                argv=('echo "$0 in $PWD"',), shell=True, resources=res, time_limit=3600.0,
                cwd=Path(campaign / "work dir"), avoid_nodes=("n1", "n2")),
    ]


GOLDEN_OPTIONS = SlurmOptions(
    partition="debug", account="proj 42", qos="normal", constraint="a100&ib",
    exclusive=True, extra_sbatch=("--mail-type=END", "#SBATCH --hint=nomultithread"),
    setup=("module load python/3.11", "source '/opt/my env/bin/activate'"),
    signal_lead_s=120, array_throttle=2,
)


def render_golden() -> str:
    specs = make_specs(PurePosixPath("/scratch"))
    return render_array_script(
        specs, GOLDEN_OPTIONS, job_name="dse-c1-r1", comment="dse campaign=c1 trials=1,2,3",
        manifest_path=Path("/scratch/my campaign/.dse/slurm/batch 1.jsonl"),
    )


def test_array_script_matches_the_golden_file():
    assert render_golden() == GOLDEN.read_text()


def test_array_script_is_valid_bash():
    bash = shutil.which("bash")
    assert bash is not None
    proc = subprocess.run([bash, "-n"], input=render_golden(), capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_array_task_runs_its_trial_verbatim(tmp_path):
    specs = make_specs(tmp_path, python=sys.executable)
    (tmp_path / "my campaign" / "work dir").mkdir(parents=True)
    (tmp_path / "x").write_text("still here\n")
    manifest = tmp_path / "my campaign" / "batch.jsonl"
    manifest.write_text(render_manifest(specs))
    options = SlurmOptions(setup=("export FROM_SETUP='set up'",), python=sys.executable)
    script = tmp_path / "job.sh"
    script.write_text(render_array_script(
        specs, options, job_name="dse", comment="dse", manifest_path=manifest,
    ))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SLURM_ARRAY_TASK_ID": "1"}
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    adir = specs[1].trial_dir / "attempt-2"
    seen = json.loads((adir / "stdout.log").read_text())
    assert seen == {
        "argv": ["--lr", HOSTILE], "cwd": str(specs[1].trial_dir), "nasty": NASTY_ENV,
        "setup": "set up",
    }
    assert (adir / "stderr.log").read_text() == ""
    assert (specs[1].trial_dir / "checkpoint").is_dir()
    assert not (specs[0].trial_dir / "attempt-1").exists()
    assert sorted(p.name for p in tmp_path.rglob("pwned")) == []
    assert (tmp_path / "x").read_text() == "still here\n"


def test_shell_trial_runs_through_sh_in_its_cwd(tmp_path):
    specs = make_specs(tmp_path, python=sys.executable)
    (tmp_path / "my campaign" / "work dir").mkdir(parents=True)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(render_manifest(specs))
    script = tmp_path / "job.sh"
    script.write_text(render_array_script(
        specs, SlurmOptions(python=sys.executable), job_name="dse", comment="dse",
        manifest_path=manifest,
    ))
    env = {"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": "2"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0
    log = specs[2].trial_dir / "attempt-1" / "stdout.log"
    assert log.read_text() == f"dse-trial in {tmp_path / 'my campaign' / 'work dir'}\n"


def test_missing_command_exits_127_with_the_reason_in_stderr_log(tmp_path):
    spec = JobSpec("t", 1, {}, tmp_path / "t", argv=("no-such-command-dse",))
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(render_manifest([spec]))
    script = tmp_path / "job.sh"
    script.write_text(render_array_script(
        [spec], SlurmOptions(python=sys.executable), job_name="dse", comment="dse",
        manifest_path=manifest,
    ))
    env = {"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": "0"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 127
    stderr = (tmp_path / "t" / "attempt-1" / "stderr.log").read_text()
    assert stderr.startswith("dse: cannot run 'no-such-command-dse': ")


@pytest.mark.parametrize("plant", ["fifo", "symlink"])
def test_an_output_log_that_is_a_fifo_or_a_symlink_ends_the_task_at_once(tmp_path, plant):
    spec = JobSpec("t", 2, {}, tmp_path / "t", argv=("true",))
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(render_manifest([spec]))
    attempt = tmp_path / "t" / "attempt-2"
    attempt.mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("kept\n")
    if plant == "fifo":
        os.mkfifo(attempt / "stdout.log")  # an earlier attempt's trial left it: no reader
    else:
        (attempt / "stdout.log").symlink_to(outside)
    script = tmp_path / "job.sh"
    script.write_text(render_array_script(
        [spec], SlurmOptions(python=sys.executable), job_name="dse", comment="dse",
        manifest_path=manifest,
    ))
    env = {"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": "0"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 1
    assert b"stdout.log" in proc.stderr
    assert outside.read_text() == "kept\n"


def test_manifest_is_one_ascii_json_line_per_spec():
    specs = make_specs(PurePosixPath("/s"))
    lines = render_manifest(specs).splitlines()
    assert len(lines) == 3
    assert all(line.isascii() for line in lines)
    assert json.loads(lines[1]) == {
        "trial_id": "c1-r1-2", "attempt": 2, "trial_dir": "/s/my campaign/trials/2",
        "cwd": "/s/my campaign/trials/2", "argv": ["python3", "-c", PROBE, "--lr", HOSTILE],
        "env": {"DSE_TRIAL": "2", "NASTY": NASTY_ENV},
    }
    assert json.loads(lines[2])["argv"] == ["/bin/sh", "-c", 'echo "$0 in $PWD"', "dse-trial"]


def test_manifest_rejects_a_spec_without_command():
    with pytest.raises(ValueError, match="no command"):
        render_manifest([JobSpec("t", 1, {}, Path("/t"))])


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (1, "1:00"), (60, "1:00"), (61, "2:00"), (3540, "59:00"), (3599.5, "0-01:00:00"),
        (3600, "0-01:00:00"), (90061, "1-01:02:00"), (7 * 86400, "7-00:00:00"),
    ],
)
def test_slurm_time_rounds_up_to_minutes(seconds, expected):
    assert slurm_time(seconds) == expected


@pytest.mark.parametrize("seconds", [0, -5, float("inf"), float("nan")])
def test_slurm_time_rejects_non_positive(seconds):
    with pytest.raises(ConfigError, match="positive number of seconds"):
        slurm_time(seconds)


def test_group_for_arrays_by_resources_time_class_and_avoided_nodes():
    a = JobSpec("a", 1, {}, Path("/a"), argv=("x",), time_limit=3600.0)
    b = JobSpec("b", 1, {}, Path("/b"), argv=("x",), time_limit=3599.5)  # same minute
    c = JobSpec("c", 1, {}, Path("/c"), argv=("x",), time_limit=3601.0)
    d = JobSpec("d", 1, {}, Path("/d"), argv=("x",), time_limit=3600.0,
                resources=Resources(cpus=2))
    e = JobSpec("e", 1, {}, Path("/e"), argv=("x",), time_limit=3600.0, avoid_nodes=("n1",))
    f = JobSpec("f", 1, {}, Path("/f"), argv=("x",))
    g = JobSpec("g", 1, {}, Path("/g"), argv=("x",), time_limit=3600.0)
    groups = group_for_arrays([a, b, c, d, e, f, g])
    assert [[s.trial_id for s in group] for group in groups] == [
        ["a", "b", "g"], ["c"], ["d"], ["e"], ["f"],
    ]


def test_render_refuses_mixed_arrays():
    a = JobSpec("a", 1, {}, Path("/a"), argv=("x",))
    d = JobSpec("d", 1, {}, Path("/d"), argv=("x",), resources=Resources(cpus=2))
    with pytest.raises(ValueError, match="must share resources"):
        render_array_script([a, d], SlurmOptions(), job_name="j", comment="c",
                            manifest_path=Path("/m"))


def test_minimal_script_omits_unset_options():
    spec = JobSpec("a", 1, {}, Path("/a"), argv=("x",))
    text = render_array_script([spec], SlurmOptions(), job_name="j", comment="c",
                               manifest_path=Path("/d/m.jsonl"))
    assert text.splitlines()[:11] == [
        "#!/bin/bash",
        "#SBATCH --array=0-0",
        "#SBATCH --job-name=j",
        "#SBATCH --comment=c",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --cpus-per-task=1",
        "#SBATCH --no-requeue",
        "#SBATCH --open-mode=append",
        "#SBATCH --output=/d/%A_%a.out",
        "#SBATCH --error=/d/%A_%a.err",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partition": "a\nb"}, "backend.slurm.partition: 'a\\\\nb' holds a newline"),
        ({"account": "a\\b"}, "backend.slurm.account: .* holds a backslash"),
        ({"qos": ""}, "backend.slurm.qos: empty value"),
        ({"constraint": "x\rb"}, "backend.slurm.constraint: .* holds a carriage return"),
        ({"extra_sbatch": ("mail-type=END",)}, "is not an sbatch option"),
        ({"extra_sbatch": ("--x=1\n#SBATCH --y",)}, "holds a newline"),
        ({"signal_lead_s": 0}, "signal_lead: 1 to 65535 seconds expected"),
        ({"array_throttle": 0}, "array_throttle: >= 1 expected"),
    ],
)
def test_options_reject_values_an_sbatch_line_cannot_hold(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SlurmOptions(**kwargs)


def test_render_rejects_unsafe_names_and_log_dirs():
    spec = JobSpec("a", 1, {}, Path("/a"), argv=("x",))
    with pytest.raises(ConfigError, match="job_name: 'a\\\\nb' holds a newline"):
        render_array_script([spec], SlurmOptions(), job_name="a\nb", comment="c",
                            manifest_path=Path("/m"))
    with pytest.raises(ConfigError, match="holds a '%'"):
        render_array_script([spec], SlurmOptions(), job_name="j", comment="c",
                            manifest_path=Path("/m"), log_dir=Path("/logs/%u"))


def test_sbatch_argv_and_output():
    assert sbatch_argv(Path("/d/job 1.sh")) == ["sbatch", "--parsable", "/d/job 1.sh"]
    assert parse_sbatch_output("68\n") == "68"
    assert parse_sbatch_output("69;cluster2\n") == "69"
    with pytest.raises(ValueError, match="sbatch printed no job id: 'oops'"):
        parse_sbatch_output("oops")
