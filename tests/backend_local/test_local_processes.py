"""How attempts end: cancels, time limits, floods of output, launch errors — real processes.

Whether a process is left behind is checked through /proc: every process a trial's command
starts inherits ``DSE_TRIAL_DIR``, which names this test's own ``tmp_path``; wrappers are
found through their ``wrapper.pid`` files.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

import dse
from dse import JobSpec, JobState, Resources
from dse.testing import FakeClock
from dse.testing.contracts import wait_for
from dse_local import LocalBackend
from support.cli import run_dse, write_plugin
from support.procs import alive, live_pids_mentioning
from support.waiting import wait_until

# Three ways to outlive a plain SIGTERM of the workload: a background child, a grandchild
# in a session of its own, and a child that ignores SIGTERM.
STUBBORN = """\
sleep 300 &
setsid sleep 300 &
( trap '' TERM; exec sleep 300 ) &
touch "$DSE_TRIAL_DIR/started"
wait
"""



@pytest.fixture
def trial_marker(tmp_path: Path) -> bytes:
    """What the environment of every process of this test's trials holds."""
    return f"DSE_TRIAL_DIR={tmp_path}".encode()


def test_a_cancelled_campaign_leaves_no_process_of_any_trial(run_local, trial_marker):
    workloads: list[int] = []
    wrappers: list[int] = []

    class StopWhenAllStarted(dse.EngineListener):
        def on_pass(self, engine: dse.Engine) -> None:
            dirs = [p for p in engine.run_dir.iterdir() if p.is_dir()]
            if len(dirs) == 2 and all((d / "started").exists() for d in dirs) and not wrappers:
                workloads.extend(live_pids_mentioning(trial_marker))
                wrappers.extend(
                    int((d / "attempt-1" / "wrapper.pid").read_text().split()[0]) for d in dirs
                )
                engine.request_stop()

    run = run_local(
        [{"x": 1}, {"x": 2}], listener=StopWhenAllStarted(),
        backend=LocalBackend(cpus=8, gpus=0, grace=0.5),
        space={"x": {"type": "int", "low": 0, "high": 10}},
        environment={"command": STUBBORN, "shell": True},
        max_parallelism=2, poll_interval=[0.05, 0.2],
    )
    assert run.result.status == "cancelled"
    assert [t["status"] for t in run.trials.values()] == ["cancelled", "cancelled"]
    assert [a["state"] for a in run.attempts.values()] == ["cancelled", "cancelled"]
    # Per trial: the shell and the three sleeps that outlive a plain SIGTERM of it.
    assert len(workloads) >= 2 * 4
    wait_until(lambda: not live_pids_mentioning(trial_marker), 30, "no process of a trial left")
    wait_until(lambda: not any(alive(pid) for pid in wrappers), 30, "no wrapper left")


def test_a_trial_that_ends_leaves_no_process_behind(run_local, trial_marker):
    score = """echo '{"complete":true,"metrics":{"value":1}}' > "$DSE_TRIAL_DIR/result.json"\n"""
    leave_and_exit = STUBBORN.replace("wait\n", score)  # exit at once, leaving the sleeps
    run = run_local(
        [{"x": 1}], backend=LocalBackend(cpus=8, gpus=0, grace=0.5),
        space={"x": {"type": "int", "low": 0, "high": 10}},
        environment={"command": leave_and_exit, "shell": True},
    )
    assert run.trials[1]["status"] == "completed"
    assert (run.trial_dir(1) / "started").exists()
    wait_until(lambda: not live_pids_mentioning(trial_marker), 30, "no process of the trial left")


