"""The learning curves of `dse report --html`: which trials are drawn, the points, stops and
promotions read from the record (``support.stopping``), and what the figure holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dse
from dse.report._curves import BEST_DRAWN, CURVES_DRAWN, choose, learning_curves
from support.stopping import MAX_STEP, PLAN, build, curves_of, loss

if TYPE_CHECKING:
    from pathlib import Path


def trial(number: int, score: float | None, status: str = "stopped", *,
          cached: bool = False) -> dict[str, Any]:
    return {"number": number, "status": status, "score": score, "cached": cached,
            "valid": True}


def test_a_small_run_is_drawn_whole_but_its_cache_hits() -> None:
    trials = [trial(n, float(n)) for n in range(1, 11)] + [trial(11, 0.0, cached=True)]
    chosen, how = choose(trials, set(), maximize=False)
    assert [t["number"] for t in chosen] == list(range(1, 11))
    assert how == "all 10 trials that ran"


def test_a_large_run_is_sampled_keeping_the_promoted_and_the_best() -> None:
    trials = [trial(n, float(n % 977), "completed" if n % 3 else "stopped")
              for n in range(1, 5001)]
    promoted = {4000, 4500, 4999}
    chosen, how = choose(trials, promoted, maximize=False)
    numbers = {t["number"] for t in chosen}
    assert len(chosen) == CURVES_DRAWN
    assert promoted <= numbers
    best = sorted((t for t in trials if t["number"] not in promoted),
                  key=lambda t: (t["score"], t["number"]))[:BEST_DRAWN]
    assert {t["number"] for t in best} <= numbers
    assert how == (f"{CURVES_DRAWN} of the 5000 trials that ran (the 3 promoted, the best"
                   f" {BEST_DRAWN} by score, {CURVES_DRAWN - 3 - BEST_DRAWN} at random, seed 0,"
                   " of the rest)")
    # The same run gives the same sample; maximizing picks the other end.
    assert choose(trials, promoted, maximize=False)[0] == chosen
    top = {t["number"] for t in choose(trials, set(), maximize=True)[0]}
    highest = sorted(trials, key=lambda t: (-t["score"], t["number"]))[:BEST_DRAWN]
    assert {t["number"] for t in highest} <= top
    assert {t["number"] for t in best}.isdisjoint(t["number"] for t in highest)


def test_the_curves_hold_each_trials_points_stops_and_promotions(tmp_path: Path) -> None:
    curves = curves_of(tmp_path)
    assert (curves.metric, curves.direction, curves.rungs) == ("loss", "minimize", [1, 3])
    by_number = {c.number: c for c in curves.curves}
    assert sorted(by_number) == [p.number for p in PLAN]
    for plan in PLAN:
        c = by_number[plan.number]
        steps = [s for a in plan.attempts for s in a.steps]
        assert c.points == [(s, loss(plan.number, s)) for s in steps]
        assert c.stops == [(d.rung, loss(plan.number, d.rung)) for d in plan.decisions
                           if d.verdict == "stop"]
        assert c.promotions == [(d.rung, loss(plan.number, d.rung)) for d in plan.decisions
                                if d.verdict == "promote"]
    assert max(s for c in curves.curves for s, _ in c.points) == MAX_STEP


def test_a_stop_without_a_finite_value_is_marked_on_the_curve(tmp_path: Path) -> None:
    from dse.record._batch import Batch

    build(tmp_path / "ws")
    store = dse.Store(tmp_path / "ws" / "dse.sqlite")
    try:
        batch = Batch()
        batch.add_decision(campaign=1, row=store.reads.find_trial("es:6")[1].id, attempt=1,
                           rule="asha", version="1", verdict="stop", rung=2, step=2,
                           value=None, cutoff=1.0, peers=3, compared="[]", reason="NaN",
                           bracket=None, at=2.0)
        store.commit(batch)
        trials = [{"row": t.id, "number": t.number, "status": t.status.value,
                   "score": t.score, "cached": False, "valid": True} for t in store.reads.trials(1)]
        curves = learning_curves(store, 1, store.reads.campaign(1).spec,  # type: ignore[union-attr]
                                 trials)
    finally:
        store.close()
    assert curves is not None
    (six,) = [c for c in curves.curves if c.number == 6]
    assert six.stops == [(2, loss(6, 2))]
