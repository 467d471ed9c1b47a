"""Trial directories belong to one record (issue 36): after the record is lost (deleted, left
as an empty file) or replaced by an older backup, the next run never scores a result, nor hands
out a checkpoint, that an earlier record's trial left in a directory of the same name; and an
attempt is never scored with the result an earlier attempt of its trial left. Real `dse run`
processes on the local backend, real SQLite files."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from typing import TYPE_CHECKING

import pytest

from support.cli import run_dse, run_exit, write_plugin
from support.record import RecordFile

if TYPE_CHECKING:
    from pathlib import Path

# Says what it found in its checkpoint directory, then acts as its `mode` says: `writes` saves
# a checkpoint and a complete result; `silent` exits 0 and writes no result; `dies` writes a
# complete result at its first attempt and is then killed (an interruption: retried), and
# writes nothing at the next.
WORKLOAD = r"""
import json, os, signal, sys
mode, x = sys.argv[1], int(sys.argv[2])
trial_dir, checkpoint = os.environ["DSE_TRIAL_DIR"], os.environ["DSE_CHECKPOINT_DIR"]
attempt = os.environ["DSE_ATTEMPT"]
seen = sorted(os.listdir(checkpoint)) if os.path.isdir(checkpoint) else None
with open(os.path.join(trial_dir, "seen-%s.json" % attempt), "w") as handle:
    json.dump({"checkpoint": seen, "x": x}, handle)
if mode == "writes" or (mode == "dies" and attempt == "1"):
    os.makedirs(checkpoint, exist_ok=True)
    with open(os.path.join(checkpoint, "state"), "w") as handle:
        handle.write(str(x))
    with open(os.path.join(trial_dir, "result.json"), "w") as handle:
        json.dump({"complete": True, "metrics": {"value": x}}, handle)
if mode == "dies" and attempt == "1":
    os.kill(os.getpid(), signal.SIGKILL)
"""

CAMPAIGN = """
[campaign]
name = "stale"
agent = "list"
backend = "local"
poll_interval = ["0.05s", "0.2s"]

[agent.list]
points = [{{mode = "{mode}", x = {x}}}]

[environment]
command = [{python}, "-S", {workload}, "{{mode}}", "{{x}}"]
time_limit = "60s"

[backend.local]
grace = "1s"

[[objectives]]
metric = "value"
direction = "maximize"

[space]
mode = ["writes", "silent", "dies"]
x = [1, 3, 5, 7]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with the workload and the list agent; campaign.toml written by :func:`run`."""
    write_plugin(tmp_path)
    (tmp_path / "workload.py").write_text(WORKLOAD)
    return tmp_path


def run(project: Path, mode: str, x: int) -> str:
    """`dse run` of the campaign proposing one point; its stderr (the console)."""
    (project / "campaign.toml").write_text(CAMPAIGN.format(
        mode=mode, x=x, python=json.dumps(sys.executable),
        workload=json.dumps(str(project / "workload.py"))))
    proc = run_dse(project, "run", "campaign.toml", timeout=120)
    # 4 (NO_RESULT): no trial of the run completed (here: none was handed a stale result).
    assert proc.returncode == run_exit(project), proc.stderr
    return proc.stderr


def record(project: Path) -> RecordFile:
    return RecordFile(project / ".dse" / "dse.sqlite")


def last_trial(project: Path) -> sqlite3.Row:
    """Trial 1 of the record's latest run (each run here has one trial)."""
    rows = record(project).rows(
        "SELECT * FROM trials WHERE campaign_id = (SELECT MAX(id) FROM campaigns)")
    assert [row["number"] for row in rows] == [1]
    return rows[0]


def seen(trial_dir: Path, attempt: int = 1) -> dict[str, object]:
    """What the workload found when attempt *attempt* started in *trial_dir*."""
    return json.loads((trial_dir / f"seen-{attempt}.json").read_text())