def test_a_trial_over_its_time_limit_is_killed_and_classified(run_local):
    run = run_local(
        [{"x": 1, "ignore_term": False}, {"x": 2, "ignore_term": True}],
        backend=LocalBackend(cpus=8, gpus=0, grace=0.5),
        space={"x": {"type": "int", "low": 0, "high": 10}, "ignore_term": [False, True]},
        environment={"time_limit": 0.5, "command": [
            sys.executable, "-S", "-c",
            "import signal, sys, time\n"
            "if sys.argv[1] == 'true': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "time.sleep(60)\n",
            "{ignore_term}",
        ]},
        max_parallelism=2,
    )
    for number in (1, 2):
        trial = run.trials[number]
        assert (trial["status"], trial["failure"]) == ("budget_exhausted", "time_limit")
        assert run.attempts[number]["state"] == "timeout"
    polite, stubborn = run.attempts[1], run.attempts[2]
    assert polite["signal"] == 15
    assert stubborn["signal"] == 9
    # The stubborn one got its SIGKILL only once the grace period after SIGTERM had passed.
    assert stubborn["ended_at"] - stubborn["started_at"] >= 0.5 + 0.5


FLOOD = r"""
import json, os, sys, time
trial_dir = os.environ["DSE_TRIAL_DIR"]
if sys.argv[1] == "flood":
    chunk = b"x" * (1 << 20)
    for i in range(200):
        sys.stdout.buffer.write(chunk)
        if i == 100:
            # Halfway, wait until the controller has dealt with the other trial's end.
            sys.stdout.buffer.flush()
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(trial_dir, "go")):
                if time.monotonic() > deadline:
                    sys.exit(4)
                time.sleep(0.01)
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(b"caf\xe9 \xff\xfe\x80 not utf-8\n")
    sys.stderr.buffer.flush()
with open(os.path.join(trial_dir, "result.json"), "w") as handle:
    json.dump({"complete": True, "metrics": {"value": 1}}, handle)
"""


def test_a_trial_flooding_its_output_completes_without_blocking_the_controller(
    run_local, tmp_path
):
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)

    class ReleaseTheFlood(dse.EngineListener):
        def on_trial_end(self, engine: dse.Engine, number: int, status: Any) -> None:
            if number == 2:
                (engine.run_dir / f"{1:06d}" / "go").touch()

    run = run_local(
        [{"role": "flood"}, {"role": "quick"}], listener=ReleaseTheFlood(),
        space={"role": ["flood", "quick"]},
        environment={"command": [sys.executable, "-S", str(script), "{role}"]},
        max_parallelism=2,
    )
    assert [t["status"] for t in run.trials.values()] == ["completed", "completed"]
    attempt_dir = run.trial_dir(1) / "attempt-1"
    stdout = attempt_dir / "stdout.log"
    try:
        assert stdout.stat().st_size == 200 * (1 << 20)
    finally:
        stdout.unlink()
    assert (attempt_dir / "stderr.log").read_bytes() == b"caf\xe9 \xff\xfe\x80 not utf-8\n"


def _job(root: Path, name: str, argv: tuple[str, ...], cpus: int = 1) -> JobSpec:
    trial_dir = root / name
    trial_dir.mkdir(parents=True)
    return JobSpec(trial_id=f"t-{name}", attempt=1, params={}, trial_dir=trial_dir, argv=argv,
                   env={"DSE_TRIAL_DIR": str(trial_dir)}, resources=Resources(cpus=cpus))


def test_a_wrapper_that_ignores_a_cancel_is_killed_once_the_backends_clock_says_so(
    tmp_path, trial_marker
):
    # The wrapper is stopped, so it can neither end the workload nor write its exit file; the
    # controller kills the session a grace period (and a margin) after the cancel, measured
    # on the backend's clock: a fake one here, so the test waits for no grace period.
    clock = FakeClock()
    backend = LocalBackend(cpus=2, gpus=0, grace=0.5)
    backend.use_clock(clock)
    try:
        started = tmp_path / "stuck" / "started"
        code = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(300)"
        job = _job(tmp_path, "stuck", (sys.executable, "-S", "-c", code))
        (job_id,) = backend.submit([job])
        (running,) = backend.poll()
        assert (running.state, running.started_at) == (JobState.RUNNING, clock.now)
        # The wrapper is set up (its session, its handlers).
        wait_until(started.exists, 30, "the workload to start")
        wrapper = int((tmp_path / "stuck" / "attempt-1" / "wrapper.pid").read_text().split()[0])
        os.kill(wrapper, signal.SIGSTOP)
        backend.cancel([job_id])
        clock.sleep(0.5 + 5.0)
        assert backend.poll() == []
        assert alive(wrapper)  # not past the grace period and its margin yet
        clock.sleep(0.1)
        status = wait_for(backend, [job_id], timeout=30)[job_id]
    finally:
        backend.shutdown()
    assert status.state is JobState.CANCELLED
    assert status.ended_at == clock.now
    assert "without writing exit.json" in (status.reason or "")
    wait_until(lambda: not live_pids_mentioning(trial_marker), 30, "no process of the trial left")


