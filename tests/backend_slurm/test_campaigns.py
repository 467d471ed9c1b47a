"""Whole campaigns on the real local Slurm cluster, driven by `dse run` as a user runs it.

Each trial runs ``work.py`` (``support.slurm_work``), which records where each of its runs
ran, so a test checks what ran, not what the engine believes ran. These tests take nodes down
and preempt jobs, so they run one after another (``xdist_group("slurm")``).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.campaign_record import (
    attempts_by_trial,
    recorded,
    runs_of,
    sleepers,
    started_on,
    trials,
)
from support.cli import run_dse, start_dse
from support.slurm import (
    pass_commands,
    queued_jobs,
    resume_node,
    run,
    wait_for_an_idle_cluster,
    wait_until,
)
from support.slurm_work import INTERRUPTIONS, project_with, release

pytestmark = [pytest.mark.xdist_group("slurm"), pytest.mark.usefixtures("slurm_cluster")]


def unique(name: str) -> str:
    """*name* made unique to this test run, so leftovers of an earlier run never match."""
    return f"{name}{secrets.token_hex(3)}"


def prefix(name: str) -> str:
    """The start of the Slurm job names of the first run of campaign *name*."""
    return f"dse.{name}-1."


def assert_retried_elsewhere(project: Path, count: int, state: str, node: str) -> None:
    """All *count* trials completed; those whose first attempt ended *state* on *node* ran a second
    attempt elsewhere, and the rest ended succeeded, after interruptions only. The trial the
    test waited for ran its workload twice, once on each node; another trial the node held may
    have been taken down between its allocation and its workload's first line, so it ran once."""
    assert [row["status"] for row in trials(project).values()] == ["completed"] * count
    attempts = attempts_by_trial(project)
    hit = {n: a for n, a in attempts.items() if a[0]["state"] == state}
    assert hit, {n: [x["state"] for x in a] for n, a in attempts.items()}
    runs = runs_of(project)
    for number, tries in hit.items():
        assert [a["state"] for a in tries] == [state, "succeeded"]
        assert tries[0]["node"] == node
        assert tries[1]["node"] != node  # the node that interrupted it is avoided
        assert runs[number] in ([f"1 {node}", f"2 {tries[1]['node']}"], [f"2 {tries[1]['node']}"])
    assert any(runs[number][0] == f"1 {node}" for number in hit), runs
    for number, tries in attempts.items():
        if number not in hit:
            assert tries[-1]["state"] == "succeeded"
            assert {a["state"] for a in tries[:-1]} <= INTERRUPTIONS


def stop(dse: subprocess.Popen[str]) -> None:
    """Kill the controller if a test failed while it ran, and close its pipes."""
    if dse.poll() is None:
        dse.kill()
    dse.communicate(timeout=30)


def running_jobs(prefix: str) -> int:
    """How many jobs named *prefix*... run."""
    out = run(["squeue", "--noheader", "--states=RUNNING", "--format=%j"])
    return sum(1 for name in out.split() if name.startswith(prefix))


def test_27_trials_at_p9_go_out_as_arrays_and_run_on_all_three_nodes(tmp_path):
    # A job an earlier test cancelled may still hold a node, and a resumed node takes nothing
    # until its slurmd answers: wait until every node is free and answers.
    wait_for_an_idle_cluster()
    project = project_with(tmp_path, "arrays", sleepers(27, 1.0), parallelism=9)

    proc = run_dse(project, "run", "campaign.toml", timeout=240)

    assert proc.returncode == 0, proc.stderr
    rows = trials(project)
    assert len(rows) == 27
    assert {row["status"] for row in rows.values()} == {"completed"}
    assert sorted(row["score"] for row in rows.values()) == [i * 1.5 for i in range(27)]
    attempts = attempts_by_trial(project)
    assert all(len(a) == 1 for a in attempts.values()), {
        n: [(x["state"], x["node"], x["reason"]) for x in a] for n, a in attempts.items()}
    # The node recorded for each attempt is where its workload ran, and every node took some.
    # (CI twice saw one node take none: the preemption test holding n1 and the node-down test
    # taking n2 ran beside this one, when pytest 9.2 broke --dist loadgroup.)
    runs = runs_of(project)
    assert {n: runs[n] for n in rows} == {n: [f"1 {a[0]['node']}"] for n, a in attempts.items()}
    assert {a[0]["node"] for a in attempts.values()} == {"n1", "n2", "n3"}, run(["sinfo", "-N"])
    # One array per wave: 27 trials in waves of 9 → three arrays, each task's id <array>_<i>.
    arrays = {a[0]["job_id"].split("_")[0] for a in attempts.values()}
    assert len(arrays) == 3
    passes = pass_commands(project)
    assert sum(p.get("sbatch", 0) for p in passes) == 3
    assert max(p.get("squeue", 0) for p in passes) == 1
    assert max(p.get("sacct", 0) for p in passes) == 1
    # The accounting inputs of the budget ledger are recorded with every attempt.
    for attempt in attempts.values():
        usage = json.loads(attempt[0]["usage"])
        assert usage["cpus"] == 1.0
        assert usage["elapsed_s"] >= 1.0


