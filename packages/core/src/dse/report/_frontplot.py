"""The Pareto figures of ``dse report --html``, on the page of a run whose objectives are
optimised together (``[campaign] objectives = "pareto"``; :mod:`dse.report._front` reads its
fronts):

* **front**: the valid scored trials of the run's current data version (the last of its
  fronts), those on the front highlighted. Two objectives: one plane, the front joined by its
  attainment staircase, the area it dominates up to the reference point shaded (its
  hypervolume). Three: the three pairwise projections side by side; more: the pairwise
  projections of the first :data:`PROJECTED`.
* **hypervolume**: that front's hypervolume after each of its trials, against the trials in
  the order they ended and against the run's cumulative spend.

A run with no trial scored on every objective yet still has both figures, each saying so.
The colours are :mod:`dse.report._palette`'s (Okabe-Ito: told apart with the common colour-vision
deficiencies), never its yellow on white. :func:`staircase`, :func:`dominated_region` and
:func:`cumulative_spend` are pure; the drawers import matplotlib when called.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

from dse.report._palette import BLUE, GREY, SKY_BLUE, VERMILLION, better_label, cpu_unit, nothing

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse.report._front import Front

__all__ = ["FRONT", "FRONT_PLOTS", "HYPERVOLUME", "MEMBERS", "OTHERS", "PROJECTED", "REFERENCE",
           "STAIRCASE", "cumulative_spend", "dominated_region", "draw_front",
           "draw_hypervolume", "staircase"]

FRONT = "front"
"""The id of the front figure (``<img id="plot-front">``)."""
HYPERVOLUME = "hypervolume"
"""The id of the hypervolume figure (``<img id="plot-hypervolume">``)."""
FRONT_PLOTS = (FRONT, HYPERVOLUME)
"""The figures a Pareto run's page adds, in page order."""
PROJECTED = 4
"""With more than three objectives, the pairs of the first this many are drawn."""

MEMBERS = "front-members"
OTHERS = "front-others"
STAIRCASE = "front-staircase"
REFERENCE = "front-reference"
"""The ``gid`` of what :func:`draw_front` draws on each axes: the front's members, the trials
off it, the attainment staircase and the reference point (what a test looks the data up by)."""

_MEMBER = BLUE
_REFERENCE = VERMILLION
_AREA = SKY_BLUE
_OTHER = GREY

Point = tuple[float, float]


def _signs(front: Front) -> list[float]:
    return [-1.0 if direction == "maximize" else 1.0 for _, direction in front.objectives]


def _stairs(losses: Sequence[Point], ref: Point) -> list[Point]:
    """The attainment staircase of non-dominated *losses* (lower is better in both), from the
    reference's height down to its width where the reference lies beyond them."""
    ordered = sorted(set(losses))
    if not ordered:
        return []
    x0, y0 = ordered[0]
    out = [(x0, ref[1])] if ref[1] > y0 else []
    out.append((x0, y0))
    for (_, y), (nx, ny) in itertools.pairwise(ordered):
        out += [(nx, y), (nx, ny)]
    xn, yn = ordered[-1]
    if ref[0] > xn:
        out.append((ref[0], yn))
    return out


def _plane(front: Front) -> tuple[list[Point], Point, tuple[float, float]]:
    """The members of a two-objective front and its reference as losses, and the signs that
    turn them back into scores."""
    s0, s1 = _signs(front)
    losses = [(s0 * m.scores[0], s1 * m.scores[1]) for m in front.members]
    return losses, (s0 * front.reference[0], s1 * front.reference[1]), (s0, s1)


def staircase(front: Front) -> list[Point]:
    """The attainment staircase of a two-objective *front* in its objectives' units: through
    its members, best first objective first, each step to the next member's first score then
    down (or up, for a maximised objective) to its second; ends extended to the reference
    point where it lies beyond the front."""
    losses, ref, (s0, s1) = _plane(front)
    return [(s0 * x, s1 * y) for x, y in _stairs(losses, ref)]


def dominated_region(front: Front) -> list[Point]:
    """The polygon (in the objectives' units) of what a two-objective *front* dominates up to
    its reference point: its area is the hypervolume. Empty when no member is inside it."""
    losses, ref, (s0, s1) = _plane(front)
    inside = [p for p in losses if p[0] < ref[0] and p[1] < ref[1]]
    if not inside:
        return []
    return [(s0 * x, s1 * y) for x, y in [*_stairs(inside, ref), ref]]


def cumulative_spend(front: Front, attempts: Sequence[Mapping[str, Any]],
                     currency: str) -> tuple[list[float], str]:
    """What the whole run had spent when each trial of *front* ended, and its unit.

    *attempts* are the report's attempt dicts (``number``: the trial's, ``end``, ``money``,
    ``cpu_s``); every ended attempt counts, failed and other versions' ones too, up to the
    trial's end (ties by trial number, as the fronts order trials). Money in *currency* when
    the run spent any; else CPU time, in seconds, minutes or hours by the total."""
    money = sum(a["money"] for a in attempts) > 0
    ended = sorted((a["end"], a["number"], a["money"] if money else a["cpu_s"])
                   for a in attempts if a["end"] is not None)
    out: list[float] = []
    spent, i = 0.0, 0
    for t in front.trials:
        at = (t.ended_at if t.ended_at is not None else math.inf, t.number)
        while i < len(ended) and ended[i][:2] <= at:
            spent += ended[i][2]
            i += 1
        out.append(spent)
    if money:
        return out, currency
    scale, unit = cpu_unit(max(out, default=0.0))
    return [v / scale for v in out], unit


def _numbers(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.4g}" for v in values)


