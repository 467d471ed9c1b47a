"""The live trial table, the agent's feedback and the current data version, each alone:
no engine, no campaign."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dse.engine._feedback import Feedback
from dse.engine._live import CurrentData, LiveTrial, TrialTable
from dse.model._types import Direction, Observation, TrialStatus
from dse.record._batch import Batch
from dse.record.sqlite import Store


def trial(number: int, digest: str = "", **fields: Any) -> LiveTrial:
    return LiveTrial(100 + number, number, number, 1, {"x": number}, digest or f"h{number}",
                     **fields)


def test_an_attempt_moves_from_queued_to_granted_to_running_to_ended() -> None:
    table = TrialTable()
    a, b = trial(1), trial(2)
    table.queue(a, now=1.0)
    table.queue(b, now=2.0)
    assert table.queued == [a, b]
    assert (a.queued_at, a.granted, a.expected) == (1.0, False, None)
    assert table.take_granted() == []
    table.grant(b, expected=30.0, now=3.0)
    assert (b.granted, b.expected, b.granted_at) == (True, 30.0, 3.0)
    assert table.take_granted() == [b]
    assert table.queued == [a]
    table.submitted(b, "job-2")
    assert table.running == {"job-2": b}
    assert b.job_id == "job-2"
    assert table.busy() == 2
    assert table.in_flight() == [b, a]
    assert table.ended("job-2") is b
    assert table.ended("job-2") is None
    assert table.busy() == 1


def test_retries_wait_apart_and_cancels_take_queued_then_retries() -> None:
    table = TrialTable()
    a, b, c = trial(1), trial(2), trial(3)
    table.queue(a, now=0.0)
    table.wait_retry(b)
    table.submitted(c, "job-3")
    assert table.retries == [b]
    assert list(table.unfinished()) == [c, b, a]
    assert table.in_flight() == [c, a]  # a waiting retry is not shown to the agent
    assert table.take_unsubmitted() == [a, b]
    assert table.busy() == 1
    assert table.take_running() == [("job-3", c)]
    assert table.busy() == 0
    table.wait_retry(a)
    assert table.take_retries() == [a]
    assert table.retries == []


def test_a_config_is_reused_from_the_cache_else_from_the_trial_that_runs_it() -> None:
    table = TrialTable()
    running = trial(1, "same")
    table.dispatched(running)
    assert table.reusable("same") is running
    ended = trial(2, "same", status=TrialStatus.COMPLETED)
    table.cache(ended)
    assert table.reusable("same") is ended
    table.uncache("same", row=999)  # another trial's row: the cache keeps its own
    assert table.reusable("same") is ended
    table.uncache("same", row=ended.row_id)
    assert table.reusable("same") is running
    rerun = trial(3, "same")
    table.dispatched(rerun)
    table.forget(running)  # it no longer holds the config: the re-run does
    assert table.reusable("same") is rerun
    table.forget(rerun)
    assert table.reusable("same") is None


def test_a_cache_hit_takes_its_slot_unless_rolling_waits_on_a_running_trial() -> None:
    table = TrialTable()
    running, ended = trial(1, "run"), trial(2, "done", status=TrialStatus.COMPLETED)
    table.submitted(running, "job-1")
    table.dispatched(running)
    table.cache(ended)
    waiter, hit = (trial(3, "run", status=TrialStatus.CACHED),
                   trial(4, "done", status=TrialStatus.CACHED))
    running.waiters.append(waiter)
    failed = trial(5, status=TrialStatus.FAILED)  # it could not be prepared: nothing runs

    assert [table.takes_slot(t, waves=True) for t in (running, waiter, hit, failed)] == [
        True, True, True, False]
    assert [table.takes_slot(t, waves=False) for t in (running, waiter, hit, failed)] == [
        True, False, True, False]
    # The waiting cache hit is in flight with the trial it waits on.
    assert table.in_flight() == [running, waiter]


def test_the_agent_is_shown_in_flight_what_it_is_still_to_be_told_in_proposal_order() -> None:
    feedback = Feedback(Direction.MINIMIZE)
    running = [trial(5), trial(2)]
    feedback.tell(4, Observation(params={"x": 4}, status=TrialStatus.CACHED, proposal=4))
    feedback.tell(1, Observation(params={"x": 1}, status=TrialStatus.COMPLETED, proposal=1))

    assert feedback.in_flight(running) == [(1, {"x": 1}), (2, {"x": 2}), (4, {"x": 4}),
                                           (5, {"x": 5})]


def test_feedback_is_told_in_proposal_order_and_logged(tmp_path: Path) -> None:
    class Agent:
        def __init__(self) -> None:
            self.told: list[list[Observation]] = []

        def observe(self, observations: list[Observation]) -> None:
            self.told.append(observations)

    feedback = Feedback(Direction.MAXIMIZE)
    late, early = trial(5, score=2.0, status=TrialStatus.COMPLETED), trial(3)
    feedback.tell(5, feedback.observation(late))
    feedback.tell(3, feedback.observation(early, status=TrialStatus.FAILED))
    assert feedback.untold() == {3, 5}
    agent = Agent()
    store = Store(tmp_path / "dse.sqlite")
    run = store.create_campaign(name="c", source=None, spec={}, agent="a", backend="b",
                                mode="waves", max_parallelism=1, now=0.0)
    batch = Batch()
    feedback.deliver(agent, batch, run)  # type: ignore[arg-type]
    ((first, second),) = agent.told
    assert (first.trial_number, first.status) == (3, TrialStatus.FAILED)
    assert (second.trial_number, second.score, second.loss) == (5, 2.0, -2.0)
    assert not feedback.pending()
    store.commit(batch)
    (entry,) = store.reads.agent_log(run)
    assert (entry.kind, list(entry.proposals)) == ("observe", [3, 5])
    feedback.deliver(agent, batch, run)  # type: ignore[arg-type]
    assert len(agent.told) == 1  # nothing waiting: nothing told, nothing logged
    store.close()


def test_flagged_results_are_never_told_and_other_data_is_told_without_metrics() -> None:
    feedback = Feedback(Direction.MINIMIZE)
    data = CurrentData({"command": ["x"]}, "v2")
    old = trial(1, metrics={"t": 1.0}, score=1.0, status=TrialStatus.COMPLETED,
                data_version="v1")
    assert not data.current(old)
    told = feedback.observation(old, current=data.current(old))
    assert (told.metrics, told.score) == ({}, None)
    feedback.tell(1, told)
    feedback.tell(2, feedback.observation(trial(2)))
    feedback.drop({1})
    assert feedback.untold() == {2}


def test_the_current_data_version_changes_the_identity_of_a_config() -> None:
    data = CurrentData({"command": ["x"]}, "v1")
    before = data.hasher({"x": 1})
    assert data.refresh() is None  # not reading the version from data
    data.set("v2")
    assert data.hasher({"x": 1}) != before
    assert data.current(trial(1, data_version="v2"))
    assert data.current(trial(1))  # dispatched against no version: about any
