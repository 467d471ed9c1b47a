"""Resuming a run in-process: a new engine, a fresh agent, the same record and probe cluster.

A shared ``ProbeCluster`` plays the part of jobs that outlive their controller.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import dse
from dse.testing import FakeClock, ProbeBackend, ProbeCluster, ProbeScript
from support.record import record


class SeededAgent:
    """A small adaptive agent: its next proposals depend on what it was told."""

    name: ClassVar[str] = "seeded"
    version: ClassVar[str] = "1"

    def __init__(self, seed: int, on_propose: Any = None) -> None:
        self.rng = random.Random(seed)
        self.best: float | None = None
        self.on_propose = on_propose
        self.calls = 0

    @property
    def exhausted(self) -> bool:
        return False

    def propose(self, n: int, in_flight: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self.calls += 1
        if self.on_propose is not None:
            self.on_propose(self.calls)
        shift = 0 if self.best is None else int(self.best) % 5
        return [{"x": (self.rng.randrange(40) + shift) % 40} for _ in range(n)]

    def observe(self, observations: Sequence[dse.Observation]) -> None:
        for obs in observations:
            if obs.score is not None and (self.best is None or obs.score < self.best):
                self.best = obs.score


def script(params: Mapping[str, Any]) -> ProbeScript:
    x = params["x"]
    return ProbeScript(passes=x % 4, metrics={"value": float((x * 7) % 23)})


def campaign(tmp_path: Any, **overrides: Any) -> dse.Campaign:
    table = {"name": "r", "max_parallelism": 3, "mode": "rolling", "max_trials": 18}
    table.update(overrides)
    return dse.campaign_from_dict(
        {"campaign": table, "space": {"x": {"type": "int", "low": 0, "high": 39}},
         "objectives": [{"metric": "value"}]},
        workspace=tmp_path,
    )


def trajectory(store: dse.Store, run: int) -> list[tuple[Any, ...]]:
    return [(r["number"], json.loads(r["params"]), r["status"], r["score"])
            for r in record(store).trials(run)]


class StopAfter(dse.EngineListener):
    def __init__(self, passes: int) -> None:
        self.passes = passes

    def on_pass(self, engine: dse.Engine) -> None:
        if engine.stats.passes >= self.passes:
            engine.request_stop()


def run_engine(c: dse.Campaign, store: dse.Store, cluster: ProbeCluster, clock: FakeClock,
               agent: SeededAgent, listener: Any = None, resume: int | None = None
               ) -> dse.CampaignResult:
    backend = ProbeBackend(script, clock=clock, cluster=cluster)
    engine = dse.Engine(c, agent=agent, backend=backend, store=store, clock=clock,
                        listener=listener)
    return engine.run(resume=resume)


def reference(tmp_path: Any, **overrides: Any) -> list[tuple[Any, ...]]:
    c = campaign(tmp_path / "ref", **overrides)
    store = dse.Store(c.workspace / "dse.sqlite")
    result = run_engine(c, store, ProbeCluster(), FakeClock(), SeededAgent(3))
    return trajectory(store, result.campaign_id)


def test_a_cancelled_run_resumes_to_the_same_trajectory(tmp_path: Any) -> None:
    c = campaign(tmp_path / "run")
    store = dse.Store(c.workspace / "dse.sqlite")
    cluster, clock = ProbeCluster(), FakeClock()
    first = run_engine(c, store, cluster, clock, SeededAgent(3), StopAfter(4))
    assert first.status == "cancelled"
    cancelled = [r for r in record(store).trials(first.campaign_id) if r["status"] == "cancelled"]
    assert cancelled, "the stop must catch trials running"

    second = run_engine(c, store, cluster, clock, SeededAgent(3), resume=first.campaign_id)

    assert second.campaign_id == first.campaign_id
    assert second.status == "completed"
    assert trajectory(store, first.campaign_id) == reference(tmp_path)
    assert record(store).events(first.campaign_id, "agent_replay_diverged") == []
    # The trials cancelled by the stop ran again as second attempts of the same trials.
    for row in cancelled:
        attempts = [a for a in record(store).attempts(first.campaign_id)
                    if a["trial_id"] == row["id"]]
        assert [a["state"] for a in attempts] == ["cancelled", "succeeded"]


def test_a_stop_in_the_middle_of_a_batch_of_proposals_resumes_cleanly(tmp_path: Any) -> None:
    # The stop arrives while the engine takes a batch of proposals: the proposals it did not
    # take get no number, and the resumed run's replay still matches the record.
    c = campaign(tmp_path / "run", mode="waves")
    store = dse.Store(c.workspace / "dse.sqlite")
    cluster, clock = ProbeCluster(), FakeClock()
    holder: dict[str, dse.Engine] = {}

    class Listener(dse.EngineListener):
        def on_start(self, engine: dse.Engine) -> None:
            holder["engine"] = engine

    def stop_on_third_call(calls: int) -> None:
        if calls == 3:
            holder["engine"].request_stop()

    first = run_engine(c, store, cluster, clock, SeededAgent(3, stop_on_third_call), Listener())
    assert first.status == "cancelled"
    second = run_engine(c, store, cluster, clock, SeededAgent(3), resume=first.campaign_id)
    assert second.status == "completed"
    assert record(store).events(first.campaign_id, "agent_replay_diverged") == []
    numbers = [r["number"] for r in record(store).trials(first.campaign_id)]
    assert numbers == list(range(1, 19))


def test_a_run_that_died_mid_pass_resumes_without_running_anything_twice(tmp_path: Any) -> None:
    # The first controller dies: an exception escapes a pass (its error path cancels what
    # runs and records it). The record is then made to look like a crash's (a running
    # campaign); the resumed run runs the cancelled trials again.
    c = campaign(tmp_path / "run")
    store = dse.Store(c.workspace / "dse.sqlite")
    cluster, clock = ProbeCluster(), FakeClock()

    class Crash(BaseException):
        pass

    class Die(dse.EngineListener):
        def on_pass(self, engine: dse.Engine) -> None:
            if engine.stats.passes == 5:
                raise Crash

    engine = dse.Engine(c, agent=SeededAgent(3), store=store, clock=clock, listener=Die(),
                        backend=ProbeBackend(script, clock=clock, cluster=cluster))
    with contextlib.suppress(Crash):
        engine.run()
    run_id = engine.campaign_id
    # A real crash leaves the run 'running'; the error path marked it failed: undo that.
    store.reopen_campaign(run_id)
    cut_short = {r["id"] for r in record(store).trials(run_id) if r["status"] == "cancelled"}
    assert cut_short, "the death must catch trials running"

    result = run_engine(c, store, cluster, clock, SeededAgent(3), resume=run_id)

    assert result.status == "completed"
    rows = record(store).trials(run_id)
    assert len(rows) == 18
    assert all(r["status"] in ("completed", "cached") for r in rows)
    # Nothing ran twice: every config hash has one non-cached completed trial.
    hashes = [r["config_hash"] for r in rows if r["cache_of"] is None]
    assert len(hashes) == len(set(hashes))
    # The trials the dying controller cancelled ran again, once, as second attempts of the
    # same trials; every other trial ran once.
    states: dict[int, list[str]] = {}
    for attempt in record(store).attempts(run_id):
        states.setdefault(attempt["trial_id"], []).append(attempt["state"])
    for row in rows:
        if row["cache_of"] is not None:
            assert row["id"] not in states
        elif row["id"] in cut_short:
            assert states[row["id"]] == ["cancelled", "succeeded"]
        else:
            assert states[row["id"]] == ["succeeded"]
    retries = [json.loads(e["data"]) for e in record(store).events(run_id, "retry")]
    assert sorted(r["class"] for r in retries) == ["cancelled"] * len(cut_short)


def test_an_agent_that_does_not_replay_as_recorded_is_reported(tmp_path: Any) -> None:
    c = campaign(tmp_path / "run")
    store = dse.Store(c.workspace / "dse.sqlite")
    cluster, clock = ProbeCluster(), FakeClock()
    first = run_engine(c, store, cluster, clock, SeededAgent(3), StopAfter(4))
    # Another seed: not the agent that made the record.
    second = run_engine(c, store, cluster, clock, SeededAgent(4), resume=first.campaign_id)
    assert second.status == "completed"
    (event,) = record(store).events(first.campaign_id, "agent_replay_diverged")
    assert "differs" in json.loads(event["data"])["detail"]


def test_a_resume_told_less_than_the_agent_was_is_no_sign_of_a_nondeterministic_agent(
    tmp_path: Any,
) -> None:
    # The best result so far is flagged while the controller is down: the replayed agent is
    # not told it, so (adaptive as it is) it proposes otherwise than the record, rightly.
    c = campaign(tmp_path / "run")
    store = dse.Store(c.workspace / "dse.sqlite")
    cluster, clock = ProbeCluster(), FakeClock()
    first = run_engine(c, store, cluster, clock, SeededAgent(3), StopAfter(4))
    scored = [r for r in record(store).trials(first.campaign_id) if r["score"] is not None]
    best = min(scored, key=lambda r: r["score"])
    assert store.invalidate("trial", f"r:{best['number']}", "bad node", 1.0,
                            trial_row=best["id"]) is not None
    second = run_engine(c, store, cluster, clock, SeededAgent(3), resume=first.campaign_id)
    assert second.status == "completed"
    assert record(store).events(first.campaign_id, "agent_replay_diverged") == []


class SnapshotAgent(SeededAgent):
    """A :class:`SeededAgent` that gives its state out and takes it back."""

    restored = 0

    def snapshot(self) -> dict[str, Any]:
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss], "best": self.best}

    def restore(self, state: Mapping[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.best = state["best"]
        type(self).restored += 1


class OtherVersion(SnapshotAgent):
    version: ClassVar[str] = "2"


def snapshotted_run(tmp_path: Any, monkeypatch: Any, *, passes: int = 6, **overrides: Any
                    ) -> tuple[dse.Campaign, dse.Store, ProbeCluster, FakeClock,
                               dse.CampaignResult]:
    """A run of a :class:`SnapshotAgent` snapshot every few calls, stopped after *passes*
    (the restore counts start again at 0)."""
    import dse.engine._feedback

    monkeypatch.setattr(dse.engine._feedback, "SNAPSHOT_AFTER_CALLS", 3)
    c = campaign(tmp_path / "run", **overrides)
    store = dse.Store(c.workspace / "dse.sqlite")
    cluster, clock = ProbeCluster(), FakeClock()
    first = run_engine(c, store, cluster, clock, SnapshotAgent(3), StopAfter(passes))
    assert first.status == "cancelled"
    SnapshotAgent.restored = OtherVersion.restored = 0
    return c, store, cluster, clock, first


def test_a_resume_restores_the_agents_snapshot_and_replays_only_the_calls_after_it(
    tmp_path: Any, monkeypatch: Any,
) -> None:
    c, store, cluster, clock, first = snapshotted_run(tmp_path, monkeypatch)
    conn = record(store)
    ((log_id,),) = conn.rows("SELECT log_id FROM agent_snapshots")
    ((proposes,),) = conn.rows("SELECT COUNT(*) FROM agent_log WHERE kind = 'propose'")
    ((after,),) = conn.rows("SELECT COUNT(*) FROM agent_log WHERE kind = 'propose'"
                            " AND id > ?", (log_id,))
    assert log_id > 0
    assert after < proposes  # the snapshot covers some of the calls

    agent = SnapshotAgent(3)
    replayed: list[int] = []

    class Opened(dse.EngineListener):
        def on_start(self, engine: dse.Engine) -> None:
            replayed.append(agent.calls)  # the run is rebuilt: what was asked again

    second = run_engine(c, store, cluster, clock, agent, Opened(), resume=first.campaign_id)

    assert SnapshotAgent.restored == 1
    assert replayed == [after]  # only the calls after the snapshot
    assert second.status == "completed"
    assert trajectory(store, first.campaign_id) == reference(tmp_path)
    assert record(store).events(first.campaign_id, "agent_replay_diverged") == []


def test_a_snapshot_of_another_version_of_the_agent_is_not_restored(
    tmp_path: Any, monkeypatch: Any,
) -> None:
    c, store, cluster, clock, first = snapshotted_run(tmp_path, monkeypatch)
    second = run_engine(c, store, cluster, clock, OtherVersion(3), resume=first.campaign_id)
    assert OtherVersion.restored == 0  # replayed from the start instead
    assert second.status == "completed"
    assert trajectory(store, first.campaign_id) == reference(tmp_path)


def _opened(workspace: Any, c: dse.Campaign, run: int, cluster: ProbeCluster,
            clock: FakeClock) -> tuple[dict[str, Any], SnapshotAgent]:
    """Open run *run* of the record in *workspace* again (as a restarted controller does) and
    say what the engine holds then."""
    import dataclasses

    store = dse.Store(workspace / "dse.sqlite")
    agent = SnapshotAgent(3)
    backend = ProbeBackend(script, clock=clock, cluster=cluster)
    engine = dse.Engine(c, agent=agent, backend=backend, store=store, clock=clock)
    engine.open(resume=run)
    d = engine.dispatcher
    state = {
        "stats": dataclasses.asdict(engine.stats),
        "spent": engine.ledger.spent, "trials": engine.ledger.trials,
        "numbers": (d.number, d.wave, d.rejections),
        "pending": sorted(p for p, _ in engine.feedback._pending),
        "unobserved": sorted(engine.feedback._unobserved),
        "running": sorted(t.number for t in engine.table.unfinished()),
        "agent": (agent.rng.getstate(), agent.best),
    }
    store.close()
    return state, agent


def _from_snapshot_and_whole(tmp_path: Any, monkeypatch: Any, **overrides: Any
                             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a resume of a snapshotted run holds, and what one of the same record without its
    snapshot (the whole log replayed) holds."""
    import shutil
    import sqlite3

    c, store, cluster, clock, first = snapshotted_run(tmp_path, monkeypatch, passes=12,
                                                      max_trials=40, **overrides)
    store.close()
    statuses = {r["status"] for r in record(store).trials(first.campaign_id)}
    assert {"completed", "cancelled"} <= statuses
    whole = tmp_path / "whole"
    shutil.copytree(c.workspace, whole)
    db = sqlite3.connect(whole / "dse.sqlite")
    with db:
        db.execute("DELETE FROM agent_snapshots")
    db.close()

    from_snapshot, _ = _opened(c.workspace, c, first.campaign_id, cluster, clock)
    assert SnapshotAgent.restored == 1
    c_whole = campaign(whole, max_trials=40, **overrides)
    from_record, _ = _opened(whole, c_whole, first.campaign_id, cluster, clock)
    assert SnapshotAgent.restored == 1  # the second one replayed the whole log
    return from_snapshot, from_record


