"""Allocation mode: one pilot job, attempts as its steps (unit tests, then the real cluster)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dse import Backend, ConfigError, JobSpec, JobState, JobStatus, Resources
from dse.testing import BackendContract
from dse_slurm import (
    SlurmAllocationBackend,
    SlurmBackend,
    SlurmOptions,
    allocation_share,
    render_pilot_script,
)
from dse_slurm._allocation import FATE_BEAT_S, FATE_WAIT_S, _fate_unknown, _lost_to_ending, _Pilot
from dse_slurm._pilot import ALIVE, HEARTBEAT, Pilot, cpus_per_node
from support.cli import start_dse, write_plugin
from support.slurm import wait_until

# -- options ---------------------------------------------------------------------------------


def test_mode_allocation_makes_the_allocation_backend_with_its_options():
    backend = SlurmBackend.from_options({
        "mode": "allocation", "allocation_nodes": 2, "allocation_time": "30m",
        "allocation_cpus": 4, "allocation_grace": "90s", "partition": "batch",
        "command_timeout": "5s",
    })
    assert isinstance(backend, SlurmAllocationBackend)
    assert (backend.allocation_nodes, backend.allocation_time, backend.allocation_cpus,
            backend.allocation_grace) == (2, 1800.0, 4, 90.0)
    assert backend.options.partition == "batch"
    assert backend.command_timeout == 5.0
    assert backend.name == "slurm"


def test_mode_defaults_to_auto_and_allocation_defaults_to_one_node_for_an_hour():
    auto = SlurmBackend.from_options({})
    assert type(auto) is SlurmBackend
    assert auto.auto is not None
    jobs = SlurmBackend.from_options({"mode": "jobs"})
    assert type(jobs) is SlurmBackend
    assert jobs.auto is None
    backend = SlurmBackend.from_options({"mode": "allocation"})
    assert isinstance(backend, SlurmAllocationBackend)
    assert (backend.allocation_nodes, backend.allocation_time, backend.allocation_cpus,
            backend.allocation_grace) == (1, 3600.0, None, 300.0)


@pytest.mark.parametrize(("options", "needle"), [
    ({"mode": "pilot"}, 'backend.slurm.mode: expected "auto", "jobs" or "allocation"'),
    ({"mode": 3}, "backend.slurm.mode"),
    ({"mode": "jobs", "allocation_nodes": 2}, 'need mode = "allocation" or "auto"'),
    ({"mode": "allocation", "auto_threshold": "5m"}, 'auto_threshold needs mode = "auto"'),
    ({"auto_threshold": "soon"}, "backend.slurm.auto_threshold"),
    ({"mode": "allocation", "allocation_nodes": 0}, "backend.slurm.allocation_nodes"),
    ({"mode": "allocation", "allocation_nodes": True}, "backend.slurm.allocation_nodes"),
    ({"mode": "allocation", "allocation_cpus": "2"}, "backend.slurm.allocation_cpus"),
    ({"mode": "allocation", "allocation_time": "soon"}, "backend.slurm.allocation_time"),
    ({"mode": "allocation", "allocation_time": "5s"}, "backend.slurm.allocation_time"),
    ({"mode": "jobs", "allocation_grace": "1m"}, 'need mode = "allocation" or "auto"'),
    ({"mode": "allocation", "allocation_grace": "a while"}, "backend.slurm.allocation_grace"),
    ({"mode": "allocation", "allocation_grace": 0}, "backend.slurm.allocation_grace"),
    ({"mode": "allocation", "allocation_grace": "-5s"}, "backend.slurm.allocation_grace"),
])
def test_bad_allocation_options_are_one_line_config_errors_naming_the_key(options, needle):
    with pytest.raises(ConfigError) as info:
        SlurmBackend.from_options(options, source="c.toml")
    message = str(info.value)
    assert message.startswith("c.toml: backend.slurm")
    assert needle in message
    assert "\n" not in message


def test_the_allocation_backend_reads_the_same_table_without_a_mode():
    backend = SlurmAllocationBackend.from_options({"allocation_nodes": 2, "partition": "b"})
    assert (backend.allocation_nodes, backend.options.partition) == (2, "b")
    with pytest.raises(ConfigError) as info:
        SlurmAllocationBackend.from_options({"mode": "jobs"}, source="c.toml")
    assert str(info.value).startswith('c.toml: backend.slurm.mode: "allocation" expected')


def test_an_attempt_longer_than_the_allocation_is_invalid_without_any_slurm_command(tmp_path):
    backend = SlurmAllocationBackend(allocation_time=600.0)
    spec = JobSpec("c-1-0", 1, {}, tmp_path / "t0", argv=("true",), time_limit=3600.0)
    ids = backend.submit([spec])
    [status] = backend.poll()
    assert status.job_id == ids[0]
    assert status.state is JobState.INVALID
    assert "allocation_time" in (status.reason or "")
    assert backend.commands == {}


# -- pure pieces -----------------------------------------------------------------------------


def test_a_step_running_alone_is_charged_the_whole_allocation():
    assert allocation_share((0.0, 10.0, 1.0), [(0.0, 10.0, 1.0)], 6.0) == 60.0


def test_shares_follow_cpus_while_steps_overlap_and_add_up_to_the_busy_cpu_seconds():
    steps = [(0.0, 10.0, 1.0), (0.0, 10.0, 2.0), (5.0, 20.0, 1.0)]
    shares = [allocation_share(step, steps, 4.0) for step in steps]
    # 0-5: 1 and 2 CPUs share 4; 5-10: 1, 2 and 1 share 4; 10-20: the last alone.
    assert shares == pytest.approx([5 * 4 / 3 + 5 * 1, 5 * 8 / 3 + 5 * 2, 5 * 1 + 10 * 4])
    assert sum(shares) == pytest.approx(4.0 * 20)


def test_a_step_still_running_counts_in_the_share_of_one_that_ended():
    steps = [(0.0, 10.0, 1.0), (4.0, math.inf, 1.0)]
    assert allocation_share(steps[0], steps, 2.0) == pytest.approx(4 * 2 + 6 * 1)


def test_steps_stamped_overlapping_beyond_the_allocation_are_each_charged_their_cpus():
    # A 1-CPU allocation: the second step's start stamped 0.5 s before the first one's end
    # (CI, load 13: a step charged 0.074 CPU-s for a 0.083 s run).
    steps = [(0.0, 10.0, 1.0), (9.5, 20.0, 1.0)]
    assert [allocation_share(step, steps, 1.0) for step in steps] == pytest.approx([10.0, 10.5])


def test_idle_time_and_empty_steps_are_charged_nothing():
    assert allocation_share((5.0, 5.0, 1.0), [(5.0, 5.0, 1.0)], 4.0) == 0.0
    assert allocation_share((0.0, 2.0, 1.0), [(0.0, 2.0, 1.0), (8.0, 9.0, 1.0)], 1.0) == 2.0


@pytest.mark.parametrize(("text", "count", "cpus"), [
    ("2(x3)", 3, [2, 2, 2]), ("4,2(x2)", 3, [4, 2, 2]), ("8", 1, [8]), ("junk", 2, [1, 1]),
])
def test_the_pilot_reads_slurms_cpus_per_node(text, count, cpus):
    assert cpus_per_node(text, count) == cpus


def test_the_pilot_script_asks_for_whole_nodes_by_default_and_runs_the_pilot(tmp_path):
    script = render_pilot_script(
        SlurmOptions(partition="batch", setup=("module load x",), python="/opt/py 3/python"),
        job_name="dse.c-1.pilot.ab", pilot_dir=tmp_path / "p", nodes=2, time_s=3600,
        exclude=("n3",),
    )
    for line in ("#SBATCH --nodes=2", "#SBATCH --time=0-01:00:00", "#SBATCH --exclusive",
                 "#SBATCH --partition=batch", "#SBATCH --exclude=n3", "#SBATCH --no-requeue",
                 "module load x"):
        assert line in script.splitlines(), script
    assert script.splitlines()[-1].startswith("exec '/opt/py 3/python' ")
    with_cpus = render_pilot_script(SlurmOptions(), job_name="p", pilot_dir=tmp_path, nodes=1,
                                    time_s=90, cpus_per_node=2)
    assert "#SBATCH --cpus-per-task=2" in with_cpus.splitlines()
    assert "#SBATCH --time=2:00" in with_cpus.splitlines()
    assert "--exclusive" not in with_cpus


def test_the_pilot_script_gives_the_pilot_its_grace(tmp_path):
    script = render_pilot_script(SlurmOptions(python="python3"), job_name="p", pilot_dir=tmp_path,
                                 nodes=1, time_s=600, grace_s=89.5)
    assert script.splitlines()[-1].endswith(" 600 python3 90")


def test_a_pilot_releases_itself_after_the_grace_without_a_heartbeat_and_only_when_idle(
    tmp_path,
):
    pilot = Pilot(str(tmp_path), 600.0, sys.executable, controller_grace=60.0)
    start = pilot.heard_at
    assert not pilot.orphaned(start + 59)
    (tmp_path / HEARTBEAT).touch()  # the controller's pass: the grace starts again
    assert not pilot.orphaned(start + 100)
    assert not pilot.orphaned(start + 159)
    pilot.queue.append(("c-1-0.1", {"cpus": 1}))  # a task waits: kept however long
    assert not pilot.orphaned(start + 1000)
    pilot.queue.clear()
    assert pilot.orphaned(start + 160)
    assert not Pilot(str(tmp_path), 600.0, sys.executable).orphaned(start + 10**6)


def test_a_pilot_directory_with_a_percent_sign_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="'%'"):
        render_pilot_script(SlurmOptions(), job_name="p", pilot_dir=tmp_path / "50%",
                            nodes=1, time_s=60)


# -- the real cluster ------------------------------------------------------------------------


def spec(root: Path, number: int, code: str, **fields: object) -> JobSpec:
    return JobSpec(f"c-1-{number}", 1, {}, root / "run" / f"t{number}",
                   argv=(sys.executable, "-c", code), **fields)  # type: ignore[arg-type]


def poll_until(backend: SlurmAllocationBackend, ids: list[str], timeout: float = 240,
               until: object = None) -> dict[str, JobStatus]:
    """Poll as the engine does until every id in *ids* reported an end (or *until*(seen)
    holds); fail after *timeout* seconds. Only this call's polls count: a poll reports what
    changed, so an id whose end an earlier call saw is never reported again."""
    seen: dict[str, JobStatus] = {}
    deadline = time.monotonic() + timeout
    while not all(seen.get(i) and seen[i].state.is_finished() for i in ids):
        if until is not None and until(seen):  # type: ignore[operator]
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"not ended after {timeout}s: {seen}")
        seen.update({s.job_id: s for s in backend.poll()})
        time.sleep(0.2)
    return seen


def node_names() -> set[str]:
    out = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return set(out.split())


def squeue_ids(name_part: str) -> list[str]:
    out = subprocess.run(["squeue", "--noheader", "--format=%i %j"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if name_part in line]


@pytest.fixture
def allocation_backend(slurm_cluster) -> Iterator[SlurmAllocationBackend]:
    """An allocation backend with 2 CPUs on one node for 5 minutes; its pilots are cancelled
    at the end of the test, whatever happened."""
    backend = SlurmAllocationBackend(options=SlurmOptions(python=sys.executable),
                                     allocation_time=300.0, allocation_cpus=2)
    yield backend
    ids = [job for job, _ in backend.pilots if job]
    if ids:
        subprocess.run(["scancel", *ids], check=False, timeout=30)


@pytest.mark.xdist_group("slurm")
def test_attempts_run_as_steps_of_one_pilot_and_end_as_they_did(allocation_backend, tmp_path):
    backend = allocation_backend
    specs = [
        spec(tmp_path, 0, "import os; print(os.environ['DSE_X'])", env={"DSE_X": "it's $x"},
             time_limit=60.0),
        spec(tmp_path, 1, "import sys; sys.exit(3)", time_limit=60.0),
        spec(tmp_path, 2, "import time; time.sleep(120)", time_limit=2.0),
        spec(tmp_path, 3, "x = bytearray(400 * 2**20); import time; time.sleep(5)",
             resources=Resources(cpus=1, memory_mb=60), time_limit=60.0),
        spec(tmp_path, 4, "import time; time.sleep(120)", time_limit=100.0),
    ]
    ids = backend.submit(specs)
    assert backend.commands == {"sbatch": 1}
    seen = poll_until(backend, ids[:4] + ids[4:],
                      until=lambda s: all(s.get(i) and s[i].state.is_finished()
                                          for i in ids[:4]) and ids[4] in s)
    backend.cancel([ids[4]])
    seen.update(poll_until(backend, [ids[4]]))

    assert {i: seen[i].state for i in ids} == {
        ids[0]: JobState.SUCCEEDED, ids[1]: JobState.FAILED, ids[2]: JobState.TIMEOUT,
        ids[3]: JobState.OUT_OF_MEMORY, ids[4]: JobState.CANCELLED,
    }
    assert seen[ids[1]].exit_code == 3
    out = (specs[0].trial_dir / "attempt-1" / "stdout.log").read_text()
    assert out == "it's $x\n"
    [(pilot_id, _)] = backend.pilots
    nodes = node_names()
    for job_id in ids:
        status = seen[job_id]
        assert status.node in nodes
        assert status.started_at is not None
        assert status.ended_at is not None
        assert status.usage is not None
        assert status.usage["allocation_job"] == float(pilot_id)
    # Ended by its 2 s limit, not by its 2-minute sleep: the pilot's SIGTERM, and its SIGKILL
    # 10 s later at worst, on a loaded node (a bound well under the sleep holds at load 8).
    assert seen[ids[2]].ended_at - seen[ids[2]].started_at < 60  # type: ignore[operator]
    usage = seen[ids[0]].usage or {}
    assert usage["cpus"] == 1.0
    assert usage["allocation_cpu_s"] >= usage["elapsed_s"] > 0
    # No Slurm command per attempt: one sbatch, one squeue per pass.
    assert set(backend.commands) == {"sbatch", "squeue"}
    assert backend.commands["sbatch"] == 1

    backend.shutdown()
    assert backend.commands["scancel"] == 1
    wait_until(lambda: pilot_id not in squeue_ids(""), 60, f"pilot {pilot_id} to leave the queue")


@pytest.mark.xdist_group("slurm")
def test_a_pilot_cancelled_outside_interrupts_its_running_attempt_and_a_new_pilot_runs_the_rest(
    allocation_backend: SlurmAllocationBackend, tmp_path: Path
) -> None:
    backend = allocation_backend
    go = tmp_path / "go"
    waiting = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.2)"
    first = spec(tmp_path, 0, waiting, time_limit=150.0, resources=Resources(cpus=2))
    [first_id] = backend.submit([first])
    seen = poll_until(backend, [first_id], until=lambda s: first_id in s)
    assert seen[first_id].state is JobState.RUNNING
    [(first_pilot, _)] = backend.pilots
    assert first_pilot is not None
    subprocess.run(["scancel", first_pilot], check=True, timeout=30)

    # Nothing else is queued, and the attempt still ends, within seconds: the pilot stops
    # beating and one squeue tells its end (a bound far above that on a loaded machine).
    ended = poll_until(backend, [first_id], timeout=FATE_WAIT_S + 60)[first_id]
    assert ended.state is JobState.CANCELLED  # not asked for by dse: the engine retries it
    assert f"allocation {first_pilot} ended CANCELLED" in (ended.reason or "")
    assert ended.node in node_names()
    assert backend.pilots == [(first_pilot, "CANCELLED")]

    # The engine's retry (the same command, which now goes on) and a new attempt: a new pilot
    # runs both. Submitted once the backend knows the first pilot ended, neither is handed to
    # it (one waiting there while it was cancelled could start in it, in the moment between
    # its step's end and Slurm's signal to the pilot, and run or be cancelled with it).
    go.touch()
    rest = [dataclasses.replace(first, attempt=2), spec(tmp_path, 1, "print('second')",
                                                        time_limit=60.0)]
    ids = backend.submit(rest)
    seen = poll_until(backend, ids)

    assert [seen[i].state for i in ids] == [JobState.SUCCEEDED] * 2
    pilots = dict(backend.pilots)
    assert len(pilots) == 2
    assert pilots[first_pilot] == "CANCELLED"
    [second_pilot] = set(pilots) - {first_pilot}
    assert second_pilot is not None
    assert [(seen[i].usage or {})["allocation_job"] for i in ids] == [float(second_pilot)] * 2
    assert (rest[1].trial_dir / "attempt-1" / "stdout.log").read_text() == "second\n"
    backend.shutdown()


@pytest.mark.parametrize(
    ("doc", "ran", "ended", "lost"),
    [
        # srun could not create the step: the allocation was completing (cancelled outside).
        ({"rc": 1, "srun_err": "srun: error: Unable to create step for job 7: Job/step"
          " already completing or completed"}, False, None, True),
        # Any failure to start once the pilot is known to have ended.
        ({"rc": 1, "srun_err": "srun: error: something"}, False, "CANCELLED", True),
        # A failure to start in a live allocation is a launch error, not a requeue.
        ({"rc": 1, "srun_err": "srun: error: Invalid generic resource"}, False, None, False),
        # A step that started and failed is the trial's failure, whatever the pilot did.
        ({"rc": 1, "srun_err": "CANCELLED AT 2026-12-02"}, True, "CANCELLED", False),
        ({"rc": 0, "srun_err": ""}, False, "CANCELLED", False),
        ({"cancelled": True, "rc": None}, False, "CANCELLED", False),
        ({"invalid": "no such partition", "rc": None}, False, "CANCELLED", False),
    ],
)
def test_a_step_that_never_started_in_an_ending_allocation_goes_to_the_next_pilot(
    tmp_path, doc, ran, ended, lost
):
    pilot = _Pilot("p", tmp_path, "7", ended=ended)
    run = {"started_at": 1.0, "node": "n1"} if ran else None
    assert _lost_to_ending(doc, run, pilot) is lost


CANCELLED_OUTSIDE = {"rc": 143, "ended_at": 1000.0,
                     "srun_err": "slurmstepd: error: *** STEP 7.1 ON n1 CANCELLED AT 2026-12-06"
                                 " ***\nsrun: error: n1: task 0: Terminated"}


@pytest.mark.parametrize(
    ("doc", "beat", "ended", "now", "unknown"),
    [
        # The pilot wrote its step's end, then nothing: the allocation's cancel may end it.
        (CANCELLED_OUTSIDE, 999.0, None, 1001.0, True),
        # Its heartbeat within the moment after the step's end proves nothing yet...
        (CANCELLED_OUTSIDE, 1000.0 + FATE_BEAT_S / 2, None, 1002.0, True),
        # ...a later one does: the pilot outlived the step (the step alone was cancelled).
        (CANCELLED_OUTSIDE, 1000.0 + FATE_BEAT_S + 0.5, None, 1003.0, False),
        # The allocation's end is known: it names the attempt's end.
        (CANCELLED_OUTSIDE, 999.0, "CANCELLED", 1001.0, False),
        # A pilot that neither beats nor is seen ending: reported as it is, in the end.
        (CANCELLED_OUTSIDE, 999.0, None, 1000.0 + FATE_WAIT_S, False),
        # Not a cancel from outside: dse's own cancel, the pilot's time limit, a failure, a
        # success.
        ({**CANCELLED_OUTSIDE, "cancelled": True}, 999.0, None, 1001.0, False),
        ({**CANCELLED_OUTSIDE, "timed_out": True}, 999.0, None, 1001.0, False),
        ({"rc": 1, "srun_err": "", "ended_at": 1000.0}, 999.0, None, 1001.0, False),
        ({"rc": 0, "srun_err": "", "ended_at": 1000.0}, 999.0, None, 1001.0, False),
    ],
)
def test_a_step_cancelled_outside_waits_for_its_pilots_fate(
    tmp_path, doc, beat, ended, now, unknown
):
    pilot = _Pilot("p", tmp_path, "7", ended=ended)
    (tmp_path / ALIVE).touch()
    os.utime(tmp_path / ALIVE, (beat, beat))
    run = {"started_at": 990.0, "node": "n1"}
    assert _fate_unknown(doc, run, pilot, now) is unknown


@pytest.mark.xdist_group("slurm")
def test_a_restarted_backend_reattaches_to_a_draining_pilot_and_keeps_it_draining(
    allocation_backend, tmp_path
):
    first = allocation_backend
    go = tmp_path / "go"
    waiting = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.2)"
    specs = [spec(tmp_path, 0, waiting, time_limit=150.0)]
    ids = first.submit(specs)
    seen = poll_until(first, ids, until=lambda s: ids[0] in s)
    node = seen[ids[0]].node
    assert node is not None
    # An attempt avoiding that node: the pilot declines it and drains; a second pilot runs it,
    # and an operator cancels that one once it is idle.
    specs.append(spec(tmp_path, 1, "print(1)", time_limit=60.0, avoid_nodes=(node,)))
    ids += first.submit(specs[1:])
    seen.update(poll_until(first, ids[1:]))
    assert seen[ids[1]].state is JobState.SUCCEEDED
    [(draining, _), (other, _)] = first.pilots
    subprocess.run(["scancel", other], check=True, timeout=30)
    wait_until(lambda: other not in squeue_ids(""), 60, f"pilot {other} to end")

    # The controller is gone without a shutdown; a new one takes over the run.
    second = SlurmAllocationBackend(options=SlurmOptions(python=sys.executable),
                                    allocation_time=300.0, allocation_cpus=2)
    try:
        second.reattach({ids[0]: specs[0]})
        specs.append(spec(tmp_path, 2, "print(2)", time_limit=60.0))
        ids += second.submit(specs[2:])
        seen.update(poll_until(second, ids[2:]))
        go.touch()
        seen.update(poll_until(second, ids[:1]))

        # The running attempt ended in the pilot that drains; the new one went to a new pilot.
        assert seen[ids[2]].state is seen[ids[0]].state is JobState.SUCCEEDED
        assert (seen[ids[0]].usage or {})["allocation_job"] == float(draining)
        pilots = dict(second.pilots)
        assert len(pilots) == 3, pilots
        [third] = set(pilots) - {draining, other}
        assert (pilots[other], pilots[third]) == ("CANCELLED", None)
        assert (seen[ids[2]].usage or {})["allocation_job"] == float(third)
        assert second.commands["sbatch"] == 1
        # The draining pilot is cancelled as soon as the attempt it kept ended.
        assert second.commands["scancel"] == 1
        wait_until(lambda: draining not in squeue_ids(""), 60, f"pilot {draining} to end")
    finally:
        second.shutdown()
        subprocess.run(["scancel", *(job for job, _ in second.pilots if job)], check=False,
                       timeout=30)


TRIAL = """\
import time
import dse.trial

