"""The engine in ``rolling`` mode: a slot is refilled in the pass that frees it."""

from __future__ import annotations

import itertools
import json

import dse
from dse.testing import ScriptedAgent
from support.record import record

HETEROGENEOUS = [5, 1, 1, 2, 0, 3, 1, 0]


def test_a_slot_is_refilled_in_the_pass_that_frees_it(run_campaign):
    run = run_campaign([1, 2, 3, 4], mode="rolling", max_parallelism=2, passes=[3, 0, 0, 0])

    assert run.starts == {1: 0, 2: 0, 3: 1, 4: 2}
    assert run.ends == {2: 1, 3: 2, 4: 3, 1: 4}
    assert run.backend.cluster.passes == 4
    assert run.result.stats.passes == 4


def test_heterogeneous_durations_take_the_passes_computed_by_hand(run_campaign):
    # P=3; a job of k passes submitted after pass s ends at pass s + k + 1:
    #   pass 0: start 1 (ends 6), 2 (ends 2), 3 (ends 2)
    #   pass 2: 2 and 3 end; start 4 (ends 5), 5 (ends 3)
    #   pass 3: 5 ends; start 6 (ends 7)
    #   pass 5: 4 ends; start 7 (ends 7)
    #   pass 6: 1 ends; start 8 (ends 7)
    #   pass 7: 6, 7 and 8 end; the grid is exhausted.
    run = run_campaign(range(1, 9), mode="rolling", max_parallelism=3, passes=HETEROGENEOUS)

    assert run.backend.cluster.passes == 7
    assert run.starts == {1: 0, 2: 0, 3: 0, 4: 2, 5: 2, 6: 3, 7: 5, 8: 6}
    assert run.ends == {2: 2, 3: 2, 5: 3, 4: 5, 1: 6, 6: 7, 7: 7, 8: 7}
    assert run.backend.cluster.running_peak == 3
    assert run.result.status == "completed"


def test_rolling_does_not_wait_for_a_wave(run_campaign):
    rolling = run_campaign(range(1, 9), mode="rolling", max_parallelism=3, passes=HETEROGENEOUS)
    waves = run_campaign(range(1, 9), mode="waves", max_parallelism=3, passes=HETEROGENEOUS)

    assert rolling.starts[4] < rolling.ends[1]
    assert rolling.batches == [[1, 2, 3], [4, 5], [6], [7], [8]]
    assert waves.batches == [[1, 2, 3], [4, 5, 6], [7, 8]]
    assert (rolling.backend.cluster.passes, waves.backend.cluster.passes) == (7, 12)


def test_rolling_tells_the_agent_what_ended_in_each_pass(run_campaign):
    run = run_campaign(range(1, 9), mode="rolling", max_parallelism=3, passes=HETEROGENEOUS)

    observed = [[obs.trial_number for obs in call] for call in run.agent.observe_calls]
    assert observed == [[2, 3], [5], [4], [1], [6, 7, 8]]
    assert run.agent.calls == [(3, 0), (2, 1), (1, 2), (1, 2), (1, 2), (3, 0)]


def test_rolling_numbers_trials_in_proposal_order(run_campaign):
    run = run_campaign(range(1, 9), mode="rolling", max_parallelism=3, passes=HETEROGENEOUS)

    assert [(r["number"], json.loads(r["params"]), r["score"]) for r in run.trials] == [
        (n, {"x": n}, float(n)) for n in range(1, 9)
    ]
    assert [o.trial_number for o in run.agent.observed] != list(range(1, 9))


def test_rolling_pulls_only_what_the_free_slots_take(run_campaign):
    run = run_campaign(
        itertools.count(1),
        mode="rolling",
        max_parallelism=4,
        max_trials=10,
        passes=[3, 1, 0, 2, 0, 1, 4, 0, 0, 2],
    )

    assert run.result.end_reason == "max_trials"
    assert run.agent.pulled == 10
    assert len(run.trials) == 10
    for asked, in_flight in run.agent.calls:
        assert 1 <= asked <= 4 - in_flight
    assert run.backend.cluster.running_peak == 4


def test_rolling_reuses_a_running_trial_for_a_duplicate(run_campaign):
    run = run_campaign([1, 2, 2, 3], mode="rolling", max_parallelism=2, passes={1: 1, 2: 3})

    rows = run.trials
    assert run.batches == [[1, 2], [4]]
    assert (rows[2]["status"], rows[2]["cache_of"], rows[2]["score"]) == (
        "cached",
        rows[1]["id"],
        2.0,
    )


def test_a_stop_in_rolling_mode_cancels_what_runs(run_campaign):
    class StopAfterSecondPass(dse.EngineListener):
        def on_pass(self, engine: dse.Engine) -> None:
            if engine.stats.passes == 2:
                engine.request_stop()

    run = run_campaign(
        range(1, 9),
        mode="rolling",
        max_parallelism=3,
        passes={2: 100, 3: 100, 4: 100},
        listener=StopAfterSecondPass(),
    )

    assert run.result.status == "cancelled"
    assert [(r["number"], r["status"]) for r in run.trials] == [
        (1, "completed"),
        (2, "cancelled"),
        (3, "cancelled"),
        (4, "cancelled"),
    ]
    assert run.batches == [[1, 2, 3], [4]]
    attempts = record(run.store).attempts(run.result.campaign_id)
    assert all(a["ended_at"] is not None for a in attempts)


class AheadAgent(ScriptedAgent):
    """A scripted agent that says it learns nothing from results."""

    proposes_ahead = True


def test_a_backend_that_queues_itself_is_handed_more_when_the_agent_proposes_ahead(
    run_campaign,
):
    run = run_campaign(range(1, 9), mode="rolling", max_parallelism=2, passes=[2] * 8,
                       agent_type=AheadAgent, queue_ahead=2)
    # Two slots and two queued by the backend itself: four out at first, then each end is
    # refilled at once, always four out.
    assert run.batches[0] == [1, 2, 3, 4]
    assert run.backend.cluster.running_peak == 4
    assert run.result.stats.completed == 8


def test_only_agents_that_propose_ahead_in_rolling_mode_fill_a_backends_queue(run_campaign):
    learning = run_campaign(range(1, 9), mode="rolling", max_parallelism=2, passes=[2] * 8,
                            queue_ahead=2)
    waves = run_campaign(range(1, 9), mode="waves", max_parallelism=2, passes=[2] * 8,
                         agent_type=AheadAgent, queue_ahead=2)
    assert learning.batches[0] == waves.batches[0] == [1, 2]
    assert learning.backend.cluster.running_peak == waves.backend.cluster.running_peak == 2