def test_a_job_asking_for_more_cpus_than_the_machine_has_fails_to_launch_at_once(tmp_path):
    with LocalBackend(cpus=2, gpus=0) as backend:
        (job_id,) = backend.submit([_job(tmp_path, "big", ("true",), cpus=3)])
        (status,) = backend.poll()
    assert status.job_id == job_id
    assert status.state is JobState.INVALID
    assert "3 CPUs" in status.reason
    assert not (tmp_path / "big" / "attempt-1").exists()


def test_a_command_that_does_not_exist_fails_to_launch_with_the_exec_error(tmp_path):
    missing = str(tmp_path / "no-such-command")
    with LocalBackend(cpus=2, gpus=0) as backend:
        (job_id,) = backend.submit([_job(tmp_path, "missing", (missing, "arg"))])
        status = wait_for(backend, [job_id], timeout=20)[job_id]
    assert status.state is JobState.INVALID
    assert "No such file or directory" in status.reason
    assert missing in status.reason


def test_more_cpus_than_the_machine_has_is_one_error_before_anything_runs(run_local):
    # Every trial asks for them: said once (Backend.refuse), not as one invalid_job each.
    with pytest.raises(dse.ConfigError, match=r"environment: asks for 64 CPUs and 0 GPUs"):
        run_local([{"x": 1, "sleep": 0}], environment={"cpus": 64})


@pytest.mark.parametrize(
    ("environment", "reason"),
    [
        pytest.param({"command": ["/nonexistent/dse-no-such-command"]},
                     "No such file or directory", id="missing-command"),
    ],
)
def test_the_campaign_records_a_launch_error_with_its_reason(run_local, environment, reason):
    run = run_local([{"x": 1, "sleep": 0}], environment=environment)
    trial, attempt = run.trials[1], run.attempts[1]
    assert trial["failure"] == "invalid_job"
    assert reason in trial["message"]
    assert trial["status"] == "failed"  # caused by the trial: it would fail again
    assert attempt["state"] == "invalid"
    assert reason in attempt["reason"]


def test_every_one_of_many_commands_that_end_at_once_is_reported(tmp_path):
    # A wrapper may end before the controller looked at it: its end must still be reported.
    jobs = [_job(tmp_path, f"quick{i}", ("true",) if i % 2 else (str(tmp_path / "missing"),))
            for i in range(120)]
    with LocalBackend(cpus=len(jobs), gpus=0) as backend:
        ids = backend.submit(jobs)
        final = wait_for(backend, ids, timeout=20)
    states = [final[job_id].state for job_id in ids]
    assert states == [JobState.SUCCEEDED if i % 2 else JobState.INVALID
                      for i in range(len(jobs))]


def test_a_campaign_without_a_command_is_one_error_before_anything_runs(tmp_path: Path) -> None:
    # Every trial would fail the same way ("the job has no command"): dse says so once.
    write_plugin(tmp_path)
    (tmp_path / "c.toml").write_text(
        '[campaign]\nname = "nocmd"\nagent = "random"\nbackend = "local"\nmax_trials = 3\n\n'
        '[environment]\ncommand = []\n\n[[objectives]]\nmetric = "t"\n\n'
        '[space]\nx = { type = "int", low = 0, high = 5 }\n'
    )
    done = run_dse(tmp_path, "run", "c.toml")
    assert done.returncode == 2
    assert done.stderr == (
        "dse: error: c.toml: environment.command: missing; the local backend runs each"
        " trial's command\n"
    )
    assert not (tmp_path / ".dse" / "nocmd").exists()
