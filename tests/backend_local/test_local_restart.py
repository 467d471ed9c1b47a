"""A controller killed with SIGKILL leaves its trials running; a new one learns how they ended."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dse import JobSpec, JobState
from dse.testing.contracts import wait_for
from dse_local import LocalBackend
from support.procs import alive
from support.waiting import wait_until

CONTROLLER = r"""
import json, sys, time
from pathlib import Path
from dse import JobSpec
from dse_local import LocalBackend

backend = LocalBackend(cpus=8, gpus=0, grace=0.5)
specs = [
    JobSpec(trial_id=j["trial_id"], attempt=1, params={}, trial_dir=Path(j["trial_dir"]),
            argv=(j["command"],), env={"DSE_TRIAL_DIR": j["trial_dir"]}, shell=True)
    for j in json.loads(sys.argv[1])
]
print(json.dumps(backend.submit(specs)), flush=True)
time.sleep(120)
"""

HOLD = ('sleep 1.5; i=0; while [ ! -e "$DSE_TRIAL_DIR/go" ] && [ $i -lt 1200 ]; do'
        ' sleep 0.05; i=$((i + 1)); done; ')
"""Run 1.5 s, then until the test makes the file ``go`` (a minute at most): the trial still
runs when the test looks at it, however late a loaded machine lets the test look."""
COMMANDS = {
    "ok": HOLD + "exit 0",
    "fails": HOLD + "exit 3",
    "scores": HOLD + "echo '{\"complete\": true, \"metrics\": {\"v\": 1}}'"
                     ' > "$DSE_TRIAL_DIR/result.json"',
    "early": "exit 5",
}


def _spec(root: Path, name: str) -> JobSpec:
    trial_dir = root / name
    trial_dir.mkdir(exist_ok=True)
    return JobSpec(trial_id=f"ctl-{name}", attempt=1, params={}, trial_dir=trial_dir,
                   argv=(COMMANDS[name],), env={"DSE_TRIAL_DIR": str(trial_dir)}, shell=True)



@pytest.fixture
def specs(tmp_path: Path) -> dict[str, JobSpec]:
    """Name → the job spec the controller submits (its trial dir created)."""
    return {name: _spec(tmp_path, name) for name in COMMANDS}


@pytest.fixture
def orphaned_job_ids(specs: dict[str, JobSpec]) -> dict[str, str]:
    """Job ids (by name) of *specs*, submitted by a controller since killed with SIGKILL."""
    payload = json.dumps([
        {"trial_id": s.trial_id, "trial_dir": str(s.trial_dir), "command": s.argv[0]}
        for s in specs.values()
    ])
    controller = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, payload], stdout=subprocess.PIPE
    )
    try:
        ready, _, _ = select.select([controller.stdout], [], [], 30)
        assert ready, "the controller printed no job ids"
        ids = json.loads(controller.stdout.readline())
        # Let the quick job end (its exit file written) before the controller dies.
        early = specs["early"].trial_dir / "attempt-1" / "exit.json"
        wait_until(early.exists, 60, "the quick job's exit file")
    finally:
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait()
        controller.stdout.close()
    return dict(zip(specs, ids, strict=True))


def test_a_restarted_controller_learns_how_orphaned_trials_ended(specs, orphaned_job_ids):
    wrappers = {
        name: int((spec.trial_dir / "attempt-1" / "wrapper.pid").read_text().split()[0])
        for name, spec in specs.items()
    }
    # The trials outlived their controller: they run in sessions of their own.
    assert all(alive(wrappers[name]) for name in ("ok", "fails", "scores"))
    assert not (specs["ok"].trial_dir / "attempt-1" / "exit.json").exists()
    # ...while the quick one's wrapper ended before the restart: only its exit file remains.
    wait_until(lambda: not alive(wrappers["early"]), 60, "the quick job's wrapper to end")

    with LocalBackend(cpus=8, gpus=0, grace=0.5) as backend:
        backend.reattach({orphaned_job_ids[name]: spec for name, spec in specs.items()})
        for name in ("ok", "fails", "scores"):  # they end while the new controller watches
            (specs[name].trial_dir / "go").touch()
        final = wait_for(backend, list(orphaned_job_ids.values()), timeout=60)
    by_name = {name: final[job_id] for name, job_id in orphaned_job_ids.items()}

    assert (by_name["ok"].state, by_name["ok"].exit_code) == (JobState.SUCCEEDED, 0)
    assert (by_name["fails"].state, by_name["fails"].exit_code) == (JobState.FAILED, 3)
    assert by_name["scores"].state is JobState.SUCCEEDED
    assert json.loads((specs["scores"].trial_dir / "result.json").read_text())["complete"]
    assert (by_name["early"].state, by_name["early"].exit_code) == (JobState.FAILED, 5)
    for name, status in by_name.items():
        exit_doc = json.loads((specs[name].trial_dir / "attempt-1" / "exit.json").read_text())
        assert (status.started_at, status.ended_at) == (
            exit_doc["started_at"], exit_doc["ended_at"]
        )
    assert by_name["ok"].ended_at - by_name["ok"].started_at >= 1.5


def test_an_attempt_that_never_started_is_lost_without_blame_and_a_dead_wrapper_with_blame(
    tmp_path: Path,
) -> None:
    """A controller killed while launching an attempt leaves no wrapper pid file: the
    workload never ran, so the loss is not ambiguous (two such losses must not confirm a
    failure of the configuration). A wrapper that ran and died without an exit file is."""
    never = _spec(tmp_path, "ok")
    died = JobSpec(trial_id="ctl-died", attempt=1, params={}, trial_dir=tmp_path / "died",
                   argv=("true",), shell=True)
    adir = died.trial_dir / "attempt-1"
    adir.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    (adir / "wrapper.pid").write_text(f"{gone.pid} 1\n")
    with LocalBackend(cpus=2, gpus=0, grace=0.5) as backend:
        backend.reattach({"job-never": never, "job-died": died})
        final = wait_for(backend, ["job-never", "job-died"], timeout=30)
    assert final["job-never"].state is JobState.LOST
    assert not final["job-never"].ambiguous
    assert "never started" in (final["job-never"].reason or "")
    assert final["job-died"].state is JobState.LOST
    assert final["job-died"].ambiguous
    assert "without writing exit.json" in (final["job-died"].reason or "")