def test_preempted_trials_are_retried_as_new_attempts_and_complete(tmp_path):
    name = unique("preempt")
    project = project_with(tmp_path, name, sleepers(6, 120.0), parallelism=6)
    dse = start_dse(project, "run", "campaign.toml")
    urgent = None
    try:
        wait_until(lambda: started_on(project, "n1"), 60, "a trial running on n1")
        # Two CPUs on n1 for the preempting partition: both trials there are preempted.
        urgent = run(["sbatch", "--parsable", "--partition=urgent", "--nodes=1",
                      "--ntasks=2", "--nodelist=n1", "--job-name=urgent-work",
                      "--output=/dev/null",
                      "--wrap=sleep 3"]).strip()
        wait_until(lambda: recorded(project, "preempted"), 120, "a preempted attempt")
        release(project)
        _, err = dse.communicate(timeout=240)
    finally:
        stop(dse)
        if urgent:
            subprocess.run(["scancel", urgent], check=False)
    assert dse.returncode == 0, err
    assert_retried_elsewhere(project, 6, "preempted", "n1")


def test_a_node_going_down_fails_its_attempts_which_are_retried_elsewhere(tmp_path):
    name = unique("nodefail")
    project = project_with(tmp_path, name, sleepers(6, 120.0), parallelism=6)
    dse = start_dse(project, "run", "campaign.toml")
    try:
        wait_until(lambda: started_on(project, "n2"), 60, "a trial running on n2")
        run(["scontrol", "update", "nodename=n2", "state=down", "reason=dse-test"])
        wait_until(lambda: recorded(project, "node_fail"), 120, "an attempt ended node_fail")
        release(project)
        _, err = dse.communicate(timeout=240)
    finally:
        stop(dse)
        resume_node("n2")
    assert dse.returncode == 0, err
    assert_retried_elsewhere(project, 6, "node_fail", "n2")


def test_a_job_cancelled_by_someone_else_is_an_interruption_and_retried(tmp_path):
    name = unique("outside")
    project = project_with(tmp_path, name, sleepers(3, 120.0), parallelism=3)
    dse = start_dse(project, "run", "campaign.toml")
    try:
        wait_until(lambda: running_jobs(prefix(name)), 60, "a running trial")
        victim = sorted(queued_jobs(prefix(name)))[0]
        run(["scancel", victim])  # an operator, not dse
        wait_until(lambda: recorded(project, "cancelled"), 120, "the cancelled attempt")
        release(project)
        _, err = dse.communicate(timeout=180)
    finally:
        stop(dse)
    assert dse.returncode == 0, err
    assert {row["status"] for row in trials(project).values()} == {"completed"}
    attempts = attempts_by_trial(project)
    (retried,) = [a for a in attempts.values() if len(a) > 1]
    assert [(a["job_id"] == victim, a["state"]) for a in retried] == [
        (True, "cancelled"), (False, "succeeded"),
    ]
    assert retried[0]["reason"] == "CANCELLED by uid 0"