def assert_nothing_stale_scored(project: Path, stderr: str, run_id: int, earlier: int) -> None:
    """The run's silent trial failed ``no_result`` in a fresh directory with an empty
    checkpoint; the earlier record's run directory was moved aside whole (said once), its
    trial's result (value *earlier*) and checkpoint kept."""
    trial = last_trial(project)
    assert (trial["status"], trial["failure"], trial["score"]) == ("failed", "no_result", None)
    trial_dir = project / ".dse" / "stale" / f"run-{run_id}" / "000001"
    assert trial["trial_dir"] == str(trial_dir)
    assert seen(trial_dir) == {"checkpoint": [], "x": 1}
    assert not (trial_dir / "result.json").exists()
    moved = sorted((project / ".dse" / "stale").glob(f"run-{run_id}.moved-*"))
    assert len(moved) == 1, moved
    old = moved[0] / "000001"
    assert json.loads((old / "result.json").read_text())["metrics"] == {"value": earlier}
    assert (old / "checkpoint" / "state").read_text() == str(earlier)
    assert stderr.count("moved aside") == 1, stderr
    assert moved[0].name in stderr
    events = record(project).rows("SELECT data FROM events WHERE kind = 'moved_aside'")
    assert [json.loads(e["data"])["to"] for e in events] == [str(moved[0])]


@pytest.mark.parametrize("lost", ["deleted", "emptied"])
def test_a_lost_record_s_next_run_scores_nothing_an_earlier_trial_left(
    project: Path, lost: str
) -> None:
    run(project, "writes", 7)
    db = project / ".dse" / "dse.sqlite"
    assert last_trial(project)["score"] == 7
    if lost == "deleted":
        db.unlink()
    else:
        db.write_bytes(b"")

    stderr = run(project, "silent", 1)

    assert_nothing_stale_scored(project, stderr, run_id=1, earlier=7)


def test_a_record_restored_from_a_backup_scores_nothing_a_later_run_left(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run(project, "writes", 7)
    db = project / ".dse" / "dse.sqlite"
    assert not db.with_name("dse.sqlite-wal").exists()  # a clean end: the file is the record
    backup = tmp_path_factory.mktemp("backup") / "dse.sqlite"
    shutil.copy2(db, backup)
    run(project, "writes", 5)  # run 2, whose directory the backup knows nothing of
    assert last_trial(project)["score"] == 5
    shutil.copy2(backup, db)

    stderr = run(project, "silent", 1)  # run 2 again, as far as the restored record knows

    assert [row["id"] for row in record(project).campaigns()] == [1, 2]
    assert_nothing_stale_scored(project, stderr, run_id=2, earlier=5)
    # Run 1's directory, which the restored record did make, is left as it was.
    assert seen(project / ".dse" / "stale" / "run-1" / "000001") == {"checkpoint": [], "x": 7}


def test_a_retried_attempt_is_never_scored_with_the_result_its_predecessor_left(
    project: Path,
) -> None:
    run(project, "dies", 3)

    trial = last_trial(project)
    attempts = record(project).rows("SELECT attempt, state FROM attempts ORDER BY attempt")
    assert [(a["attempt"], a["state"]) for a in attempts] == [(1, "killed"), (2, "succeeded")]
    assert (trial["status"], trial["failure"], trial["score"]) == ("failed", "no_result", None)
    trial_dir = project / ".dse" / "stale" / "run-1" / "000001"
    # The checkpoint is the trial's own: handed on to its next attempt, as it should be.
    assert seen(trial_dir, 2) == {"checkpoint": ["state"], "x": 3}
    # Attempt 1's result was set aside (kept), never read as attempt 2's.
    assert not (trial_dir / "result.json").exists()
    (kept,) = trial_dir.glob("result.json.moved-*")
    assert json.loads(kept.read_text())["metrics"] == {"value": 3}
    events = record(project).rows("SELECT data FROM events WHERE kind = 'moved_aside'")
    assert [json.loads(e["data"]) for e in events] == [
        {"path": str(trial_dir / "result.json"), "to": str(kept), "attempt": 2,
         "why": "left by an earlier attempt of the trial"}]
