"""Pareto campaigns (``[campaign] objectives = "pareto"``) through the real engine: every
trial scored on each objective, the vector recorded and told to the agent, and the front per
data version as `dse report` reads it from the record (so an invalidation changes it)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.model._pareto import dominates
from dse.report._front import pareto_fronts
from dse.report._render import detail_json, detail_lines
from dse.report._report import run_detail
from dse.testing import FakeClock, ProbeBackend, ProbeScript
from support.recording import Recording

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

OBJECTIVES = [{"metric": "time"}, {"metric": "acc", "direction": "maximize"}]


def campaign(tmp_path: Path, objectives: Any = None, **extra: Any) -> dse.Campaign:
    top = {"name": "mo", "max_parallelism": 2, "mode": "rolling", "objectives": "pareto",
           **extra.pop("campaign", {})}
    doc: dict[str, Any] = {
        "campaign": top,
        "space": {"x": {"type": "int", "low": 0, "high": 100}},
        "objectives": OBJECTIVES if objectives is None else objectives,
        **extra,
    }
    return dse.campaign_from_dict(doc, source=tmp_path / "mo.toml", workspace=tmp_path / "ws")


def measured(params: Mapping[str, Any]) -> ProbeScript:
    """time and acc trade off: acc grows with x, time too, except where x % 7 == 0 (slow)."""
    x = params["x"]
    return ProbeScript(seconds=1.0 + x % 3, metrics={
        "time": float(x) + (50.0 if x % 7 == 0 else 0.0), "acc": float(x // 2)})


def run(
    camp: dse.Campaign, proposals: list[dict[str, Any]],
    script: Callable[[Mapping[str, Any]], ProbeScript] = measured,
    store: dse.Store | None = None,
) -> tuple[dse.CampaignResult, Recording, dse.Store]:
    clock = FakeClock()
    store = store or dse.Store(camp.workspace / "dse.sqlite")
    agent = Recording(proposals)
    engine = dse.Engine(camp, agent=agent, store=store, clock=clock,
                        backend=ProbeBackend(script, clock=clock))
    return engine.run(), agent, store


def front_numbers(store: dse.Store, run_id: int) -> list[list[int]]:
    spec = store.reads.campaign(run_id).spec  # type: ignore[union-attr]
    return [sorted(m.number for m in f.members) for f in pareto_fronts(store, run_id, spec)]


XS = [1, 2, 3, 7, 14, 9, 10, 11, 20, 21, 30, 33]


def test_a_maximised_and_a_minimised_objective_the_front_is_exactly_the_undominated(
    tmp_path: Path,
) -> None:
    result, agent, store = run(campaign(tmp_path), [{"x": x} for x in XS])
    rows = {r.number: r for r in store.reads.trials(result.campaign_id)}
    assert all(r.status is dse.TrialStatus.COMPLETED for r in rows.values())
    # Each trial's vector: its score of each objective, in their order and own units.
    for r in rows.values():
        assert r.scores == (r.metrics["time"], r.metrics["acc"])  # type: ignore[index]
        assert r.score == r.scores[0]  # type: ignore[index]
    # The agent is told the vector, and the losses (acc negated: lower is better).
    told = {o.trial_number: o for o in agent.seen}
    assert told[5].scores == (64.0, 7.0)
    assert told[5].losses == (64.0, -7.0)
    assert [o.metric for o in told[5].objectives] == ["time", "acc"]
    losses = {n: (r.metrics["time"], -r.metrics["acc"]) for n, r in rows.items()}  # type: ignore[index]
    expected = sorted(n for n, v in losses.items()
                      if not any(dominates(w, v) for w in losses.values()))
    assert front_numbers(store, result.campaign_id) == [expected]
    # x = 7, 14, 21 are slow: dominated, never on the front.
    numbers = {r.params["x"]: n for n, r in rows.items()}
    assert not {numbers[7], numbers[14], numbers[21]} & set(expected)
    doc = detail_json(run_detail(store, result.campaign_id))
    pareto = doc["pareto"]
    assert pareto["objectives"] == [{"metric": "time", "direction": "minimize"},
                                    {"metric": "acc", "direction": "maximize"}]
    (front,) = pareto["fronts"]
    assert sorted(m["trial"] for m in front["members"]) == expected
    assert front["trials"] == len(XS)
    assert [t for t, _ in front["hypervolume_by_trial"]] == sorted(
        rows, key=lambda n: (rows[n].ended_at, n))
    hv = [v for _, v in front["hypervolume_by_trial"]]
    assert hv == sorted(hv)
    assert hv[-1] == pytest.approx(front["hypervolume"])
    assert hv[-1] > 0
    text = "\n".join(detail_lines(run_detail(store, result.campaign_id)))
    assert f"{len(expected)} of {len(XS)} trials on the Pareto front" in text
    store.close()


def test_ties_are_all_on_the_front_and_a_cache_hit_is_listed_once(tmp_path: Path) -> None:
    def tied(params: Mapping[str, Any]) -> ProbeScript:
        return ProbeScript(metrics={"time": 1.0, "acc": 1.0})

    result, _, store = run(campaign(tmp_path), [{"x": 1}, {"x": 2}, {"x": 1}], script=tied)
    statuses = [r.status.value for r in store.reads.trials(result.campaign_id)]
    assert statuses == ["completed", "completed", "cached"]
    assert front_numbers(store, result.campaign_id) == [[1, 2]]
    store.close()


def test_a_new_data_version_starts_a_front_of_its_own(tmp_path: Path) -> None:
    def versioned(params: Mapping[str, Any]) -> ProbeScript:
        x = params["x"]
        return ProbeScript(metrics={"time": float(x), "acc": float(x)},
                           data_version="v2" if x >= 50 else "v1")

    camp = campaign(tmp_path, data={"version": "v1"})
    result, _, store = run(camp, [{"x": x} for x in (10, 20, 60, 70)], script=versioned)
    spec = store.reads.campaign(result.campaign_id).spec  # type: ignore[union-attr]
    fronts = pareto_fronts(store, result.campaign_id, spec)
    assert [f.version for f in fronts] == ["v1", "v2"]
    # Each version's trials ranked on their own: the v1 trials do not dominate the v2 ones.
    assert [sorted(m.number for m in f.members) for f in fronts] == [[1, 2], [3, 4]]
    assert [len(f.trials) for f in fronts] == [2, 2]
    store.close()


def test_invalidating_a_front_member_takes_it_off_the_front(tmp_path: Path) -> None:
    # x = 10 (time 10, acc 5) dominates x = 11 (time 11, acc 5); 12 and 30 trade off.
    result, _, store = run(campaign(tmp_path), [{"x": x} for x in (10, 12, 11, 30)])
    assert front_numbers(store, result.campaign_id) == [[1, 2, 4]]
    _, member = store.reads.find_trial("mo:2")
    assert store.invalidate("trial", "mo:2", "bad node", 1.0, trial_row=member.id) is not None
    assert front_numbers(store, result.campaign_id) == [[1, 4]]
    doc = detail_json(run_detail(store, result.campaign_id))
    (front,) = doc["pareto"]["fronts"]
    assert [m["trial"] for m in front["members"]] == [1, 4]
    assert front["trials"] == 3
    store.close()


def test_invalidating_the_member_that_dominated_a_trial_puts_that_trial_on(
    tmp_path: Path,
) -> None:
    def scripted(params: Mapping[str, Any]) -> ProbeScript:
        table = {1: (1.0, 5.0), 2: (2.0, 4.0), 3: (5.0, 9.0)}  # 1 dominates 2
        time, acc = table[params["x"]]
        return ProbeScript(metrics={"time": time, "acc": acc})

    result, _, store = run(campaign(tmp_path), [{"x": 1}, {"x": 2}, {"x": 3}], script=scripted)
    assert front_numbers(store, result.campaign_id) == [[1, 3]]
    _, first = store.reads.find_trial("mo:1")
    store.invalidate("trial", "mo:1", "wrong clocks", 1.0, trial_row=first.id)
    assert front_numbers(store, result.campaign_id) == [[2, 3]]
    store.close()


def test_what_a_trial_cost_is_an_objective(tmp_path: Path) -> None:
    camp = campaign(tmp_path, objectives=[{"metric": "time"}, {"metric": "spend.wall_s"}])
    result, agent, store = run(camp, [{"x": x} for x in (1, 2, 3, 4)])
    for r in store.reads.trials(result.campaign_id):
        metrics = r.metrics or {}
        # The probe runs 1 + x % 3 seconds of its clock: what the attempt was charged.
        assert metrics["spend.wall_s"] == pytest.approx(1.0 + r.params["x"] % 3)
        assert r.scores == (metrics["time"], metrics["spend.wall_s"])
    assert all(o.scores is not None for o in agent.seen)
    store.close()


def test_a_function_scorer_gives_every_score_or_the_trial_fails_scorer_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "moscore.py").write_text(
        "def both(metrics, baseline):\n"
        "    return {'time': metrics['time'] * 2, 'acc': metrics['acc'] + 1}\n"
        "def one(metrics, baseline):\n"
        "    return metrics['time']\n"
        "def partial(metrics, baseline):\n"
        "    return {'time': 1.0, 'acc': float('nan')}\n"
    )
    result, _, store = run(campaign(tmp_path, scorer={"name": "moscore:both"}), [{"x": 4}])
    (row,) = store.reads.trials(result.campaign_id)
    assert row.scores == (8.0, 3.0)
    (given,) = store.reads.scores(result.campaign_id)
    assert (given.scorer, given.scores) == ("moscore:both", (8.0, 3.0))
    store.close()
    for name, said in (("one", "returned 4.0; in a Pareto campaign"),
                       ("partial", "gave 'acc' nan, not a finite number")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "moscore.py").write_text((tmp_path / "moscore.py").read_text())
        camp = campaign(tmp_path / name, scorer={"name": f"moscore:{name}"})
        result, _, store = run(camp, [{"x": 4}])
        (row,) = store.reads.trials(result.campaign_id)
        assert row.status is dse.TrialStatus.FAILED
        assert row.failure is dse.FailureClass.SCORER_ERROR
        assert said in (row.message or "")
        store.close()


def test_the_ratio_scorer_scores_each_objective_against_the_baseline(tmp_path: Path) -> None:
    camp = campaign(tmp_path, scorer={"name": "ratio"}, baseline={"params": {"x": 20}})
    result, _, store = run(camp, [{"x": 40}])
    rows = {r.params["x"]: r for r in store.reads.trials(result.campaign_id)}
    assert rows[40].scores == pytest.approx((40.0 / 20.0, 20.0 / 10.0))
    store.close()


@pytest.mark.parametrize(("change", "said"), [
    ({"objectives": [{"metric": "time"}]}, "give two or more [[objectives]]"),
    ({"campaign": {"objectives": "all"}}, "campaign.objectives: expected 'pareto' or 'first'"),
    ({"objectives": [{"metric": "time"}, {"metric": "spend.hours"}]},
     "objectives[1].metric: unknown spend metric 'spend.hours'"),
    ({"objectives": [{"metric": "time"}, {"metric": "time"}]},
     "objectives[1].metric: 'time' is an objective already"),
    ({"objectives": [{"metric": "time", "reference": "far"}, {"metric": "acc"}]},
     "objectives[0].reference: expected a number"),
    ({"objectives": [{"metric": "time", "reference": math.inf}, {"metric": "acc"}]},
     "objectives[0].reference: expected a finite number"),
    ({"scorer": {"name": "default", "direction": "maximize"}}, "remove scorer.direction"),
])
def test_a_bad_pareto_campaign_is_one_error_naming_the_key(
    tmp_path: Path, change: dict[str, Any], said: str,
) -> None:
    with pytest.raises(dse.ConfigError) as caught:
        campaign(tmp_path, **change)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_given_reference_point_bounds_the_hypervolume(tmp_path: Path) -> None:
    objectives = [{"metric": "time", "reference": 100.0},
                  {"metric": "acc", "direction": "maximize", "reference": 0.0}]
    result, _, store = run(campaign(tmp_path, objectives=objectives), [{"x": 10}])
    doc = detail_json(run_detail(store, result.campaign_id))
    (front,) = doc["pareto"]["fronts"]
    assert front["reference"] == {"time": 100.0, "acc": 0.0}
    # One point, time 10 and acc 5: a box of (100 - 10) x (5 - 0).
    assert front["hypervolume"] == pytest.approx(90.0 * 5.0)
    run_row = store.reads.campaign(result.campaign_id)
    assert run_row is not None
    assert run_row.spec["pareto"] is True
    assert json.dumps(doc)  # the report is JSON throughout
    store.close()


def test_a_single_objective_run_has_no_front(tmp_path: Path) -> None:
    camp = campaign(tmp_path, campaign={"objectives": "first"})
    result, agent, store = run(camp, [{"x": 1}])
    assert detail_json(run_detail(store, result.campaign_id))["pareto"] is None
    (row,) = store.reads.trials(result.campaign_id)
    assert row.scores is None
    assert agent.seen[0].scores is None
    assert agent.seen[0].losses is None
    store.close()


def test_the_live_front_follows_results_invalidations_and_a_resume(tmp_path: Path) -> None:
    def scripted(params: Mapping[str, Any]) -> ProbeScript:
        table = {1: (1.0, 5.0), 2: (2.0, 4.0), 3: (5.0, 9.0), 4: (3.0, 9.0)}
        time, acc = table[params["x"]]
        return ProbeScript(metrics={"time": time, "acc": acc})

    camp = campaign(tmp_path, campaign={"max_trials": 3})
    result, _, store = run(camp, [{"x": 1}, {"x": 2}, {"x": 3}], script=scripted)
    # 1 dominates 2 (faster and more accurate); 3 is the most accurate.
    assert sorted(result.stats.front) == [1, 3]
    assert result.stats.front[3] == (5.0, -9.0)  # losses: acc negated
    _, first = store.reads.find_trial("mo:1")
    store.invalidate("trial", "mo:1", "wrong clocks", 1.0, trial_row=first.id)
    # A resumed run reads the front back from the record, without the invalidated trial,
    # and takes in a new result that dominates trial 3 at equal accuracy.
    store.reopen_campaign(result.campaign_id)
    again = campaign(tmp_path, campaign={"max_trials": 4})
    clock = FakeClock()
    engine = dse.Engine(again, agent=Recording([{"x": 1}, {"x": 2}, {"x": 3}, {"x": 4}]),
                        store=store, clock=clock,
                        backend=ProbeBackend(scripted, clock=clock))
    resumed = engine.run(resume=result.campaign_id)
    assert sorted(resumed.stats.front) == [2, 4]
    store.close()


def test_the_live_view_shows_the_front_not_a_best(tmp_path: Path) -> None:
    import io

    from rich.console import Console as RichConsole

    from dse.launch._console import LiveView
    from dse.report._terminal import Console

    frames: list[str] = []

    class Frames(LiveView):
        def on_pass(self, engine: Any) -> None:
            screen = RichConsole(file=io.StringIO(), width=120, record=True)
            screen.print(self._render(engine))
            frames.append(screen.export_text())

    console = Console()
    console.out = console.err = RichConsole(file=io.StringIO(), force_terminal=True, width=120)
    clock = FakeClock()
    camp = campaign(tmp_path, campaign={"max_parallelism": 1})
    engine = dse.Engine(camp, agent=Recording([{"x": x} for x in (10, 12, 11, 30)]),
                        store=dse.Store(camp.workspace / "dse.sqlite"), clock=clock,
                        backend=ProbeBackend(measured, clock=clock), listener=Frames(console))
    engine.run()
    # x = 11 is dominated by x = 10: the front is trials 1, 2 and 4.
    assert "front of 3: trials 1-2, 4" in frames[-1]
    assert "best so far" not in frames[-1]