def _version(fronts: Sequence[Front]) -> str:
    front = fronts[-1]
    named = f"data version {front.version}" if front.version is not None else "the data"
    if len(fronts) == 1:
        return named
    return f"{named} (the last of {len(fronts)}; the earlier versions' trials are not drawn)"


def _off(count: int, on: int) -> str:
    return f"the {count - on} off it lighter" if count > on else "none off it"


def _nothing(fig: Any) -> str:
    nothing(fig, "no trial scored on every objective yet")
    return "No valid trial scored on every objective yet: no front to draw."


def _points(ax: Any, front: Front, i: int, j: int, *, legend: bool) -> None:
    others = [t.scores for t in front.trials if t.rank != 1]
    members = [t.scores for t in front.members]
    if others:
        ax.scatter([s[i] for s in others], [s[j] for s in others], s=14, color=_OTHER,
                   alpha=0.6, linewidths=0, gid=OTHERS, label=f"off the front ({len(others)})")
    ax.scatter([s[i] for s in members], [s[j] for s in members], s=36, color=_MEMBER,
               edgecolors="black", linewidths=0.6, zorder=3, gid=MEMBERS,
               label=f"on the front ({len(members)})")
    ax.scatter([front.reference[i]], [front.reference[j]], marker="X", s=70, color=_REFERENCE,
               zorder=4, gid=REFERENCE, label="reference point")
    ax.set_xlabel(better_label(*front.objectives[i]))
    ax.set_ylabel(better_label(*front.objectives[j]))
    if legend:
        ax.legend(loc="best", fontsize="small")


def draw_front(fig: Any, fronts: Sequence[Front]) -> str:
    """Draw the last of *fronts* (the run's current data version) on matplotlib figure
    *fig*; return the caption."""
    if not fronts:
        return _nothing(fig)
    front = fronts[-1]
    count, on = len(front.trials), len(front.members)
    names = [metric for metric, _ in front.objectives]
    where = _version(fronts)
    if len(names) == 2:
        ax = fig.subplots()
        region = dominated_region(front)
        if region:
            ax.fill(*zip(*region, strict=True), color=_AREA, alpha=0.25, linewidth=0)
        stairs = staircase(front)
        ax.plot(*zip(*stairs, strict=True), color=_MEMBER, linewidth=1.2, gid=STAIRCASE)
        _points(ax, front, 0, 1, legend=True)
        return (f"The Pareto front of {where}: {count} valid trials scored on both objectives,"
                f" the {on} on the front highlighted and joined by their attainment staircase,"
                f" {_off(count, on)}. The cross is the reference point"
                f" ({_numbers(front.reference)}); the shaded area, what the front dominates up"
                f" to it, is its hypervolume ({front.hypervolume:.4g}).")
    shown = min(len(names), PROJECTED)
    pairs = list(itertools.combinations(range(shown), 2))
    rows = 1 if len(pairs) <= 3 else 2
    if rows == 2:
        fig.set_size_inches(10, 7.5)
    axes = fig.subplots(rows, math.ceil(len(pairs) / rows), squeeze=False).ravel()
    for n, (ax, (i, j)) in enumerate(zip(axes, pairs, strict=True)):
        _points(ax, front, i, j, legend=n == 0)
    which = (f"all {len(names)} objectives" if shown == len(names)
             else f"the first {shown} of the {len(names)} objectives ({', '.join(names[shown:])}"
                  " not drawn)")
    return (f"The Pareto front of {where}, projected on each pair of {which}: {count} valid"
            f" trials scored on every objective, the {on} on the front (in all {len(names)})"
            f" highlighted, {_off(count, on)}; a member may look dominated in"
            f" one projection, being better in an objective it leaves out. The cross is the"
            f" reference point ({_numbers(front.reference)}); hypervolume"
            f" {front.hypervolume:.4g}.")


def draw_hypervolume(fig: Any, fronts: Sequence[Front], attempts: Sequence[Mapping[str, Any]],
                     currency: str) -> str:
    """Draw the hypervolume of the last of *fronts* after each of its trials, against the
    trials and against the run's spend (*attempts*, *currency*: see
    :func:`cumulative_spend`) on matplotlib figure *fig*; return the caption."""
    from matplotlib.ticker import MaxNLocator

    if not fronts:
        return _nothing(fig)
    front = fronts[-1]
    left, right = fig.subplots(1, 2, sharey=True)
    history = list(front.history)
    spend, unit = cumulative_spend(front, attempts, currency)
    units = " \N{MULTIPLICATION SIGN} ".join(metric for metric, _ in front.objectives)
    left.step(range(1, len(history) + 1), history, where="post", color=_MEMBER, marker=".")
    left.set_xlabel("valid scored trials, in the order they ended")
    left.set_ylabel(f"hypervolume ({units})")
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.step(spend, history, where="post", color=_MEMBER, marker=".")
    right.set_xlabel(f"the run's spend ({unit})")
    right.xaxis.set_major_locator(MaxNLocator(5))
    # From 0 on both axes, so a plateau reads as one; a run that spent nothing yet (or
    # reads as free) keeps a unit-wide axis instead of a degenerate one.
    right.set_xlim(0, 1.05 * max(spend, default=0.0) or 1.0)
    left.set_ylim(0, 1.05 * max(history, default=0.0) or 1.0)
    return (f"The hypervolume of the front of {_version(fronts)} (what its trials dominate"
            f" up to the reference point ({_numbers(front.reference)}), in {units}) after each"
            f" of its {len(history)} valid scored trials ended, against those trials and"
            f" against what the whole run had spent by then in {unit} (every attempt, failed"
            f" ones too); {front.hypervolume:.4g} at the end.")
