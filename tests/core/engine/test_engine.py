"""The engine in ``waves`` mode, on the probe backend, with a fake clock."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.testing import ProbeScript, ScriptedAgent
from support.record import record

if TYPE_CHECKING:
    from collections.abc import Mapping


def trajectory(rows: list[Any]) -> list[tuple[int, dict[str, Any], str, float | None]]:
    return [(r["number"], json.loads(r["params"]), r["status"], r["score"]) for r in rows]


# -- waves ----------------------------------------------------------------------------------


def test_a_grid_runs_in_waves_of_max_parallelism(run_campaign):
    run = run_campaign(range(1, 11), max_parallelism=3, passes=[2, 0, 1] * 4)

    assert run.result.status == "completed"
    assert run.result.end_reason == "agent_exhausted"
    assert run.batches == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]
    assert run.backend.cluster.running_peak == 3
    assert [r["status"] for r in run.trials] == ["completed"] * 10


def test_a_cartesian_grid_runs_in_waves_of_max_parallelism(run_campaign, make_campaign):
    space = {
        "x": {"type": "int", "low": 0, "high": 10},
        "kind": {"type": "categorical", "choices": ["a", "b"]},
    }
    grid = [{"x": x, "kind": k} for x, k in itertools.product([1, 2, 3], ["a", "b"])]

    run = run_campaign(
        grid,
        campaign=make_campaign(space=space, max_parallelism=4),
        script=lambda p: ProbeScript(passes=p["x"], metrics={"value": p["x"]}),
    )

    assert run.batches == [[1, 2, 3, 4], [5, 6]]
    assert run.backend.cluster.running_peak == 4
    assert [json.loads(r["params"]) for r in run.trials] == grid


def test_the_next_wave_starts_when_the_slowest_trial_of_the_last_one_ends(run_campaign):
    run = run_campaign(range(1, 10), max_parallelism=3, passes=[1, 4, 0, 0, 2, 0, 3, 3, 3])

    waves = run.batches
    assert len(waves) == 3
    for wave, following in itertools.pairwise(waves):
        last_end = max(run.ends[n] for n in wave)
        assert {run.starts[n] for n in following} == {last_end}
    assert run.backend.cluster.passes == 5 + 3 + 4


def test_a_wave_waits_three_passes_for_its_slow_trial(run_campaign):
    run = run_campaign(range(1, 7), max_parallelism=3, passes=[3, 0, 0])

    assert run.ends == {2: 1, 3: 1, 1: 4, 4: 5, 5: 5, 6: 5}
    assert run.starts == {1: 0, 2: 0, 3: 0, 4: 4, 5: 4, 6: 4}


def test_the_trajectory_keeps_proposal_order_when_trials_finish_in_reverse(run_campaign):
    run = run_campaign(range(1, 7), max_parallelism=3, passes=[5, 3, 0, 4, 2, 0])

    assert [run.ends[n] for n in (1, 2, 3)] == [6, 4, 1]
    assert trajectory(run.trials) == [(n, {"x": n}, "completed", float(n)) for n in range(1, 7)]
    observed = [[obs.trial_number for obs in call] for call in run.agent.observe_calls]
    assert observed == [[1, 2, 3], [4, 5, 6]]


def test_every_trial_gets_its_own_output_directory(run_campaign):
    run = run_campaign(range(1, 8), max_parallelism=3, trial_dirs=True)

    dirs = [r["trial_dir"] for r in run.trials]
    assert len(dirs) == 7
    assert len(set(dirs)) == 7
    assert all(Path(d).is_dir() for d in dirs)


def test_no_directory_is_made_for_a_backend_that_wants_none(run_campaign):
    run = run_campaign(range(1, 8), max_parallelism=3, trial_dirs=False)

    dirs = [Path(r["trial_dir"]) for r in run.trials]
    assert len(set(dirs)) == 7  # each trial still has its own place in the record
    assert dirs[0].parent.is_dir()  # the run's directory
    assert not any(d.exists() for d in dirs)


def _pi_script(params: Mapping[str, Any]) -> ProbeScript:
    x = params["x"]
    passes = (x * 3) % 5
    if x % 4 == 0:
        return ProbeScript(passes=passes, state=dse.JobState.FAILED)
    if x == 7:
        return ProbeScript(passes=passes, metrics={"other": 1.0})
    return ProbeScript(passes=passes, metrics={"value": float(x)})


def test_the_trajectory_does_not_depend_on_parallelism(run_campaign):
    digits = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3]

    trajectories = {
        p: trajectory(run_campaign(digits, max_parallelism=p, script=_pi_script).trials)
        for p in (1, 2, 3, 5, 16)
    }

    reference = trajectories[1]
    assert [t[0] for t in reference] == list(range(1, len(digits) + 1))
    assert {t[2] for t in reference} == {"completed", "failed", "cached"}
    assert reference[3] == (4, {"x": 1}, "cached", 1.0)
    assert reference[11] == (12, {"x": 8}, "failed", None)
    for p, other in trajectories.items():
        assert other == reference, f"max_parallelism={p}"


# -- rejections -----------------------------------------------------------------------------


def test_a_rejected_proposal_takes_no_slot_and_no_number(run_campaign):
    run = run_campaign([1, 2, 3, 4, 5], max_parallelism=2, constraints=["x != 3"])

    assert trajectory(run.trials) == [
        (1, {"x": 1}, "completed", 1.0),
        (2, {"x": 2}, "completed", 2.0),
        (3, {"x": 4}, "completed", 4.0),
        (4, {"x": 5}, "completed", 5.0),
    ]
    assert run.batches == [[1, 2], [3, 4]]
    rejected = record(run.store).events(run.result.campaign_id, "rejected")
    assert len(rejected) == 1
    data = json.loads(rejected[0]["data"])
    assert data["params"] == {"x": 3}
    assert data["proposal"] == 3
    assert "x != 3" in data["reason"]
    assert run.result.stats.rejected == 1


def test_endless_rejections_stop_the_campaign(run_campaign):
    run = run_campaign(
        itertools.repeat({"x": 3}),
        max_parallelism=4,
        constraints=["x != 3"],
        max_consecutive_rejections=10,
    )

    assert run.result.status == "stopped"
    assert run.result.end_reason == "max_consecutive_rejections"
    assert run.trials == []
    assert run.backend.cluster.batches == []
    assert len(record(run.store).events(run.result.campaign_id, "rejected")) == 10
    campaign = run.store.reads.find_campaign(str(run.result.campaign_id))
    assert campaign is not None
    assert (campaign.status, campaign.end_reason) == ("stopped", "max_consecutive_rejections")


def test_a_trial_between_rejections_resets_the_count(run_campaign):
    proposals = [3, 3, 1, 3, 3, 2, 3, 3, 3]

    run = run_campaign(
        proposals, constraints=["x != 3"], max_consecutive_rejections=3, max_parallelism=2
    )

    assert run.result.end_reason == "max_consecutive_rejections"
    assert [json.loads(r["params"]) for r in run.trials] == [{"x": 1}, {"x": 2}]


# -- failures -------------------------------------------------------------------------------


class _PrepareFails:
    """The default environment, except that preparing ``x == bad`` raises."""

    def __init__(self, campaign: dse.Campaign, bad: int) -> None:
        self._inner = dse.CommandEnvironment(
            campaign.environment, campaign.objectives, param_names=campaign.space.names
        )
        self._bad = bad

    def identity(self) -> Mapping[str, Any]:
        return self._inner.identity()

    def prepare(self, trial: dse.TrialInfo) -> dse.JobSpec:
        if trial.params["x"] == self._bad:
            raise RuntimeError("no such configuration on this machine")
        return self._inner.prepare(trial)

    def evaluate(self, job: dse.JobSpec, status: dse.JobStatus) -> dse.Evaluation:
        return self._inner.evaluate(job, status)


BAD_ENDS = {
    "nonzero_exit": ProbeScript(passes=1, state=dse.JobState.FAILED),
    "missing_metric": ProbeScript(passes=1, metrics={"other": 1}),
    "invalid_metric": ProbeScript(passes=1, metrics={"value": math.nan}),
    "incomplete_output": ProbeScript(passes=1, metrics={"value": 2.0}, complete=False),
}


@pytest.mark.parametrize("failure", sorted(BAD_ENDS))
def test_a_failing_trial_fails_alone(run_campaign, failure):
    def script(params: Mapping[str, Any]) -> ProbeScript:
        x = params["x"]
        return BAD_ENDS[failure] if x == 2 else ProbeScript(passes=x % 3, metrics={"value": x})

    run = run_campaign(range(1, 8), max_parallelism=3, script=script)

    rows = run.trials
    assert [(r["status"], r["failure"]) for r in rows] == [
        ("completed", None),
        ("failed", failure),
        *[("completed", None)] * 5,
    ]
    assert rows[1]["score"] is None
    assert run.batches == [[1, 2, 3], [4, 5, 6], [7]]
    assert run.result.status == "completed"
    assert (run.result.stats.completed, run.result.stats.failed) == (6, 1)


def test_a_trial_that_cannot_be_prepared_fails_alone(run_campaign, make_campaign):
    campaign = make_campaign(max_parallelism=3)

    run = run_campaign(range(1, 8), campaign=campaign, environment=_PrepareFails(campaign, bad=2))

    rows = run.trials
    assert [(r["status"], r["failure"]) for r in rows] == [
        ("completed", None),
        ("failed", "prepare_error"),
        *[("completed", None)] * 5,
    ]
    assert "no such configuration" in rows[1]["message"]
    # It never reached the backend, so it held no slot of its wave.
    assert run.batches == [[1, 3, 4], [5, 6, 7]]
    assert run.agent.observe_calls[0][1].failure is dse.FailureClass.PREPARE_ERROR


# -- the cache ------------------------------------------------------------------------------


def test_an_earlier_wave_feeds_the_cache_of_a_later_one(run_campaign):
    run = run_campaign([1, 2, 3, 1, 4], max_parallelism=3)

    rows = run.trials
    assert run.batches == [[1, 2, 3], [5]]
    assert rows[3]["status"] == "cached"
    assert rows[3]["cache_of"] == rows[0]["id"]
    assert rows[3]["score"] == rows[0]["score"] == 1.0
    assert rows[3]["trial_dir"] is None
    assert len(record(run.store).attempts(run.result.campaign_id)) == 4
    assert run.result.stats.cached == 1


def test_identical_proposals_in_one_wave_run_once(run_campaign):
    snapshots: list[list[tuple[str, float | None]]] = []

    class Snapshot(dse.EngineListener):
        def on_pass(self, engine: dse.Engine) -> None:
            rows = record(engine.store).trials(engine.campaign_id)
            snapshots.append([(r["status"], r["score"]) for r in rows])

    run = run_campaign([1, 1, 2], max_parallelism=3, passes={1: 2}, listener=Snapshot())

    rows = run.trials
    assert run.batches == [[1, 3]]
    assert (rows[1]["status"], rows[1]["cache_of"]) == ("cached", rows[0]["id"])
    assert snapshots[0] == [("running", None), ("cached", None), ("completed", 2.0)]
    assert snapshots[-1] == [("completed", 1.0), ("cached", 1.0), ("completed", 2.0)]
    assert [obs.score for obs in run.agent.observe_calls[0]] == [1.0, 1.0, 2.0]


# -- the agent ------------------------------------------------------------------------------


def test_proposals_are_pulled_lazily(run_campaign):
    run = run_campaign(itertools.count(1), max_parallelism=4, max_trials=10)

    assert run.result.end_reason == "max_trials"
    assert run.agent.pulled == 10
    assert len(run.trials) == 10
    assert run.agent.calls == [(4, 0), (4, 0), (2, 0)]


def test_the_agent_is_never_asked_for_more_than_the_free_slots(run_campaign):
    proposals = [1, 2, 1, 3, 2, 4, 5, 6, 5, 7]

    run = run_campaign(proposals, max_parallelism=3, passes=[1, 0, 2, 0, 1, 0, 1])

    # A cache hit takes its slot as a trial would: each wave is three proposals, however
    # many of them the record (or a trial of the same wave) answers.
    assert run.agent.calls == [(3, 0), (3, 0), (3, 0), (3, 0), (2, 1)]
    for asked, in_flight in run.agent.calls:
        assert 1 <= asked <= 3 - in_flight
    assert run.batches == [[1, 2], [4, 6], [7, 8], [10]]
    assert [row["status"] for row in run.trials].count("cached") == 3


def test_the_agent_is_told_a_whole_wave_before_it_proposes_again(run_campaign):
    order: list[tuple[str, list[int]]] = []

    class Recording(ScriptedAgent):
        def propose(self, n, in_flight):
            out = super().propose(n, in_flight)
            order.append(("propose", [p["x"] for p in out]))
            return out

        def observe(self, observations):
            order.append(("observe", [o.trial_number for o in observations]))
            super().observe(observations)

    run_campaign(range(1, 8), max_parallelism=3, passes=[2, 0, 1, 1, 0, 2, 0], agent_type=Recording)

    assert order == [
        ("propose", [1, 2, 3]),
        ("observe", [1, 2, 3]),
        ("propose", [4, 5, 6]),
        ("observe", [4, 5, 6]),
        ("propose", [7]),
        ("propose", []),
        ("observe", [7]),
    ]


def test_the_agent_is_told_every_result_when_max_trials_ends_the_campaign(run_campaign):
    run = run_campaign(itertools.count(1), max_parallelism=2, max_trials=3)

    assert len(run.trials) == 3
    assert [o.trial_number for o in run.agent.observed] == [1, 2, 3]


@pytest.mark.parametrize("mode", ["waves", "rolling"])
def test_a_campaign_with_a_wait_for_feedback_agent_completes(run_campaign, mode):
    run = run_campaign(
        [1, 2, 1, 3, 4, 5, 6],
        max_parallelism=3,
        mode=mode,
        wait_for_feedback=True,
        passes=[2, 0, 1, 0, 3, 1],
    )

    assert run.result.status == "completed"
    assert run.result.end_reason == "agent_exhausted"
    assert [r["status"] for r in run.trials] == ["completed"] * 2 + ["cached"] + ["completed"] * 4
    assert len(run.agent.observed) == 7


# -- stopping and the record ----------------------------------------------------------------


class _StopAfterPass(dse.EngineListener):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_pass(self, engine: dse.Engine) -> None:
        if engine.stats.passes == self.at:
            engine.request_stop()


def test_a_stop_cancels_the_running_wave_and_keeps_the_record(run_campaign):
    run = run_campaign(
        range(1, 9), max_parallelism=2, passes={3: 100, 4: 100}, listener=_StopAfterPass(2)
    )

    assert run.result.status == "cancelled"
    assert run.result.end_reason == "cancelled"
    rows = run.trials
    assert [(r["number"], r["status"]) for r in rows] == [
        (1, "completed"),
        (2, "completed"),
        (3, "cancelled"),
        (4, "cancelled"),
    ]
    assert all(r["ended_at"] is not None for r in rows)
    attempts = record(run.store).attempts(run.result.campaign_id)
    assert [(a["state"], a["ended_at"] is not None) for a in attempts] == [
        ("succeeded", True),
        ("succeeded", True),
        ("cancelled", True),
        ("cancelled", True),
    ]
    assert run.batches == [[1, 2], [3, 4]]
    assert max(run.starts.values()) <= 2
    assert run.agent.pulled == 4
    assert run.result.stats.cancelled == 2


def test_a_reopened_record_shows_every_trial(run_campaign):
    run = run_campaign([1, 2, 2, 3, 4, 5], max_parallelism=2, constraints=["x != 4"])

    reopened = dse.Store(run.store.path)
    try:
        rows = reopened.reads.trials(run.result.campaign_id)
        campaign = reopened.reads.find_campaign(str(run.result.campaign_id))
    finally:
        reopened.close()
    # The typed rows a fresh Store reads say what the file holds.
    assert [(r.number, r.params, r.status.value, r.score) for r in rows] == trajectory(run.trials)
    assert [r.status for r in rows] == [
        dse.TrialStatus.COMPLETED,
        dse.TrialStatus.COMPLETED,
        dse.TrialStatus.CACHED,
        dse.TrialStatus.COMPLETED,
        dse.TrialStatus.COMPLETED,
    ]
    assert campaign is not None
    assert campaign.status is dse.CampaignStatus.COMPLETED


def test_a_trial_directory_left_by_a_dead_controller_is_reused(run_campaign, make_campaign):
    # A controller that died between creating a trial's directory and committing the trial
    # leaves an empty directory behind; the resumed run proposes that trial again.
    campaign = make_campaign()
    (campaign.workspace / campaign.name / "run-1" / "000001").mkdir(parents=True)

    run = run_campaign([1, 2], campaign=campaign)

    assert [(r["number"], r["status"]) for r in run.trials] == [(1, "completed"), (2, "completed")]