def test_a_resume_from_a_snapshot_rebuilds_what_a_resume_from_the_whole_record_does(
    tmp_path: Any, monkeypatch: Any,
) -> None:
    from_snapshot, from_record = _from_snapshot_and_whole(tmp_path, monkeypatch)
    assert from_snapshot == from_record
    stats = from_snapshot["stats"]
    assert stats["best"] is not None
    assert stats["cached"] > 0  # cache hits counted apart
    assert stats["completed"] > 0
    assert from_snapshot["running"]  # the cancelled trials run again


def test_a_resume_from_a_snapshot_counts_the_rejections_it_does_not_read(
    tmp_path: Any, monkeypatch: Any,
) -> None:
    # A third of the proposals rejected: the snapshot's resume reads only the rejections its
    # tail names (and the last ones in a row), and counts the rest.
    from_snapshot, from_record = _from_snapshot_and_whole(tmp_path, monkeypatch,
                                                          constraints=["x % 3 != 0"])
    assert from_snapshot == from_record
    assert from_snapshot["stats"]["rejected"] > 0


def test_the_newest_rejections_are_those_from_a_proposal_on_and_the_last_in_a_row(
    tmp_path: Any,
) -> None:
    c = campaign(tmp_path / "run", max_trials=30, constraints=["x % 3 != 0 or x > 35"])
    store = dse.Store(c.workspace / "dse.sqlite")
    first = run_engine(c, store, ProbeCluster(), FakeClock(), SeededAgent(5))
    every = {json.loads(e["data"])["proposal"]: json.loads(e["data"])
             for e in record(store).events(first.campaign_id, "rejected")}
    assert len(every) > 5
    # Made a run of rejections in a row the newest: proposals past the last, rejected.
    top = max(every)
    from dse.record._batch import Batch

    batch = Batch()
    for n in (top + 3, top + 4, top + 5):
        data = {"proposal": n, "params": {"x": 3}, "reason": "constraint"}
        batch.add_event(campaign=first.campaign_id, trial=None, at=1.0, kind="rejected",
                        data=data)
        every[n] = data
    store.commit(batch)
    in_a_row = {top + 3, top + 4, top + 5}
    for down_to in (0, *sorted(every), top + 10):
        count, found = store.reads.rejections(first.campaign_id, down_to=down_to)
        assert count == len(every)
        assert set(found) == {n for n in every if n >= down_to} | in_a_row
        assert all(found[n] == (every[n]["params"], every[n]["reason"]) for n in found)
    store.close()


def test_a_snapshot_recorded_before_schema_12_is_not_restored_and_the_log_is_replayed_whole(
    tmp_path: Any, monkeypatch: Any,
) -> None:
    import shutil
    import sqlite3

    c, store, cluster, clock, first = snapshotted_run(tmp_path, monkeypatch, passes=12,
                                                      max_trials=40)
    store.close()
    old = tmp_path / "old"
    shutil.copytree(c.workspace, old)
    db = sqlite3.connect(old / "dse.sqlite")
    with db:  # what a dse of schema 11 recorded: no proposals still to be told back
        db.execute("UPDATE agent_snapshots SET unobserved = NULL")
    db.close()

    from_snapshot, _ = _opened(c.workspace, c, first.campaign_id, cluster, clock)
    assert SnapshotAgent.restored == 1
    from_old, _ = _opened(old, campaign(old, max_trials=40), first.campaign_id, cluster, clock)
    assert SnapshotAgent.restored == 1  # the old snapshot was left alone

    assert from_old == from_snapshot
    assert from_snapshot["running"]  # in flight: not told back yet
    assert len(from_snapshot["unobserved"]) >= len(from_snapshot["running"])
