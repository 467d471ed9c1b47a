"""Invalidation, not quiet recomputation: ``dse invalidate`` flags results and every comparison
that used them, deletes nothing, and the agent is never fed them again."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import dse
from dse.testing import FakeClock, ProbeBackend, ProbeScript
from support.cli import run_dse
from support.recording import Recording

if TYPE_CHECKING:
    from pathlib import Path

    from dse.record._records import Score, Trial


def campaign(tmp_path: Path, version: str = "v1", **extra: Any) -> dse.Campaign:
    doc: dict[str, Any] = {
        "campaign": {"name": "inv", "max_parallelism": 1},
        "space": {"x": {"type": "int", "low": 0, "high": 100}},
        "objectives": [{"metric": "time"}],
        "data": {"version": version},
    }
    doc.update(extra)
    return dse.campaign_from_dict(doc, source=tmp_path / "inv.toml",
                                  workspace=tmp_path / "ws")


def run(camp: dse.Campaign, proposals: Any, script: Any = None) -> tuple[
    dse.CampaignResult, Recording, dse.Store
]:
    clock = FakeClock()
    store = dse.Store(camp.workspace / "dse.sqlite")

    def default(params: Mapping[str, Any]) -> ProbeScript:
        return ProbeScript(metrics={"time": float(params["x"])})

    agent = Recording(proposals)
    result = dse.Engine(camp, agent=agent, store=store, clock=clock,
                        backend=ProbeBackend(script or default, clock=clock)).run()
    return result, agent, store


def everything(store: dse.Store) -> tuple[list[Trial], list[Score]]:
    """Every trial and every score of the workspace."""
    runs = store.reads.campaigns()
    return ([t for r in runs for t in store.reads.trials(r.id)],
            [score for r in runs for score in store.reads.scores(r.id)])


def flag_from_outside(camp: dse.Campaign, number: int) -> None:
    """Flag trial *number* as ``dse invalidate --trial`` from another shell would."""
    other = dse.Store(camp.workspace / "dse.sqlite")
    _, trial = other.reads.find_trial(f"inv:{number}")
    other.invalidate("trial", f"inv:{number}", "wrong GPU clocks", 1.0, trial_row=trial.id)
    other.close()


def flagging(
    camp: dse.Campaign, when_x: int, number: int, seconds: Mapping[int, float] | None = None
) -> Callable[[Mapping[str, Any]], ProbeScript]:
    """A probe script (metric ``time`` = x, running ``seconds[x]`` if given) that flags trial
    *number* from outside when the trial of x = *when_x* starts."""
    def script(params: Mapping[str, Any]) -> ProbeScript:
        if params["x"] == when_x:
            flag_from_outside(camp, number)
        return ProbeScript(metrics={"time": float(params["x"])},
                           seconds=(seconds or {}).get(params["x"]))

    return script


def test_invalidating_a_data_version_flags_trials_and_the_comparisons_that_used_them(
    tmp_path: Path,
) -> None:
    camp = campaign(tmp_path, scorer={"name": "ratio"}, baseline={"params": {"x": 50}})
    first, _, store = run(camp, [{"x": 10}, {"x": 20}])
    # A second run on other data compares against its own baseline, then reuses nothing.
    _second, _, store2 = run(campaign(tmp_path, "v2", scorer={"name": "ratio"},
                                     baseline={"params": {"x": 50}}), [{"x": 10}])
    store2.close()
    trials_before, scores_before = everything(store)
    done = store.invalidate("data_version", "v1", "the v1 export was truncated", 100.0)
    assert done is not None
    mark, trials, scores = done
    assert (trials, scores) == (3, 3)  # baseline + 2 trials of v1, and their 3 scores
    trials_after, scores_after = everything(store)
    flagged = {(t.campaign_id, t.number) for t in trials_after if t.invalidation == mark}
    assert flagged == {(first.campaign_id, 1), (first.campaign_id, 2), (first.campaign_id, 3)}
    # Nothing was deleted, and v2's results stay valid.
    assert (len(trials_after), len(scores_after)) == (len(trials_before), len(scores_before))
    assert sum(1 for score in scores_after if score.invalidation is None) == 2
    # Flagging again keeps the first reason; a version nobody ran matches nothing.
    repeat = store.invalidate("data_version", "v1", "another reason", 200.0)
    assert repeat is not None
    assert repeat[1:] == (0, 0)
    assert store.invalidate("data_version", "v9", "typo", 300.0) is None
    _, trial = store.reads.find_trial(f"{first.campaign_id}:2")
    reasons = {i.id: i.reason for i in store.reads.invalidations()}
    assert reasons[trial.invalidation] == "the v1 export was truncated"
    store.close()


def test_invalidating_a_baseline_flags_every_comparison_against_it(tmp_path: Path) -> None:
    camp = campaign(tmp_path, scorer={"name": "ratio"}, baseline={"params": {"x": 50}})
    result, _, store = run(camp, [{"x": 10}, {"x": 20}])
    (base,) = [t for t in store.reads.trials(result.campaign_id) if t.proposal == 0]
    done = store.invalidate("trial", "inv:1", "baseline machine was throttled", 1.0,
                            trial_row=base.id)
    assert done is not None
    assert done[1:] == (1, 3)  # one trial flagged; its own score and the two compared to it
    valid = [t.number for t in store.reads.trials(result.campaign_id) if t.invalidation is None]
    assert valid == [2, 3]  # their results stand; their scores do not
    store.close()


def test_invalid_results_are_never_reused_never_fed_and_are_re_run_as_linked_trials(
    tmp_path: Path,
) -> None:
    first, _, store = run(campaign(tmp_path), [{"x": 1}, {"x": 2}, {"x": 3}])
    assert store.invalidate("data_version", "v1", "labels were shuffled", 5.0) is not None
    store.close()
    # Same campaign, same data: without the flag all three would be cache hits.
    second, agent, store = run(campaign(tmp_path), [{"x": 1}, {"x": 2}, {"x": 4}])
    rows = store.reads.trials(second.campaign_id)
    assert [r.status for r in rows] == [dse.TrialStatus.COMPLETED] * 3
    assert all(r.cache_of is None for r in rows)
    old = {r.number: r.id for r in store.reads.trials(first.campaign_id)}
    assert [r.replaces for r in rows] == [old[1], old[2], None]
    assert [o.trial_number for o in agent.seen] == [1, 2, 3]
    assert [o.score for o in agent.seen] == [1.0, 2.0, 4.0]
    store.close()


def test_a_result_invalidated_while_the_campaign_runs_never_reaches_the_agent(
    tmp_path: Path,
) -> None:
    camp = campaign(tmp_path)

    script = flagging(camp, 2, 2)  # this very trial, while it runs
    result, agent, store = run(camp, [{"x": 5}, {"x": 2}, {"x": 3}], script)
    assert [o.trial_number for o in agent.seen] == [1, 3]
    rows = store.reads.trials(result.campaign_id)
    assert rows[1].status is dse.TrialStatus.COMPLETED
    assert rows[1].invalidation is not None
    # Trial 2 was the fastest, but an invalid result is never the best.
    assert result.best is not None
    assert result.best.number == 3
    (event,) = store.reads.events(result.campaign_id, "invalidated")
    assert event.data == {"trials": [2]}
    store.close()


def test_a_trial_invalidated_while_it_runs_is_reused_by_nothing(tmp_path: Path) -> None:
    # Trial 1 (x=2) runs long; trial 2 (x=2 again) waits to reuse it. While it runs, trial 1 is
    # flagged from another process; x=2 proposed after that is run afresh, not made a third
    # reuse of a result already known invalid, and trial 2's reuse never reaches the agent.
    camp = campaign(tmp_path, campaign={"name": "inv", "max_parallelism": 2, "mode": "rolling"})

    script = flagging(camp, 9, 1, seconds={2: 10.0, 9: 1.0})  # trial 1 (x=2), while it runs
    result, agent, store = run(camp, [{"x": 2}, {"x": 2}, {"x": 9}, {"x": 2}], script)
    rows = {r.number: r for r in store.reads.trials(result.campaign_id)}
    ids = {n: r.id for n, r in rows.items()}
    assert [(n, r.status.value, r.cache_of, r.replaces) for n, r in rows.items()] == [
        (1, "completed", None, None), (2, "cached", ids[1], None),
        (3, "completed", None, None), (4, "completed", None, ids[1]),
    ]
    assert {n for n, r in rows.items() if r.invalidation is not None} == {1, 2}
    assert [o.trial_number for o in agent.seen] == [3, 4]
    assert result.best is not None
    assert (result.best.number, result.best.score) == (4, 2.0)
    store.close()


def run_rebuildable(camp: dse.Campaign, proposals: Any, script: Any) -> tuple[
    dse.CampaignResult, list[Recording], dse.Store
]:
    """Run *camp* with an engine that can make its agent afresh; every agent it made, in order
    (the last is the one it ended with)."""
    agents: list[Recording] = []

    def make() -> Recording:
        agents.append(Recording(proposals))
        return agents[-1]

    clock = FakeClock()
    store = dse.Store(camp.workspace / "dse.sqlite")
    engine = dse.Engine(camp, agent=make(), agent_factory=make, store=store, clock=clock,
                        backend=ProbeBackend(script, clock=clock))
    result = engine.run()
    assert engine.agent is agents[-1]
    return result, agents, store


def test_with_a_factory_a_result_flagged_before_the_agent_heard_of_it_rebuilds_nothing(
    tmp_path: Path,
) -> None:
    # Flagged while it runs: dropped before it is told, so there is nothing to forget (a
    # rebuild would replay the whole record for nothing).
    camp = campaign(tmp_path)

    script = flagging(camp, 2, 2)
    result, agents, store = run_rebuildable(camp, [{"x": 5}, {"x": 2}, {"x": 3}], script)
    assert len(agents) == 1
    assert [o.trial_number for o in agents[0].seen] == [1, 3]
    assert store.reads.events(result.campaign_id, "agent_rebuilt") == []
    store.close()


def test_with_a_factory_an_agent_told_a_result_later_invalidated_is_rebuilt_without_it(
    tmp_path: Path,
) -> None:
    camp = campaign(tmp_path)

    script = flagging(camp, 3, 1)  # trial 1 ended and the agent was told
    result, agents, store = run_rebuildable(camp, [{"x": 5}, {"x": 2}, {"x": 3}, {"x": 4}],
                                            script)
    assert [o.trial_number for o in agents[0].seen][:2] == [1, 2]
    assert [o.trial_number for o in agents[-1].seen] == [2, 3, 4]
    rows = store.reads.trials(result.campaign_id)
    assert [r.params["x"] for r in rows] == [5, 2, 3, 4]
    assert len(store.reads.events(result.campaign_id, "agent_rebuilt")) == 1
    store.close()


def test_a_resumed_agent_is_rebuilt_without_the_invalidated_results(tmp_path: Path) -> None:
    camp = campaign(tmp_path, campaign={"name": "inv", "max_parallelism": 1,
                                        "max_trials": 2})
    first, agent, store = run(camp, [{"x": 1}, {"x": 2}, {"x": 3}])
    assert [o.trial_number for o in agent.seen] == [1, 2]
    _, trial = store.reads.find_trial("inv:1")
    store.invalidate("trial", "inv:1", "bad node", 1.0, trial_row=trial.id)
    # Make the run resumable (as after a crash) and resume it with a larger allowance.
    store.reopen_campaign(first.campaign_id)
    camp3 = campaign(tmp_path, campaign={"name": "inv", "max_parallelism": 1,
                                         "max_trials": 3})
    clock = FakeClock()
    again = Recording([{"x": 1}, {"x": 2}, {"x": 3}])
    engine = dse.Engine(camp3, agent=again, store=store, clock=clock,
                        backend=ProbeBackend(lambda p: ProbeScript(metrics={"time": p["x"]}),
                                             clock=clock))
    engine.run(resume=first.campaign_id)
    # The replay fed the agent trial 2 only; then it learned trial 3.
    assert [o.trial_number for o in again.seen] == [2, 3]
    store.close()


def test_dse_invalidate_flags_and_says_what_when_nothing_matches(tmp_path: Path) -> None:
    _first, _, store = run(campaign(tmp_path), [{"x": 1}, {"x": 2}])
    store.close()
    ws = str(tmp_path / "ws")
    proc = run_dse(tmp_path, "invalidate", "--data-version", "v0", "--reason", "typo",
                   "--workspace", ws)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("dse: error: dse invalidate --data-version v0: no trial"
                                   " with data version v0 in the record")
    proc = run_dse(tmp_path, "invalidate", "--trial", "inv:2", "--reason", "bad node",
                   "--workspace", ws, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["kind"], out["target"], out["trials"], out["scores"]) == (
        "trial", "inv:2", 1, 1)
    proc = run_dse(tmp_path, "report", "inv", "--workspace", ws)
    assert proc.returncode == 0, proc.stderr
    assert "INVALID      trials 2: bad node (not ranked)" in proc.stdout
    proc = run_dse(tmp_path, "show", "inv:2", "--workspace", ws)
    assert "INVALID" in proc.stdout
    assert "bad node (dse invalidate --trial inv:2" in proc.stdout
    proc = run_dse(tmp_path, "export", "inv", "--format", "json", "--workspace", ws)
    doc = json.loads(proc.stdout)
    assert [t["valid"] for t in doc["trajectory"]] == [True, False]
    record = doc["trials"][1]["concluded"]
    assert record["valid"] is False
    assert record["invalid"]["reason"] == "bad node"
    assert record["scores"][0]["invalid"]["reason"] == "bad node"
    assert doc["invalidations"][0]["reason"] == "bad node"


SCORER = '''
def neg(metrics, baseline):
    return -metrics["time"]

neg.direction = "maximize"
'''


def test_invalidating_a_scorer_version_flags_its_scores_not_the_results(
    tmp_path: Path,
) -> None:
    (tmp_path / "negscore.py").write_text(SCORER)
    camp = campaign(tmp_path, scorer={"name": "negscore:neg"})
    first, _, store = run(camp, [{"x": 3}, {"x": 1}])
    (version,) = {score.scorer_version for score in store.reads.scores(first.campaign_id)}
    done = store.invalidate("scorer_version", f"negscore:neg=={version}", "sign bug", 1.0)
    assert done is not None
    assert done[1:] == (0, 2)  # no result flagged; both scores are
    assert all(t.invalidation is None for t in store.reads.trials(first.campaign_id))
    # Only the scores are flagged, so the metrics are reused (scored afresh) in a new run,
    # and the agent of that run is told the fresh scores only.
    store.close()
    second, agent, store = run(campaign(tmp_path, scorer={"name": "negscore:neg"}),
                               [{"x": 3}, {"x": 5}])
    rows = store.reads.trials(second.campaign_id)
    assert [r.status.value for r in rows] == ["cached", "completed"]
    assert [(o.trial_number, o.score) for o in agent.seen] == [(1, -3.0), (2, -5.0)]
    _, scores = everything(store)
    assert sum(1 for score in scores if score.invalidation is None) == 2
    store.close()
