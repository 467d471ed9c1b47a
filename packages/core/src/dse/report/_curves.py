"""The learning curves of ``dse report --html``: a run's trials' progress points (step against
the stopping metric), with where the stopping rule stopped a trial and where it promoted one,
and the rungs as guides.

A run of thousands of trials is drawn from a readable sample (:func:`choose`): every promoted
trial (up to :data:`PROMOTED_DRAWN`), the best :data:`BEST_DRAWN` by score, then a random
sample of the rest (seed 0) up to :data:`CURVES_DRAWN`; only the sample's points are read.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse.report._palette import BLUE, GREEN, GREY, ORANGE, VERMILLION

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse.record._base import Storage
    from dse.record._records import DecisionRow, ProgressRow

__all__ = ["BEST_DRAWN", "CURVES", "CURVES_DRAWN", "PROMOTED_DRAWN", "Curve", "Curves",
           "choose", "draw_curves", "learning_curves"]

CURVES = "curves"
"""The id of the learning-curves figure (``<img id="plot-curves">``), on the page of a run
with a stopping rule or a learning curve."""
CURVES_DRAWN = 200
"""At most this many trials' curves are drawn."""
BEST_DRAWN = 20
PROMOTED_DRAWN = 50

_COLOURS = {"completed": BLUE, "stopped": GREY}
_OTHER = ORANGE


@dataclass(slots=True)
class Curve:
    """One trial's learning curve and the decisions marked on it."""

    number: int
    status: str
    points: list[tuple[int, float]] = field(default_factory=list)
    """``(step, value)`` by attempt and step (a promoted trial's next attempt goes on)."""
    stops: list[tuple[int, float]] = field(default_factory=list)
    promotions: list[tuple[int, float]] = field(default_factory=list)
    """Where a stop was later undone: the rung's step and value it was promoted from."""


@dataclass(slots=True)
class Curves:
    """What the figure draws and what its caption says of the choice."""

    metric: str
    direction: str
    curves: list[Curve]
    rungs: list[int]
    ran: int
    """Trials that ran (not cache hits): what the sample was drawn from."""
    chosen: str
    """How the sample was chosen, in words."""
    links: list[tuple[tuple[int, float], tuple[int, float]]] = field(default_factory=list)
    """Population-based training: for each drawn trial made by an exploit, from its parent's
    point at the step its checkpoint was copied to its own first point (the lineage)."""


def choose(trials: Sequence[Mapping[str, Any]], promoted: set[int], *, maximize: bool,
           limit: int = CURVES_DRAWN) -> tuple[list[Mapping[str, Any]], str]:
    """The trials to draw (dicts with ``number``, ``status``, ``score``, ``cached``,
    ``valid``) and how they were chosen: the promoted ones (up to :data:`PROMOTED_DRAWN`),
    the best :data:`BEST_DRAWN` completed or stopped by score, a random sample (seed 0) of
    the rest; all of them when there are at most *limit*."""
    ran = [t for t in trials if not t["cached"]]
    if len(ran) <= limit:
        return ran, f"all {len(ran)} trials that ran"
    picked: dict[int, Mapping[str, Any]] = {}
    for t in ran:
        if t["number"] in promoted and len(picked) < PROMOTED_DRAWN:
            picked[t["number"]] = t
    n_promoted = len(picked)
    scored = [t for t in ran if t["score"] is not None and t["valid"] and math.isfinite(
        t["score"]) and t["status"] in ("completed", "stopped") and t["number"] not in picked]
    scored.sort(key=lambda t: (-t["score"] if maximize else t["score"], t["number"]))
    for t in scored[:BEST_DRAWN]:
        picked[t["number"]] = t
    n_best = len(picked) - n_promoted
    rest = [t for t in ran if t["number"] not in picked]
    for t in random.Random(0).sample(rest, min(len(rest), limit - len(picked))):
        picked[t["number"]] = t
    chosen = sorted(picked.values(), key=lambda t: t["number"])
    return chosen, (f"{len(chosen)} of the {len(ran)} trials that ran (the {n_promoted}"
                    f" promoted, the best {n_best} by score, {len(chosen) - n_promoted - n_best}"
                    " at random, seed 0, of the rest)")


def learning_curves(store: Storage, campaign_id: int, spec: Mapping[str, Any],
                    trials: Sequence[Mapping[str, Any]]) -> Curves | None:
    """The curves of run *campaign_id* (*trials*: the page's trial dicts, each with its
    ``row``), or ``None`` when it has no stopping rule and its sample reported no point."""
    stopping = spec.get("stopping") or {}
    objective = (spec.get("objectives") or [{}])[0]
    metric = str(stopping.get("metric") or objective.get("metric", "score"))
    direction = str(stopping.get("direction") or objective.get("direction", "minimize"))
    promoted = {d.number for d in store.stops.run_decisions(campaign_id, ("promote",))}
    chosen, how = choose(trials, promoted, maximize=direction == "maximize")
    rows = {t["row"]: t for t in chosen}
    progress = store.stops.trial_progress(rows)
    decisions: dict[int, list[DecisionRow]] = {}
    for d in store.stops.trial_decisions(rows):
        decisions.setdefault(d.trial_row, []).append(d)
    curves = [_curve(t, metric, progress.get(row, []), decisions.get(row, []))
              for row, t in rows.items()]
    curves = [c for c in curves if c.points or c.stops]
    rungs = sorted({rung for _, rung in store.stops.decision_counts(campaign_id)}
                   | {d.rung for found in decisions.values() for d in found})
    if stopping.get("rule") == "pbt":
        rungs = []  # a member is judged every interval from its own start: no rungs
    if not curves and not stopping:
        return None
    return Curves(metric, direction, curves, rungs, sum(1 for t in trials if not t["cached"]),
                  how, _links(store, campaign_id, metric, curves))