def test_cancel_leaves_no_job_of_the_campaign_in_the_queue(tmp_path):
    name = unique("cancel")
    project = project_with(tmp_path, name, sleepers(9, 120.0), parallelism=9)
    dse = start_dse(project, "run", "campaign.toml")
    try:
        wait_until(lambda: running_jobs(prefix(name)) >= 1, 60, "running trials")
        assert len(queued_jobs(prefix(name))) == 9
        dse.send_signal(signal.SIGINT)
        dse.communicate(timeout=60)
    finally:
        stop(dse)
    assert queued_jobs(prefix(name)) == []
    rows = trials(project)
    assert {row["status"] for row in rows.values()} == {"cancelled"}
    attempts = attempts_by_trial(project)
    assert {a[-1]["state"] for a in attempts.values()} == {"cancelled"}


def test_a_killed_controller_reattaches_on_restart_and_nothing_runs_twice(tmp_path):
    name = unique("restart")
    project = project_with(tmp_path, name, sleepers(6, 8.0), parallelism=6)
    dse = start_dse(project, "run", "campaign.toml")
    try:
        wait_until(lambda: running_jobs(prefix(name)), 60, "a running trial")
    finally:
        stop(dse)  # SIGKILL: no cleanup, the jobs keep running
    assert len(queued_jobs(prefix(name))) == 6

    proc = run_dse(project, "run", "campaign.toml", timeout=180)

    assert proc.returncode == 0, proc.stderr
    rows = trials(project)
    assert {row["status"] for row in rows.values()} == {"completed"}
    attempts = attempts_by_trial(project)
    assert all([a["state"] for a in tries] == ["succeeded"] for tries in attempts.values())
    assert all(len(lines) == 1 for lines in runs_of(project).values()), runs_of(project)


ALLOCATION = f"""\
mode = "allocation"
python = "{sys.executable}"
allocation_cpus = 2
allocation_time = "10m"
"""


def starts(project: Path) -> int:
    """How many runs of trial workloads have started (lines in every runs.log)."""
    return sum(len(log.read_text().splitlines())
               for log in project.glob(".dse/*/run-*/*/checkpoint/runs.log"))


def handed(project: Path) -> int:
    """How many attempts were handed to pilots as task files (by any controller)."""
    return len(list(project.glob(".dse/*/run-*/.slurm/*.pilot.*/*.task.json")))


def pilot_dirs(project: Path) -> list[Path]:
    """The directories of the pilots submitted for *project* (one per ``sbatch``)."""
    return sorted(p for p in project.glob(".dse/*/run-*/.slurm/*.pilot.*") if p.is_dir())


def pilot_jobs(name: str) -> dict[str, str]:
    """Job id → state of every pilot job of campaign *name* that Slurm's accounting knows."""
    out = run(["sacct", "-X", "--noheader", "--parsable2", "--starttime=now-1hours",
               "--format=JobID,JobName,State"])
    return {job: state.split(" ", 1)[0] for job, job_name, state in
            (line.split("|") for line in out.splitlines() if line.count("|") == 2)
            if job_name.startswith(f"{prefix(name)}pilot.")}


def pilot_jobs_once_ended(name: str, job: str) -> dict[str, str]:
    """:func:`pilot_jobs` of campaign *name* once Slurm's accounting recorded that pilot *job*
    ended. slurmctld hands its records to slurmdbd asynchronously (a loaded machine's sacct
    may not list a job that ended, or one still running, for seconds), in the order things
    happened: a pilot submitted before *job* ended is listed by then."""
    return wait_until(
        lambda: (jobs := pilot_jobs(name)).get(job, "RUNNING") not in ("PENDING", "RUNNING")
        and jobs, 60, f"sacct to record the end of pilot {job} of campaign {name}")


