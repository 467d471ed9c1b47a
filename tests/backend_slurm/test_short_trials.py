"""Short trials on Slurm: ``mode = "auto"``'s choice, ends read from the pilot's files, and
the few Slurm commands a sweep makes (unit tests, then the real cluster)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import pytest

from dse import Resources, SystemClock
from dse_slurm import SlurmAllocationBackend, SlurmBackend, SlurmOptions, render_pilot_script
from dse_slurm._pilot import ALIVE
from dse_slurm._watch import LIVENESS_S, STALE_S, DirectoryWatch, Liveness
from support.cli import run_dse, write_plugin
from support.slurm import pass_commands

if TYPE_CHECKING:

    from dse import JobStatus

# -- mode = "auto" -----------------------------------------------------------------------------


def choose(options: dict[str, object], time_limit: float | None, gpus: int = 0,
           parallelism: int = 6) -> object:
    backend = SlurmBackend.from_options(options, source="c.toml")
    return backend.for_trials(time_limit=time_limit, resources=Resources(cpus=1, gpus=gpus),
                              parallelism=parallelism)


def test_auto_runs_trials_with_a_short_time_limit_in_an_allocation_of_the_tables_size():
    chosen = choose({"allocation_cpus": 2, "allocation_time": "30m", "partition": "p"}, 60.0)
    assert isinstance(chosen, SlurmAllocationBackend)
    assert (chosen.allocation_cpus, chosen.allocation_time, chosen.allocation_tasks) == (
        2, 1800.0, None)
    assert chosen.options.partition == "p"


@pytest.mark.parametrize(("options", "time_limit", "gpus"), [
    ({}, None, 0),                                  # no campaign-wide limit: unknown length
    ({}, 601.0, 0),                                 # longer than the default 10 minutes
    ({"auto_threshold": "1m"}, 120.0, 0),           # longer than the table's threshold
    ({}, 60.0, 1),                                  # GPUs: job arrays
    ({"mode": "jobs"}, 60.0, 0),                    # asked for
])
def test_auto_runs_other_trials_as_job_arrays(options, time_limit, gpus):
    chosen = choose(options, time_limit, gpus)
    assert type(chosen) is SlurmBackend


def test_mode_allocation_is_not_changed_by_the_trials():
    backend = SlurmBackend.from_options({"mode": "allocation"})
    assert backend.for_trials(time_limit=None, resources=Resources(), parallelism=4) is backend


def test_a_pilot_sized_by_tasks_asks_for_them_and_no_node_count(tmp_path):
    script = render_pilot_script(SlurmOptions(), job_name="p", pilot_dir=tmp_path, nodes=1,
                                 time_s=3600, tasks=(6, 2))
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --ntasks=6" in directives
    assert "#SBATCH --cpus-per-task=2" in directives
    assert not [d for d in directives if d.startswith(("#SBATCH --nodes", "#SBATCH --excl"))]


# -- the watch and the liveness checks (pure, on this filesystem) ----------------------------


def test_a_watch_wakes_when_a_file_comes_and_not_for_a_touched_one(tmp_path):
    (tmp_path / ALIVE).write_text("")
    watch = DirectoryWatch()
    assert not watch.watching  # nothing marked: nothing to wait on
    watch.mark([tmp_path])
    assert watch.watching
    os.utime(tmp_path / ALIVE)  # a heartbeat: no new file
    assert not watch.changed()
    timer = threading.Timer(0.2, lambda: (tmp_path / "k.exit.json").write_text("{}"))
    timer.start()
    try:
        assert watch.wait(SystemClock(), 30.0)
    finally:
        timer.cancel()


def test_liveness_asks_first_then_rarely_and_at_once_when_a_heartbeat_stops(tmp_path):
    live = Liveness()
    assert live.due([], 0.0)
    live.asked(0.0)
    (tmp_path / ALIVE).write_text("")
    assert not live.due([tmp_path], 1.0)
    os.utime(tmp_path / ALIVE, ns=(1, 2))  # it beat
    assert not live.due([tmp_path], 1.0 + STALE_S - 0.1)
    assert live.due([tmp_path], 1.0 + 2 * STALE_S)  # no beat since
    live.asked(1.0 + 2 * STALE_S)
    assert not live.due([], 2 * STALE_S + 2)
    assert live.due([], 1.0 + 2 * STALE_S + LIVENESS_S)


# -- the real cluster ------------------------------------------------------------------------


@pytest.mark.xdist_group("slurm")
def test_ends_are_read_from_the_pilots_files_without_a_slurm_command_each(
    slurm_cluster, tmp_path
):
    from dse import JobSpec

    backend = SlurmAllocationBackend(options=SlurmOptions(python=sys.executable),
                                     allocation_time=300.0, allocation_cpus=2)
    specs = [JobSpec(f"c-1-{i}", 1, {}, tmp_path / "run" / f"t{i}", time_limit=60.0,
                     argv=(sys.executable, "-c", f"import time; time.sleep(0.3); exit({i % 2})"))
             for i in range(8)]
    began = time.monotonic()
    deadline = began + 240
    try:
        ids = backend.submit(specs)
        seen: dict[str, JobStatus] = {}
        passes = 0
        while not all(i in seen and seen[i].state.is_finished() for i in ids):
            assert time.monotonic() < deadline, seen
            backend.wait(2.0)  # as the engine waits: returns when a file came
            seen.update({s.job_id: s for s in backend.poll()})
            passes += 1
    finally:
        backend.shutdown()
    assert [seen[i].exit_code for i in ids] == [i % 2 for i in range(8)]
    # Eight ends over many passes: one sbatch, the squeue of the first pass (more only as
    # the liveness interval passes, or a heartbeat is late on a loaded machine), no sacct.
    assert passes >= 4
    assert backend.commands["sbatch"] == 1
    assert "sacct" not in backend.commands
    elapsed = time.monotonic() - began
    assert backend.commands["squeue"] <= 2 + elapsed // LIVENESS_S + elapsed // (4 * STALE_S)
    assert backend.commands["squeue"] < passes / 2


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of *spans* (start, end) open at one moment."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


CAMPAIGN = """\
[campaign]
name = "short"
agent = "random"
backend = "slurm"
mode = "rolling"
max_parallelism = 6
max_trials = 24
seed = 3