def _links(store: Storage, campaign_id: int, metric: str,
           curves: Sequence[Curve]) -> list[tuple[tuple[int, float], tuple[int, float]]]:
    """From each drawn child's parent's point at the copied step to the child's first."""
    drawn = {c.number: c for c in curves}
    lineage = [row for row in store.stops.lineage(campaign_id) if row.number in drawn]
    if not lineage:
        return []
    parents = store.stops.trial_progress({row.parent_row for row in lineage})
    out = []
    for row in lineage:
        child = drawn[row.number]
        at = {p.step: p.metrics.get(metric) for p in parents.get(row.parent_row, [])}
        value = at.get(row.parent_step)
        if child.points and isinstance(value, int | float) and math.isfinite(value):
            out.append(((row.parent_step, float(value)), child.points[0]))
    return out


def _curve(trial: Mapping[str, Any], metric: str, points: Sequence[ProgressRow],
           decisions: Sequence[DecisionRow]) -> Curve:
    curve = Curve(trial["number"], trial["status"])
    for p in points:
        value = p.metrics.get(metric)
        if isinstance(value, int | float) and math.isfinite(value):
            curve.points.append((p.step, float(value)))
    at = dict(curve.points)
    for d in decisions:
        # A value that was not a finite number (the worst, to the rule) has no place on the
        # axis: the mark goes on the curve's point at that step, if it has a finite one.
        value = d.value if d.value is not None else at.get(d.step)
        if value is None:
            continue
        if d.verdict in ("stop", "exploit"):
            curve.stops.append((d.step, value))
        elif d.verdict == "promote":
            curve.promotions.append((d.step, value))
    return curve


def draw_curves(fig: Any, curves: Curves) -> str:
    """Draw *curves* on matplotlib figure *fig*; return the caption."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    ax = fig.subplots()
    lines = [c.points for c in curves.curves if len(c.points) > 1]
    colours = [_COLOURS.get(c.status, _OTHER) for c in curves.curves if len(c.points) > 1]
    ax.add_collection(LineCollection(lines, colors=colours, linewidths=0.9, alpha=0.55))
    for c in curves.curves:
        if len(c.points) == 1:
            ax.plot(*c.points[0], marker=".", color=_COLOURS.get(c.status, _OTHER))
    stops = [p for c in curves.curves for p in c.stops]
    promotions = [p for c in curves.curves for p in c.promotions]
    if stops:
        ax.scatter(*zip(*stops, strict=True), marker="x", color=VERMILLION, zorder=3, s=30)
    if promotions:
        ax.scatter(*zip(*promotions, strict=True), marker="^", facecolors="none",
                   edgecolors=GREEN, zorder=4, s=70, linewidths=1.5)
    if curves.links:
        ax.add_collection(LineCollection([list(link) for link in curves.links], colors=GREEN,
                                         linewidths=1.0, linestyles="dashed", zorder=2))
    steps = [s for c in curves.curves for s, _ in c.points] + curves.rungs
    if steps and min(steps) >= 1 and max(steps) >= 10 * min(steps):
        ax.set_xscale("log")
    for rung in curves.rungs:
        ax.axvline(rung, color="#757575", linestyle=":", linewidth=1)
        ax.annotate(f"rung {rung}", (rung, 1.0), xycoords=("data", "axes fraction"),
                    rotation=90, va="top", ha="right", fontsize="x-small", color="#616161")
    ax.autoscale_view()
    ax.set_xlabel("step")
    ax.set_ylabel(f"{curves.metric} ({curves.direction})")
    handles = [Line2D([], [], color=colour, label=f"ended {status}")
               for status, colour in _COLOURS.items()]
    handles += [Line2D([], [], color=_OTHER, label="other outcome"),
                Line2D([], [], marker="x", linestyle="", color=VERMILLION, label="stopped here"),
                Line2D([], [], marker="^", linestyle="", markerfacecolor="none",
                       color=GREEN, label="promoted from here")]
    if curves.links:
        handles.append(Line2D([], [], color=GREEN, linestyle="dashed",
                              label="started from a copy of"))
    # Beside the axes: inside, it could cover a rung's label.
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    drawn = len(curves.curves)
    return (f"Learning curves of {curves.chosen}; {drawn} reported {curves.metric}:"
            f" step against {curves.metric}, one line per trial, coloured by"
            f" how it ended. A cross marks where the stopping rule stopped a trial, a triangle"
            f" a stop it undid later (the trial was promoted and resumed from its checkpoint);"
            f" dotted lines are the rungs ({len(stops)} stops, {len(promotions)} promotions"
            " drawn)." + (f" A dashed line joins a trial made by population-based training to"
                          f" the point of the trial whose checkpoint it started from"
                          f" ({len(curves.links)} drawn)." if curves.links else ""))