def test_allocation_mode_killed_three_times_uses_one_pilot(tmp_path):
    name = unique("adopt")
    project = project_with(tmp_path, name, sleepers(10, 0.5), parallelism=2, mode="rolling",
                           backend=ALLOCATION + 'allocation_grace = "1m"')
    for run_number in range(3):
        # The first run is killed once the pilot runs a trial; each later one as soon as it
        # handed the pilot an attempt of its own (often before the pilot started it).
        before = handed(project)
        dse = start_dse(project, "run", "campaign.toml")
        try:
            wait_until(lambda first=run_number == 0, before=before, dse=dse: (
                (starts(project) if first else handed(project) - before) > 0
                or dse.poll() is not None
            ), 90, f"run {run_number + 1} to hand over trials")
            assert dse.poll() is None, dse.communicate()
        finally:
            stop(dse)  # SIGKILL: the pilot and what it runs live on
    assert handed(project) < 10  # the last run hands over attempts too

    proc = run_dse(project, "run", "campaign.toml", timeout=180)

    assert proc.returncode == 0, proc.stderr
    rows = trials(project)
    assert sorted(row["score"] for row in rows.values()) == [i * 1.5 for i in range(10)]
    assert {row["status"] for row in rows.values()} == {"completed"}
    attempts = attempts_by_trial(project)
    assert all([a["state"] for a in tries] == ["succeeded"] for tries in attempts.values())
    assert all(len(lines) == 1 for lines in runs_of(project).values()), runs_of(project)
    # One pilot across the four controllers: one directory, one job, every attempt its step.
    dirs = pilot_dirs(project)
    assert len(dirs) == 1, [d.name for d in dirs]
    job = (dirs[0] / "pilot.id").read_text().strip()
    assert pilot_jobs_once_ended(name, job).keys() == {job}
    assert {json.loads(a["usage"])["allocation_job"] for tries in attempts.values()
            for a in tries} == {float(job)}
    assert queued_jobs(prefix(name)) == []  # the last controller released it


def test_a_pilot_whose_controller_is_gone_finishes_its_steps_and_releases_its_nodes(tmp_path):
    name = unique("orphan")
    project = project_with(tmp_path, name, sleepers(3, 3.0), parallelism=2, mode="rolling",
                           backend=ALLOCATION + 'allocation_grace = "3s"')
    dse = start_dse(project, "run", "campaign.toml")
    try:
        wait_until(lambda: starts(project) >= 2, 90, "two trials running")
    finally:
        stop(dse)  # SIGKILL while both run
    [pilot_dir] = pilot_dirs(project)
    job = (pilot_dir / "pilot.id").read_text().strip()

    # Not its time limit (10 minutes): it ran its steps to their end, then let go.
    wait_until(lambda: pilot_jobs(name).get(job) == "COMPLETED", 120,
               "the pilot to release its allocation")
    assert job not in queued_jobs(prefix(name))
    ends = [json.loads(p.read_text()) for p in pilot_dir.glob("*.exit.json")]
    assert [(e["rc"], e["cancelled"], e["timed_out"]) for e in ends] == [(0, False, False)] * 2
    released = json.loads((pilot_dir / "pilot.end.json").read_text())
    assert "no word from the controller" in released["reason"]

    proc = run_dse(project, "run", "campaign.toml", timeout=180)

    # The release interrupted nothing: the two ended as they ran, the third ran in a new pilot.
    assert proc.returncode == 0, proc.stderr
    assert {row["status"] for row in trials(project).values()} == {"completed"}
    attempts = attempts_by_trial(project)
    assert all([a["state"] for a in tries] == ["succeeded"] for tries in attempts.values())
    assert all(len(lines) == 1 for lines in runs_of(project).values()), runs_of(project)
    assert len(pilot_dirs(project)) == 2


def test_with_only_dse_core_and_the_slurm_backend_a_missing_agent_says_what_to_install(
    tmp_path,
):
    project = project_with(tmp_path, "noagents", sleepers(1, 0.0), parallelism=1)
    text = (project / "campaign.toml").read_text().replace('agent = "list"', 'agent = "random"')
    (project / "campaign.toml").write_text(text)
    # What `pip install dse-core dse-backend-slurm` gives: core's probe and the Slurm backend.
    env = dict(os.environ, DSE_DISABLE_PLUGIN_AUTOLOAD="1", DSE_PLUGINS="dse_slurm._plugin")

    plugins = subprocess.run([sys.executable, "-m", "dse", "plugins"], cwd=project, env=env,
                             capture_output=True, text=True, timeout=60, check=True).stdout
    proc = subprocess.run([sys.executable, "-m", "dse", "run", "campaign.toml"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=60, check=False)

    assert "slurm" in plugins
    assert "random" not in plugins
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line == (
        "dse: error: campaign.toml: campaign.agent: unknown agent 'random';"
        " installed agents: none"
        " ('random' comes with dse-agents: pip install dse-agents)"
    )