[environment]
command = ["python", "trial.py"]
time_limit = "1m"

[backend.slurm]
partition = "batch"
python = "{python}"

[[objectives]]
metric = "v"

[space]
x = {{ type = "float", low = 0, high = 1 }}
"""


@pytest.mark.xdist_group("slurm")
def test_a_short_sweep_picks_the_allocation_itself_and_makes_a_handful_of_slurm_calls(
    slurm_cluster, tmp_path
):
    project = write_plugin(tmp_path)
    (project / "trial.py").write_text(
        "import time\nimport dse.trial\ntime.sleep(0.5)\ndse.trial.report({'v': 1.0})\n")
    (project / "c.toml").write_text(CAMPAIGN.format(python=sys.executable))
    try:
        proc = run_dse(project, "run", "c.toml", timeout=240)
    finally:
        for pilot_id in project.rglob("pilot.id"):
            subprocess.run(["scancel", pilot_id.read_text().strip()], check=False, timeout=30)
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    rows = db.execute("SELECT job_id, submitted_at, started_at, ended_at FROM attempts"
                      " WHERE state = 'succeeded'").fetchall()
    db.close()
    assert len(rows) == 24
    assert all(job.startswith("alloc.") for job, *_ in rows)  # auto chose the allocation
    # The random agent proposes ahead: the pilot held up to a second round of attempts
    # queued (handed over, not started), and never ran more than max_parallelism at once.
    assert most_at_once([(s, e) for _, s, _, e in rows]) > 6
    assert most_at_once([(s, e) for _, _, s, e in rows]) <= 6
    [script] = project.rglob("pilot.sh")
    assert "#SBATCH --ntasks=6" in script.read_text()  # room for max_parallelism trials
    counts: dict[str, int] = {}
    for commands in pass_commands(project):
        for name, count in commands.items():
            counts[name] = counts.get(name, 0) + count
    # sinfo (the partition's size), the pilot's sbatch, squeue on the first pass and at most
    # every 30 s after; the final scancel comes after the last pass.
    assert counts.get("sinfo") == 1
    assert counts.get("sbatch") == 1
    assert set(counts) <= {"sinfo", "sbatch", "squeue"}
    assert sum(counts.values()) <= 6, counts


def test_a_file_written_in_the_tick_of_the_mark_is_noticed_by_its_count(tmp_path):
    watch = DirectoryWatch()
    (tmp_path / "a.task.json").write_text("{}")
    watch.mark([tmp_path])
    stamp = os.stat(tmp_path).st_mtime_ns
    (tmp_path / "a.exit.json").write_text("{}")
    os.utime(tmp_path, ns=(stamp, stamp))  # as if in the same clock tick
    assert watch.changed()
