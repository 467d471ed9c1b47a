"""The store's reads return typed values: states as enums, JSON decoded, trials found by the
names a user types, across the runs of a workspace."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.model._budget import Spend
from dse.model._types import AttemptState, CampaignStatus
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from dse.record import Storage


def script(params: Mapping[str, Any]) -> ProbeScript:
    if params["x"] == 3:
        return ProbeScript(seconds=2.0, state=dse.JobState.FAILED, exit_code=4)
    return ProbeScript(seconds=float(params["x"]), metrics={"t": float(params["x"])})


def run(tmp_path: Path, points: list[dict[str, Any]], opener: Callable[[Path], Storage]
        ) -> tuple[dse.CampaignResult, Storage]:
    camp = dse.campaign_from_dict({
        "campaign": {"name": "rd", "max_parallelism": 2},
        "space": {"x": {"type": "int", "low": 0, "high": 9}},
        "objectives": [{"metric": "t"}],
        "environment": {"time_limit": "1m"},
        "backend": {"probe": {"price": {"cpu_hour": 36}}},
    }, workspace=tmp_path / "ws")
    clock = FakeClock(100.0)
    store = opener(tmp_path / "ws")
    result = dse.Engine(camp, agent=ScriptedAgent(points), store=store, clock=clock,
                        backend=ProbeBackend(script, clock=clock)).run()
    return result, store


def test_rows_are_frozen_values_with_enums_and_decoded_json(
    tmp_path: Path, opener: Callable[[Path], Storage]
) -> None:
    result, store = run(tmp_path, [{"x": 2}, {"x": 3}], opener)
    (campaign,) = store.reads.campaigns()
    assert campaign.status is CampaignStatus.COMPLETED
    assert campaign.spec["space"][0]["name"] == "x"
    done, failed = store.reads.trials(result.campaign_id)
    assert (done.status, done.failure, done.params, done.metrics) == (
        dse.TrialStatus.COMPLETED, None, {"x": 2}, {"t": 2.0})
    assert (failed.status, failed.failure, failed.metrics) == (
        dse.TrialStatus.FAILED, dse.FailureClass.NONZERO_EXIT, None)
    attempts = store.reads.attempts(result.campaign_id)
    assert [(a.trial_id, a.state, a.exit_code) for a in attempts] == [
        (done.id, AttemptState.SUCCEEDED, 0), (failed.id, AttemptState.FAILED, 4)]
    assert attempts[0].spend == Spend(wall_s=2.0, cpu_s=2.0, gpu_s=0.0, node_s=2.0, money=0.02)
    assert attempts[0].resumed is False
    assert [(s.trial_id, s.spend) for s in store.reads.spends(result.campaign_id)] == [
        (a.trial_id, a.spend) for a in attempts]
    total = store.reads.spend_total(result.campaign_id)
    assert total == pytest.approx(attempts[0].spend + attempts[1].spend)
    assert total.wall_s > 0
    assert store.reads.attempt_times(result.campaign_id) == [
        (a.ended_at, a.started_at, a.state, a.trial_id) for a in attempts]
    assert store.reads.trial_params(result.campaign_id) == {done.id: {"x": 2}, failed.id: {"x": 3}}
    seconds = [a.ended_at - a.started_at for a in sorted(attempts, key=lambda a: a.ended_at)]
    total, recent = store.reads.attempt_durations(result.campaign_id, last=1)
    assert total == pytest.approx(sum(seconds))
    assert recent == pytest.approx(seconds[-1:])
    assert store.reads.attempt_durations(result.campaign_id, last=5)[1] == pytest.approx(seconds)
    assert store.reads.attempts(result.campaign_id, trials=[failed.id]) == [attempts[1]]
    assert store.reads.spend_total(result.campaign_id + 1) == Spend()
    assert store.reads.trial_counts(result.campaign_id) == {
        dse.TrialStatus.COMPLETED: 1, dse.TrialStatus.FAILED: 1}
    assert store.reads.dispatched(result.campaign_id) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.score = 1.0  # type: ignore[misc]
    store.close()


def test_trials_are_found_by_every_name_a_user_types_and_refs_cross_runs(
    tmp_path: Path, opener: Callable[[Path], Storage],
) -> None:
    first, store = run(tmp_path, [{"x": 2}, {"x": 3}], opener)
    store.close()
    second, store = run(tmp_path, [{"x": 2}, {"x": 4}], opener)
    for text in (f"rd-{second.campaign_id}-1", "rd:1", f"{second.campaign_id}:1"):
        found_run, trial = store.reads.find_trial(text)
        assert (found_run.id, trial.number) == (second.campaign_id, 1)
    _, hit = store.reads.find_trial("rd:1")
    _, original = store.reads.find_trial(f"{first.campaign_id}:1")
    assert (hit.status, hit.cache_of) == (dse.TrialStatus.CACHED, original.id)
    assert store.reads.trial_statuses([original.id, hit.id, 999]) == {
        original.id: dse.TrialStatus.COMPLETED, hit.id: dse.TrialStatus.CACHED}
    ref = store.reads.trial_refs([original.id])[original.id]
    assert ref.trial_id == f"rd-{first.campaign_id}-1"
    with pytest.raises(dse.ConfigError, match=r"no run 9 of a campaign named 'rd'"):
        store.reads.find_trial("rd-9-1")
    with pytest.raises(dse.ConfigError, match=r"has no trial 7"):
        store.reads.find_trial("rd:7")
    with pytest.raises(dse.ConfigError, match=r"expected <campaign>-<run>-<number>"):
        store.reads.find_trial("rd")
    store.close()


def test_flags_are_read_back_with_their_reasons(
    tmp_path: Path, opener: Callable[[Path], Storage]
) -> None:
    result, store = run(tmp_path, [{"x": 2}, {"x": 4}], opener)
    _, trial = store.reads.find_trial("rd:2")
    done = store.invalidate("trial", "rd:2", "bad node", 7.0, trial_row=trial.id)
    assert done is not None
    (mark,) = store.reads.invalidations()
    assert (mark.id, mark.kind, mark.target, mark.reason, mark.trials) == (
        done[0], "trial", "rd:2", "bad node", 1)
    assert [t.id for t in store.reads.invalid_trials()] == [trial.id]
    assert store.reads.invalid_reasons(result.campaign_id) == {trial.id: "bad node"}
    assert store.reads.invalid_scores(result.campaign_id) == {trial.id}
    assert [s.invalidation for s in store.reads.scores(result.campaign_id)] == [None, done[0]]
    store.close()
