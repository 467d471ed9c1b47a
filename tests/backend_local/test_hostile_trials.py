"""A trial cannot plant files for another trial, nor forge its pid file for the controller
(issue 38). Real `dse run` processes on the local backend, real trials that write where they
can compute dse will look: the directories of the trials after them
(``.dse/<campaign>/run-N/<number:06d>``, made ahead when the backend queues them), symlinks
where those directories go, and their own ``wrapper.pid`` rewritten to name an unrelated
process, which must survive a controller's ``kill -9`` and resume untouched."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from support.cli import run_dse, start_dse, write_plugin
from support.procs import alive, stat_fields
from support.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

# Trial 1 (x = 1) is hostile: once the controller queued the trials after it (their
# directories made ahead), it writes into theirs and into those not made yet. The others
# record what they found (checkpoint, params), resume from a checkpoint if one is there (its
# state is their value) and report their value; x = 3 reports nothing.
PLANTING = r"""
import json, os, sys, time
x = int(sys.argv[1])
trial_dir = os.environ["DSE_TRIAL_DIR"]
run_dir = os.path.dirname(trial_dir)
checkpoint = os.environ["DSE_CHECKPOINT_DIR"]
if x == 1:
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(run_dir, "000004", "params.json")):
        if time.time() > deadline:
            sys.exit("the controller never queued trial 4")
        time.sleep(0.02)
    for k in range(2, 7):
        d = os.path.join(run_dir, "%06d" % k)
        for sub in ("checkpoint", "attempt-1"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        with open(os.path.join(d, "result.json"), "w") as f:
            json.dump({"complete": True, "metrics": {"value": 1000 + k}}, f)
        with open(os.path.join(d, "checkpoint", "state"), "w") as f:
            f.write(str(1000 + k))
        with open(os.path.join(d, "attempt-1", "exit.json"), "w") as f:
            json.dump({"exit_code": 0, "started_at": time.time(), "ended_at": time.time()}, f)
        with open(os.path.join(d, "params.json"), "w") as f:
            json.dump({"x": 1000 + k}, f)
with open(os.environ["DSE_PARAMS_FILE"]) as f:
    params = json.load(f)
seen = sorted(os.listdir(checkpoint))
with open(os.path.join(trial_dir, "seen.json"), "w") as f:
    json.dump({"checkpoint": seen, "params": params}, f)
value = x
if "state" in seen:
    with open(os.path.join(checkpoint, "state")) as f:
        value = int(f.read())
with open(os.path.join(checkpoint, "state"), "w") as f:
    f.write(str(value))
time.sleep(0.2)
if x != 3:
    with open(os.path.join(trial_dir, "result.json"), "w") as f:
        json.dump({"complete": True, "metrics": {"value": value}}, f)
"""

# Trial 1 (x = 1), once trial 3 is queued: trial 3's directory moved away and a symlink to
# TARGET put in its place, a symlink to TARGET where trial 5's will go, and one where trial
# 2's attempt directory goes. Every trial reports its value.
LINKING = r"""
import json, os, sys, time
x = int(sys.argv[1])
trial_dir = os.environ["DSE_TRIAL_DIR"]
run_dir = os.path.dirname(trial_dir)
if x == 1:
    target = os.environ["TARGET"]
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(run_dir, "000003", "params.json")):
        if time.time() > deadline:
            sys.exit("the controller never queued trial 3")
        time.sleep(0.02)
    third = os.path.join(run_dir, "000003")
    os.rename(third, third + ".away")
    os.symlink(target, third)
    os.symlink(target, os.path.join(run_dir, "000005"))
    os.symlink(os.path.join(target, "attempt-1"), os.path.join(run_dir, "000002", "attempt-1"))
time.sleep(0.2)
with open(os.path.join(trial_dir, "result.json"), "w") as f:
    json.dump({"complete": True, "metrics": {"value": x}}, f)
"""

ROLLING = """
[campaign]
name = "hostile"
agent = "grid"
backend = "local"
mode = "rolling"
max_parallelism = 1
poll_interval = ["50ms", "200ms"]

[environment]
command = [{python}, "-S", {workload}, "{{x}}"]
time_limit = "120s"
env = {{ TARGET = {target} }}

[backend.local]
grace = "1s"

[[objectives]]
metric = "value"
direction = "maximize"

