"""A run's directories belong to the record that made them (issue 36): what an earlier record
left where a new run, a new trial or a later attempt is about to write is moved aside — kept,
never read, never handed out. ``TrialDirs`` alone on real directories, then a run resumed on a
record restored from a backup (the probe writing real result files; a real SQLite record)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import dse
from dse.engine._live import LiveTrial
from dse.engine._trialdirs import TrialDirs
from dse.testing import FakeClock, ProbeBackend, ProbeCluster, ProbeScript, ScriptedAgent
from support.record import RecordFile


class Told:
    """What a ``TrialDirs`` recorded (its events) and said (its alerts)."""

    def __init__(self) -> None:
        self.events: list[tuple[int | None, str, dict[str, Any]]] = []
        self.alerts: list[str] = []

    def dirs(self) -> TrialDirs:
        return TrialDirs(lambda row, kind, data: self.events.append((row, kind, dict(data))),
                         self.alerts.append)


def test_a_new_run_s_directory_found_holding_anything_is_moved_aside_whole(
    tmp_path: Path,
) -> None:
    told = Told()
    run_dir = tmp_path / "c" / "run-1"
    assert told.dirs().open(run_dir, True, new=True) is None  # made
    assert told.dirs().open(run_dir, True, new=True) is None  # empty: nothing to keep
    assert (told.events, told.alerts) == ([], [])
    (run_dir / "000001").mkdir()
    (run_dir / "000001" / "result.json").write_text("{}")

    moved = told.dirs().open(run_dir, True, new=True)

    assert moved is not None
    assert moved.parent == run_dir.parent
    assert moved.name.startswith("run-1.moved-")
    assert (moved / "000001" / "result.json").read_text() == "{}"
    assert list(run_dir.iterdir()) == []
    assert told.events == [(None, "moved_aside", {
        "path": str(run_dir), "to": str(moved),
        "why": "a new run's directory, made by an earlier record"})]
    assert len(told.alerts) == 1
    assert told.alerts[0].startswith(f"{run_dir} was there before this run: ")
    assert f"moved aside to {moved.name} " in told.alerts[0]
    # A second one the same second gets a name of its own: nothing is overwritten.
    (run_dir / "x").write_text("")
    again = told.dirs().open(run_dir, True, new=True)
    assert again is not None
    assert again != moved
    assert sorted(p.name for p in run_dir.parent.iterdir()) == sorted(
        ["run-1", moved.name, again.name])


def test_a_resumed_run_keeps_its_directory(tmp_path: Path) -> None:
    told = Told()
    run_dir = tmp_path / "run-3"
    (run_dir / "000001").mkdir(parents=True)

    assert told.dirs().open(run_dir, True, new=False) is None

    assert [p.name for p in run_dir.iterdir()] == ["000001"]
    assert (told.events, told.alerts) == ([], [])


def test_a_trial_directory_is_reused_only_when_nothing_but_its_params_were_written(
    tmp_path: Path,
) -> None:
    told = Told()
    dirs = told.dirs()
    dirs.open(tmp_path / "run-1", True, new=True)
    # Left by a controller that died before committing trial 1: only its params file.
    dirs.path(1).mkdir()
    (dirs.path(1) / "params.json").write_text('{"x": 1}')
    # Written by attempts of a trial 2 this record does not know (an older copy restored).
    (dirs.path(2) / "checkpoint").mkdir(parents=True)
    (dirs.path(2) / "result.json").write_text("{}")
    # Not a directory at all.
    (tmp_path / "elsewhere").mkdir()
    dirs.path(3).symlink_to(tmp_path / "elsewhere")
    try:
        assert dirs.make(1, 11) is None
        moved = dirs.make(2, 12)
        link = dirs.make(3, 13)
        assert dirs.make(4, 14) is None
    finally:
        dirs.close()

    assert (dirs.path(1) / "params.json").read_text() == '{"x": 1}'
    assert moved is not None
    assert moved.name.startswith("000002.moved-")
    assert sorted(p.name for p in moved.iterdir()) == ["checkpoint", "result.json"]
    assert list(dirs.path(2).iterdir()) == []
    assert link is not None
    assert link.is_symlink()
    assert dirs.path(3).is_dir()
    assert not dirs.path(3).is_symlink()
    assert dirs.path(4).is_dir()
    assert [(row, data["trial"], data["to"]) for row, _, data in told.events] == [
        (12, 2, str(moved)), (13, 3, str(link))]
    assert len(told.alerts) == 1  # said once
    assert told.alerts[0].startswith(f"trial 2's directory {dirs.path(2)} held files of an")


def test_a_later_attempt_s_result_file_left_by_an_earlier_attempt_is_set_aside(
    tmp_path: Path,
) -> None:
    told = Told()
    dirs = told.dirs()
    dirs.open(tmp_path / "run-1", True, new=True)
    trials = []
    for number, attempt in ((1, 1), (2, 2), (3, 2)):
        dirs.make(number)
        trial = LiveTrial(number, number, number, 1, {}, f"h{number}", attempt=attempt,
                          trial_dir=dirs.path(number))
        trials.append(trial)
    dirs.close()
    for number in (1, 2):
        (dirs.path(number) / "result.json").write_text(f"{number}")

    assert dirs.submitting(trials) is trials

    # Trial 1's first attempt is not looked at (its directory is new); trial 3 has none.
    assert (dirs.path(1) / "result.json").read_text() == "1"
    assert not (dirs.path(2) / "result.json").exists()
    ((row, kind, data),) = told.events
    kept = Path(data["to"])
    assert (row, kind, kept.parent, kept.read_text()) == (2, "moved_aside", dirs.path(2), "2")
    assert kept.name.startswith("result.json.moved-")
    assert data == {"path": str(dirs.path(2) / "result.json"), "to": str(kept), "attempt": 2,
                    "why": "left by an earlier attempt of the trial"}
    assert told.alerts == []


def test_a_symlink_where_a_campaign_or_run_directory_goes_is_never_followed(
    tmp_path: Path,
) -> None:
    """A trial can put a symlink where a campaign not yet run, or its own run (resumed
    later), keeps its directory: nothing is ever made through it."""
    told = Told()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "next").symlink_to(elsewhere)
    (workspace / "c").mkdir()
    (workspace / "c" / "run-2").symlink_to(elsewhere)

    assert told.dirs().open(workspace / "next" / "run-1", True, new=True) is None
    assert told.dirs().open(workspace / "c" / "run-2", True, new=False) is None
    dirs = told.dirs()
    dirs.open(workspace / "c" / "run-3", True, new=True)
    (workspace / "c" / "run-3").rename(workspace / "c" / "run-3.away")
    (workspace / "c" / "run-3").symlink_to(elsewhere)  # replaced once opened
    try:
        dirs.make(1)
    finally:
        dirs.close()

    assert list(elsewhere.iterdir()) == []
    for made in ("next/run-1", "c/run-2", "c/run-3.away/000001"):
        assert (workspace / made).is_dir()
        assert not (workspace / made).is_symlink()
    kept = sorted(p.name.split(".")[0] for p in workspace.rglob("*.moved-*") if p.is_symlink())
    assert kept == ["next", "run-2"]
    assert [data["why"] for _, _, data in told.events] == [
        f"a symlink (to {str(elsewhere)!r}) where dse's directory goes"] * 2
    assert len(told.alerts) == 2
    assert all("never followed" in a for a in told.alerts)


def _spec(trial_dir: Path, attempt: int) -> dse.JobSpec:
    return dse.JobSpec("c-1-1", attempt, {"x": 1}, trial_dir,
                       env={"DSE_PARAMS_FILE": str(trial_dir / "params.json")})


def test_an_attempt_starts_in_a_directory_holding_only_what_dse_wrote(tmp_path: Path) -> None:
    trial_dir = tmp_path / "run-1" / "000001"
    (trial_dir / "checkpoint").mkdir(parents=True)
    (trial_dir / "checkpoint" / "state").write_text("planted")
    (trial_dir / "result.json").write_text("{}")
    (trial_dir / "params.json").write_text('{"x": 99}')

    moved = dse.start_attempt_dir(_spec(trial_dir, 1))

    assert sorted(m.split(" ")[0] for m in moved) == ["checkpoint", "params.json",
                                                      "result.json"]
    assert sorted(p.name for p in trial_dir.iterdir() if ".moved-" not in p.name) == [
        "attempt-1", "checkpoint", "params.json"]
    assert json.loads((trial_dir / "params.json").read_text()) == {"x": 1}
    assert list((trial_dir / "checkpoint").iterdir()) == []
    # A later attempt keeps the trial's own checkpoint; an earlier result, a planted attempt
    # directory are moved aside.
    (trial_dir / "checkpoint" / "state").write_text("own")
    (trial_dir / "result.json").write_text("{}")
    (trial_dir / "attempt-2").mkdir()
    moved = dse.start_attempt_dir(_spec(trial_dir, 2))
    assert sorted(m.split(" ")[0] for m in moved) == ["attempt-2", "result.json"]
    assert (trial_dir / "checkpoint" / "state").read_text() == "own"
    assert list((trial_dir / "attempt-2").iterdir()) == []
    # A symlink in the trial directory's place is moved aside: a fresh first attempt.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    trial_dir.rename(tmp_path / "away")
    trial_dir.symlink_to(elsewhere)
    moved = dse.start_attempt_dir(_spec(trial_dir, 3))
    assert moved[0].startswith(f"000001 (a symlink (to {str(elsewhere)!r}), never followed)")
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in trial_dir.iterdir()) == ["attempt-3", "checkpoint",
                                                            "params.json"]


class StopAfterFirst(dse.EngineListener):
    """Stops the run once its first trial ended: a run to resume."""

    def on_trial_ended(self, engine: dse.Engine, end: Any) -> None:
        engine.request_stop()


def test_a_run_resumed_on_a_restored_backup_scores_nothing_the_lost_continuation_left(
    tmp_path: Path,
) -> None:
    c = dse.campaign_from_dict({
        "campaign": {"name": "b", "max_parallelism": 2, "mode": "rolling"},
        "space": {"x": {"type": "int", "low": 1, "high": 9}},
        "objectives": [{"metric": "value"}],
    }, workspace=tmp_path / "ws")
    db = c.workspace / "dse.sqlite"
    points = [{"x": x} for x in (1, 2, 3, 4)]
    cluster, clock = ProbeCluster(), FakeClock()
    scores = {"on": True}

    def script(params: dict[str, Any]) -> ProbeScript:
        # Trial x runs x passes and, while "on", writes its result; off, it writes none.
        return ProbeScript(passes=params["x"],
                           metrics={"value": float(params["x"])} if scores["on"] else None)

    def run(listener: dse.EngineListener | None = None, resume: int | None = None
            ) -> dse.CampaignResult:
        store = dse.Store(db)
        try:
            backend = ProbeBackend(script, clock=clock, cluster=cluster, write_results=True)
            engine = dse.Engine(c, agent=ScriptedAgent(points), backend=backend, store=store,
                                clock=clock, listener=listener)
            return engine.run(resume=resume)
        finally:
            store.close()

    first = run(StopAfterFirst())
    assert first.status == "cancelled"
    backup = tmp_path / "backup.sqlite"
    with sqlite3.connect(db) as source, sqlite3.connect(backup) as copy:
        source.backup(copy)
    known = {r["number"]: r["status"] for r in RecordFile(backup).trials(first.campaign_id)}
    assert known == {1: "completed", 2: "cancelled"}
    # The continuation the backup knows nothing of: every trial completes, in its directory.
    assert run(resume=first.campaign_id).status == "completed"
    assert [r["score"] for r in RecordFile(db).trials(first.campaign_id)] == [1, 2, 3, 4]
    with sqlite3.connect(backup) as source, sqlite3.connect(db) as record:
        source.backup(record)
    scores["on"] = False

    alerts: list[str] = []

    class Alerts(dse.EngineListener):
        def on_alert(self, engine: dse.Engine, message: str) -> None:
            alerts.append(message)

    third = run(Alerts(), resume=first.campaign_id)

    assert third.status == "completed"
    trials = RecordFile(db).trials(first.campaign_id)
    # The trial the backup had cancelled ran again, and the trials it never had ran: none
    # took the lost continuation's result; each is what it did now (it wrote none).
    assert [(r["number"], r["status"], r["failure"], r["score"]) for r in trials] == [
        (1, "completed", None, 1), (2, "failed", "no_result", None),
        (3, "failed", "no_result", None), (4, "failed", "no_result", None)]
    events = [json.loads(e["data"]) for e in RecordFile(db).rows(
        "SELECT data FROM events WHERE kind = 'moved_aside' AND campaign_id = ?",
        (first.campaign_id,))]
    # Trials 3 and 4's directories were moved aside whole; the result trial 2's second
    # attempt found was set aside.
    assert sorted(e["trial"] for e in events if "trial" in e) == [3, 4]
    assert [(Path(e["path"]).parent.name, e["attempt"]) for e in events if "attempt" in e] == [
        ("000002", 2)]
    for event in events:  # each kept whole: the lost continuation's result is still there
        kept = Path(event["to"])
        kept = kept / "result.json" if kept.is_dir() else kept
        assert json.loads(kept.read_text())["metrics"]
    moved_dirs = [a for a in alerts if "moved aside" in a]
    assert len(moved_dirs) == 1, alerts
