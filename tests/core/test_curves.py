"""The learning curves of `dse report --html`: which trials are drawn, the points, stops and
promotions read from the record (``support.stopping``), and what the figure holds."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse._curves import BEST_DRAWN, CURVES_DRAWN, choose, draw_curves, learning_curves
from support.cli import run_dse, write_plugin
from support.stopping import MAX_STEP, PLAN, build, loss

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


def curves_of(tmp_path: Path) -> Any:
    run = build(tmp_path / "ws")
    store = dse.Store(tmp_path / "ws" / "dse.sqlite")
    try:
        spec = store.campaign(run).spec  # type: ignore[union-attr]
        trials = [{"row": t.id, "number": t.number, "status": t.status.value,
                   "score": t.score, "cached": t.cache_of is not None, "valid": True}
                  for t in store.trials(run)]
        return learning_curves(store, run, spec, trials)
    finally:
        store.close()


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


def test_the_figure_draws_a_line_per_trial_and_marks_each_decision(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.figure import Figure

    curves = curves_of(tmp_path)
    fig = Figure()
    caption = draw_curves(fig, curves)
    (ax,) = fig.axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("step", "loss (minimize)")
    (lines,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(lines.get_segments()) == sum(len(c.points) > 1 for c in curves.curves)
    stops, promotions = [c.get_offsets().tolist() for c in ax.collections
                         if isinstance(c, PathCollection)]
    assert sorted(map(tuple, stops)) == sorted(p for c in curves.curves for p in c.stops)
    assert sorted(map(tuple, promotions)) == [(1, loss(4, 1)), (1, loss(5, 1))]
    assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"] == [1, 3]
    assert "all 6 trials that ran" in caption
    assert "(5 stops, 2 promotions drawn)" in caption


def test_the_html_report_has_the_curves_only_for_a_run_that_has_them(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    write_plugin(tmp_path)
    build(tmp_path / ".dse")
    made = run_dse(tmp_path, "report", "es", "--html", "r.html", timeout=120)
    assert made.returncode == 0, made.stderr
    page = (tmp_path / "r.html").read_text()
    assert 'id="plot-curves"' in page
    assert re.search(r"Learning curves of all 6 trials that ran; 6 reported loss", page)
    assert "  rung 3       2 stopped, 0 promoted" in page
    (tmp_path / "plain.toml").write_text("""
[campaign]
name = "plain"
agent = "list"
backend = "probe"
[agent.list]
points = [{x = 1}]
[[objectives]]
metric = "value"
[space]
x = { type = "int", low = 0, high = 10 }
""")
    assert run_dse(tmp_path, "run", "plain.toml").returncode == 0
    made = run_dse(tmp_path, "report", "plain", "--html", "p.html", timeout=120)
    assert made.returncode == 0, made.stderr
    page = (tmp_path / "p.html").read_text()
    assert 'id="plot-outcomes"' in page
    assert 'id="plot-curves"' not in page


def test_a_stop_without_a_finite_value_is_marked_on_the_curve(tmp_path: Path) -> None:
    from dse._store import Batch

    build(tmp_path / "ws")
    store = dse.Store(tmp_path / "ws" / "dse.sqlite")
    try:
        batch = Batch()
        batch.add_decision(campaign=1, row=store.find_trial("es:6")[1].id, attempt=1,
                           rule="asha", version="1", verdict="stop", rung=2, step=2,
                           value=None, cutoff=1.0, peers=3, compared="[]", reason="NaN",
                           bracket=None, at=2.0)
        store.commit(batch)
        trials = [{"row": t.id, "number": t.number, "status": t.status.value,
                   "score": t.score, "cached": False, "valid": True} for t in store.trials(1)]
        curves = learning_curves(store, 1, store.campaign(1).spec,  # type: ignore[union-attr]
                                 trials)
    finally:
        store.close()
    assert curves is not None
    (six,) = [c for c in curves.curves if c.number == 6]
    assert six.stops == [(2, loss(6, 2))]