[space]
x = [1, 2, 3, 4, 5, 6]
"""


def write_campaign(project: Path, workload: str, target: Path | None = None) -> Path:
    (project / "workload.py").write_text(workload)
    campaign = project / "campaign.toml"
    campaign.write_text(ROLLING.format(
        python=json.dumps(sys.executable), workload=json.dumps(str(project / "workload.py")),
        target=json.dumps(str(target or project))))
    return campaign


def trials(project: Path) -> dict[int, tuple[str, str | None, float | None, str]]:
    """Number → (status, failure, score, trial dir) of every trial of the record."""
    with sqlite3.connect(project / ".dse" / "dse.sqlite") as db:
        rows = db.execute("SELECT number, status, failure, score, trial_dir FROM trials")
        return {n: (s, f, v, d) for n, s, f, v, d in rows}


def tree(root: Path) -> list[str]:
    """Every path below *root*, relative, sorted (symlinks not followed)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_results_checkpoints_and_params_planted_for_later_trials_are_never_theirs(
    tmp_path: Path,
) -> None:
    project = write_plugin(tmp_path)
    campaign = write_campaign(project, PLANTING)

    done = run_dse(project, "run", str(campaign), timeout=180)

    assert done.returncode == 0, done.stderr
    run_dir = project / ".dse" / "hostile" / "run-1"
    ended = trials(project)
    # Each later trial ran for real, with its own params and an empty checkpoint, and got
    # its own result: none was scored with a planted one, nor resumed from a planted state.
    for k in range(2, 7):
        seen = json.loads((run_dir / f"{k:06d}" / "seen.json").read_text())
        assert seen == {"checkpoint": [], "params": {"x": k}}, (k, seen)
    assert {k: ended[k][:3] for k in range(1, 7)} == {
        1: ("completed", None, 1.0), 2: ("completed", None, 2.0),
        3: ("failed", "no_result", None), 4: ("completed", None, 4.0),
        5: ("completed", None, 5.0), 6: ("completed", None, 6.0)}
    # What was planted is kept beside where it was put: moved aside, never deleted.
    for k in range(2, 7):
        planted = [p for p in run_dir.glob(f"{k:06d}*/result.json*")
                   if json.loads(p.read_text())["metrics"]["value"] == 1000 + k]
        assert len(planted) == 1, (k, tree(run_dir))
    assert "moved aside" in done.stderr


@pytest.mark.parametrize("ends", ["after_the_resume", "while_no_controller_runs"])
def test_a_rewritten_wrapper_pid_is_never_believed(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, ends: str,
) -> None:
    project = write_plugin(tmp_path)
    # An unrelated process, leading a session of its own as a wrapper does; it notes every
    # signal it is sent.
    notes = tmp_path_factory.mktemp("stranger") / "signals.log"
    stranger = subprocess.Popen([sys.executable, "-c", STRANGER, str(notes)],
                                start_new_session=True)
    try:
        wait_until(notes.exists, 60, "the stranger to start")
        ticks = int(stat_fields(stranger.pid)[19])  # type: ignore[index]
        (project / "workload.py").write_text(FORGING)
        campaign = project / "campaign.toml"
        campaign.write_text(FORGING_CAMPAIGN.format(
            python=json.dumps(sys.executable),
            workload=json.dumps(str(project / "workload.py")),
            forged=json.dumps(f"{stranger.pid} {ticks}")))
        first = start_dse(project, "run", str(campaign))
        trial_dir = wait_until(
            lambda: next(project.glob(".dse/forged/run-1/000001/forged"), None), 60,
            "the trial to rewrite its wrapper.pid").parent
        wrapper = int((trial_dir / "wrapper").read_text())
        assert (trial_dir / "attempt-1" / "wrapper.pid").read_text().split()[0] == str(
            stranger.pid)
        first.kill()
        first.communicate(timeout=60)

        if ends == "while_no_controller_runs":
            (trial_dir / "go").touch()
            wait_until((trial_dir / "attempt-1" / "exit.json").exists, 60,
                       "the wrapper to write how the attempt ended")
            resumed = run_dse(project, "run", str(campaign), timeout=120)
            out, err, code = resumed.stdout, resumed.stderr, resumed.returncode
        else:
            second = start_dse(project, "run", str(campaign))
            # The resumed controller watches a process of the attempt: the real wrapper.
            watched = wait_until(lambda: pidfds_of(second.pid), 60,
                                 "the resumed controller to watch a process")
            assert watched == {wrapper}, (watched, wrapper, stranger.pid)
            (trial_dir / "go").touch()
            out, err = second.communicate(timeout=120)
            code = second.returncode

        assert code == 0, err
        assert "resuming" in err
        assert f"names pid {stranger.pid}, which is not its wrapper" in err
        assert trials(project)[1][:3] == ("completed", None, 7.0), out
        assert alive(stranger.pid, ticks)
        assert notes.read_text() == ""  # never signalled
    finally:
        stranger.kill()
        stranger.wait()