x = dse.trial.params()["x"]
time.sleep(2)
dse.trial.report({"value": x * x + 1})
"""
CAMPAIGN = """\
[campaign]
name = "{name}"
agent = "list"
backend = "slurm"
mode = "rolling"
max_parallelism = 30
poll_interval = ["0.5s", "1s"]

[agent.list]
points = [{points}]

[environment]
command = ["python", "{trial}"]
time_limit = "2m"

[backend.slurm]
python = "{python}"
{backend}

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 100 }}
"""


def start_campaign(project: Path, name: str, backend: str) -> tuple[subprocess.Popen[str], float]:
    """Start a campaign of 30 trials in *project*; return the controller and its start time."""
    trial = project / "trial.py"
    trial.write_text(TRIAL)
    points = ", ".join(f"{{x = {x}}}" for x in range(30))
    campaign = project / f"{name}.toml"
    campaign.write_text(CAMPAIGN.format(name=name, points=points, trial=trial,
                                        python=sys.executable, backend=backend))
    return start_dse(project, "run", str(campaign), "--json"), time.monotonic()


def finish_campaign(project: Path, name: str, dse: subprocess.Popen[str], started: float
                    ) -> tuple[dict[int, float], list[float], float, list[str]]:
    """Wait for the campaign; return (metric by x, submit→start per trial, wall time, job ids)."""
    try:
        out, err = dse.communicate(timeout=300)
    finally:
        if dse.poll() is None:
            dse.kill()
            dse.communicate()
    wall = time.monotonic() - started
    assert dse.returncode == 0, err
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    rows = db.execute(
        "SELECT t.params, t.metrics, t.status, a.submitted_at, a.started_at, a.job_id"
        " FROM trials t JOIN attempts a ON a.trial_id = t.id JOIN campaigns c"
        " ON t.campaign_id = c.id WHERE c.name = ?", (name,),
    ).fetchall()
    db.close()
    assert len(rows) == 30, (out, err)
    assert {status for _, _, status, _, _, _ in rows} == {"completed"}
    metrics = {json.loads(p)["x"]: json.loads(m)["value"] for p, m, _, _, _, _ in rows}
    waits = [start - submitted for _, _, _, submitted, start, _ in rows]
    return metrics, waits, wall, [job for *_, job in rows]


@pytest.mark.xdist_group("slurm")
@pytest.mark.slow
def test_thirty_short_trials_give_the_same_results_as_jobs_and_in_one_allocation(
    slurm_cluster, tmp_path, capsys
):
    # Two workspaces: in one, a campaign would reuse the other's results. The two run at the
    # same time, sharing the cluster as two users' campaigns do.
    (tmp_path / "jobs").mkdir()
    (tmp_path / "alloc").mkdir()
    project = write_plugin(tmp_path / "alloc")
    started = {
        "alloc": start_campaign(project, "alloc", 'mode = "allocation"\nallocation_cpus = 2\n'
                                                  'allocation_time = "10m"'),
        "jobs": start_campaign(write_plugin(tmp_path / "jobs"), "jobs", 'mode = "jobs"'),
    }
    try:
        alloc = finish_campaign(project, "alloc", *started["alloc"])
        jobs = finish_campaign(tmp_path / "jobs", "jobs", *started["jobs"])
    finally:
        for dse, _ in started.values():
            if dse.poll() is None:
                dse.kill()
                dse.communicate()

    assert jobs[0] == alloc[0] == {x: x * x + 1 for x in range(30)}
    assert all(job.startswith("alloc.") for job in alloc[3])
    pilots = {p.name for p in (project / ".dse").rglob("dse.*.pilot.*") if p.is_dir()}
    assert len(pilots) == 1, pilots
    [pilot_dir] = [p for p in (project / ".dse").rglob("dse.*.pilot.*") if p.is_dir()]
    pilot_id = (pilot_dir / "pilot.id").read_text().strip()
    # Slurm's accounting has the pilot under its name (slurmdbd records it asynchronously: a
    # loaded machine's sacct may not list it yet).
    shown = wait_until(
        lambda: subprocess.run(["sacct", "-X", "--noheader", "--parsable2", "--format=JobName",
                                f"--jobs={pilot_id}"], capture_output=True, text=True,
                               timeout=30, check=True).stdout.split(),
        60, f"sacct to record pilot {pilot_id}")
    assert shown == [pilot_dir.name]
    # Every attempt recorded its start (sacct's is whole seconds, so it may precede the
    # fractional submission time by under a second).
    assert all(w > -1.0 for w in jobs[1] + alloc[1])
    with capsys.disabled():
        for label, (_, waits, wall, _) in (("jobs", jobs), ("allocation", alloc)):
            print(f"\n{label:>10}: submit->start mean {statistics.mean(waits):.2f}s"
                  f" max {max(waits):.2f}s; wall {wall:.1f}s")


@pytest.mark.xdist_group("slurm")
def test_a_waiting_attempt_starts_ahead_but_runs_and_is_timed_only_once_let_go(
    slurm_cluster, tmp_path
):
    backend = SlurmAllocationBackend(options=SlurmOptions(python=sys.executable),
                                     allocation_time=300.0, allocation_cpus=2)
    # Two CPUs on one node: 0 and 1 run 8 s first; 2's step starts ahead and is cancelled
    # while it waits, so 3's starts ahead in its place. 3 runs 2 s under a 5 s limit: a limit
    # counted from its srun's start, more than 3 s before 0 or 1 ends, would end it. (Seconds
    # to spare each way: a loaded machine starts steps and interpreters late.)
    specs = [spec(tmp_path, i, "import time; time.sleep(8)", time_limit=60.0) for i in (0, 1)]
    specs += [spec(tmp_path, 2, "import time; time.sleep(2)", time_limit=60.0),
              spec(tmp_path, 3, "import time; time.sleep(2)", time_limit=5.0)]
    try:
        ids = backend.submit(specs)
        seen = poll_until(backend, ids, until=lambda s: ids[0] in s)
        backend.cancel([ids[2]])
        seen.update(poll_until(backend, ids))
    finally:
        backend.shutdown()
    assert [seen[i].state for i in ids] == [JobState.SUCCEEDED] * 2 + [
        JobState.CANCELLED, JobState.SUCCEEDED]
    [pilot_dir] = [p.parent for p in tmp_path.rglob("pilot.json")]
    assert not (pilot_dir / f"{specs[2].trial_id}.1.claim").exists()
    doc = json.loads((pilot_dir / f"{specs[3].trial_id}.1.claim").read_text())
    first_end = min(seen[i].ended_at or 0.0 for i in ids[:2])
    assert doc["launched_at"] < first_end - 3.0  # its srun started while both CPUs were busy
    assert doc["started_at"] >= first_end - 0.2  # its workload only once one freed
    assert (seen[ids[3]].started_at or 0.0) >= first_end - 0.2
    assert not (specs[2].trial_dir / "attempt-1").exists()  # its workload never ran
    assert len(list(pilot_dir.glob("*.run"))) == 3


@pytest.mark.xdist_group("slurm")
class TestSlurmAllocationContract(BackendContract):
    """Allocation mode passes the contract every backend passes (its steps are the jobs)."""

    @pytest.fixture
    def backend_factory(self, slurm_cluster: str) -> Callable[[], Backend]:
        return lambda: SlurmAllocationBackend(
            options=SlurmOptions(python=sys.executable, partition="batch"),
            allocation_time=600.0, allocation_cpus=2)