STRANGER = r"""
import signal, sys
notes = sys.argv[1]
def note(signum, frame):
    with open(notes, "a") as f:
        f.write("%d\n" % signum)
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
    signal.signal(sig, note)
open(notes, "w").close()
while True:
    signal.pause()
"""

# Rewrites its attempt's wrapper.pid to name the stranger (FORGED: its pid and start time),
# then waits for the file `go` before it reports.
FORGING = r"""
import json, os, time
trial_dir = os.environ["DSE_TRIAL_DIR"]
attempt = os.path.join(trial_dir, "attempt-" + os.environ["DSE_ATTEMPT"])
with open(os.path.join(trial_dir, "wrapper"), "w") as f:
    f.write(str(os.getppid()))
with open(os.path.join(attempt, "wrapper.pid.tmp"), "w") as f:
    f.write(os.environ["FORGED"] + "\n")
os.replace(os.path.join(attempt, "wrapper.pid.tmp"), os.path.join(attempt, "wrapper.pid"))
open(os.path.join(trial_dir, "forged"), "w").close()
deadline = time.time() + 120
while not os.path.exists(os.path.join(trial_dir, "go")) and time.time() < deadline:
    time.sleep(0.05)
with open(os.path.join(trial_dir, "result.json"), "w") as f:
    json.dump({"complete": True, "metrics": {"value": 7}}, f)
"""

FORGING_CAMPAIGN = """
[campaign]
name = "forged"
agent = "list"
backend = "local"
max_parallelism = 1
poll_interval = ["50ms", "200ms"]

[agent.list]
points = [{{x = 1}}]

[environment]
command = [{python}, "-S", {workload}]
time_limit = "300s"
env = {{ FORGED = {forged} }}

[backend.local]
grace = "1s"

[[objectives]]
metric = "value"

[space]
x = [1]
"""


def pidfds_of(pid: int) -> set[int]:
    """The processes *pid* holds a pidfd of (what the local backend watches)."""
    found = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return found
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as handle:
                info = handle.read()
        except OSError:
            continue
        if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[pidfd]":
            found.update(int(line.split()[1]) for line in info.splitlines()
                         if line.startswith("Pid:"))
    return found


def test_a_symlink_where_a_trial_directory_goes_is_never_followed(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
) -> None:
    project = write_plugin(tmp_path)
    # Outside the workspace, laid out as a trial directory: what dse would write through a
    # symlink to it lands in its attempt and checkpoint directories.
    target = tmp_path_factory.mktemp("elsewhere")
    for sub in ("attempt-1", "checkpoint"):
        (target / sub).mkdir()
    (target / "planted").write_text("")
    before = tree(target)
    campaign = write_campaign(project, LINKING, target)

    done = run_dse(project, "run", str(campaign), timeout=180)

    assert done.returncode == 0, done.stderr
    assert tree(target) == before  # nothing written outside the workspace
    run_dir = project / ".dse" / "hostile" / "run-1"
    ended = trials(project)
    assert {k: ended[k][:3] for k in range(1, 7)} == {
        k: ("completed", None, float(k)) for k in range(1, 7)}
    for k in range(1, 7):
        trial_dir = run_dir / f"{k:06d}"
        assert ended[k][3] == str(trial_dir)
        assert trial_dir.is_dir()
        assert not trial_dir.is_symlink()
        assert not (trial_dir / "attempt-1").is_symlink()
        assert json.loads((trial_dir / "result.json").read_text())["metrics"] == {"value": k}
    # The symlinks were moved aside, kept as they were.
    links = sorted(p.name.split(".")[0] for p in run_dir.rglob("*.moved-*") if p.is_symlink())
    assert links == ["000003", "000005", "attempt-1"], tree(run_dir)
