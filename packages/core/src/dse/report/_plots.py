"""The figures of ``dse report --html`` drawn from one run's trials and attempts: convergence,
timeline, cost and outcomes (parallel coordinates: :mod:`dse.report._parallel`), and the run as they
read it (:class:`RunData`, :func:`load_run`).

Each drawer takes a matplotlib figure (laid out by the caller: constrained layout) and the
run, draws, and returns the figure's caption. Colours are :mod:`dse.report._palette`'s; every time
axis is in the unit its span reads in.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse.model._errors import DseError
from dse.model._types import RESOLVED_SCORER
from dse.report._palette import (
    BLUE,
    GREEN,
    GREY,
    SKY_BLUE,
    VERMILLION,
    better_label,
    cpu_unit,
    hatch,
    nothing,
    state_colour,
    time_unit,
)
from dse.report._report import invalid_trials

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from dse.record._base import Storage
    from dse.record._records import Trial

__all__ = ["RunData", "convergence", "cost", "load_run", "log_ticks", "outcomes",
           "reused_note", "scored", "timeline", "wide_spread"]

_TICK_STEPS = [1, 2, 5, 10]
"""Time ticks at 1, 2 or 5 times a power of ten of the unit (no 2.5 minutes)."""


@dataclass(slots=True)
class RunData:
    """One run's trials and attempts as the figures read them (dicts, one per row)."""

    name: str
    run: int
    direction: str
    metric: str
    currency: str
    created: float
    status: str
    """The run's status when read (``running`` while it runs)."""
    now: float
    """When it was read: where a running attempt's bar ends."""
    space: list[dict[str, Any]]
    trials: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    spec: Mapping[str, Any] = field(default_factory=dict)
    priced: bool = False
    """Whether the run spent money (else its spend is read as CPU time)."""

    def spend_unit(self, cpu_seconds: float) -> tuple[float, str]:
        """How an attempt's ``cpu_s`` is scaled when unpriced, and the unit of the spend:
        the currency, or CPU time in the unit *cpu_seconds* reads in."""
        return (1.0, self.currency) if self.priced else cpu_unit(cpu_seconds)

    def spent(self, attempt: Mapping[str, Any], scale: float) -> float:
        """What *attempt* cost, in the run's spend unit (*scale*: :meth:`spend_unit`'s)."""
        return float(attempt["money"]) if self.priced else attempt["cpu_s"] / scale


def load_run(store: Storage, campaign_id: int, trials: Sequence[Trial] | None = None
             ) -> RunData:
    """Run *campaign_id* as the figures read it: all its trials, or *trials* of it (a
    sample of a large run, :meth:`dse.record._base.RecordPages.sample`) and their
    attempts."""
    row = store.reads.campaign(campaign_id)
    if row is None:
        raise DseError(f"{store.where}: no campaign run {campaign_id}")
    spec = row.spec
    objective = (spec.get("objectives") or [{}])[0]
    resolved = spec.get(RESOLVED_SCORER) or {}
    run = RunData(
        name=row.name, run=campaign_id,
        direction=str(resolved.get("direction") or objective.get("direction", "minimize")),
        metric=str(objective.get("metric", "score")),
        currency=str(spec.get("currency") or "USD"), created=float(row.created_at),
        status=str(row.status.value), now=time.time(),
        space=list(spec.get("space") or []), spec=spec,
    )
    invalid = invalid_trials(store, campaign_id)
    number_of: dict[int, int] = {}
    for t in store.reads.trials(campaign_id) if trials is None else trials:
        number_of[t.id] = t.number
        run.trials.append({
            "row": t.id, "number": t.number, "status": t.status.value,
            "failure": t.failure.value if t.failure is not None else None,
            "score": t.score, "params": t.params,
            "valid": t.id not in invalid, "ended": t.ended_at,
            "cached": t.cache_of is not None, "metrics": t.metrics or {},
        })
    attempts = store.reads.attempts(campaign_id, trials=None if trials is None
                                    else [t.id for t in trials])
    # By start (an attempt that never started first, as SQL orders NULL).
    attempts.sort(key=lambda a: (a.started_at is not None, a.started_at or 0.0))
    for a in attempts:
        spend = a.spend
        run.attempts.append({
            "number": number_of[a.trial_id], "state": a.state.value, "start": a.started_at,
            "end": a.ended_at, "money": float(spend.money) if spend is not None else 0.0,
            "cpu_s": float(spend.cpu_s) if spend is not None else 0.0, "node": a.node,
        })
    run.priced = any(a["money"] > 0 for a in run.attempts)
    return run


def scored(run: RunData) -> list[dict[str, Any]]:
    """Completed, valid, scored trials, in number order: those that ran and the cache hits
    reusing one (``t["cached"]``: drawn as reused; they are the run's results too, and a
    rerun's are all it has)."""
    return [t for t in run.trials if t["status"] in ("completed", "cached") and t["valid"]
            and t["score"] is not None and math.isfinite(t["score"])]


def reused_note(points: Sequence[Mapping[str, Any]]) -> str:
    """What a caption says of the cache hits among *points* (nothing when there is none)."""
    reused = sum(1 for t in points if t["cached"])
    if not reused:
        return ""
    every = "all" if reused == len(points) else f"{reused} of them"
    return (f" ({every} reused from the record: cache hits answered with an earlier"
            " trial's result, costing nothing)")


def wide_spread(values: Sequence[float]) -> bool:
    """Whether *values* read better on a log scale: all positive, over three decades or
    more, the middle half of them over one or more (not a few close to zero)."""
    ordered = sorted(values)
    if not ordered or ordered[0] <= 0 or ordered[-1] < 1000 * ordered[0]:
        return False
    return ordered[(3 * len(ordered)) // 4] >= 10 * ordered[len(ordered) // 4]


def log_ticks(axis: Any) -> None:
    """Label log *axis* (spanning three decades or more) at its decades in plain numbers
    (``0.01``, ``1``, ``1e+06``), not in TeX."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(numticks=8))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _time_axis(axis: Any, unit: str, since: str) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(nbins=8, steps=_TICK_STEPS))
    axis.set_label_text(f"{unit} since {since}")


def _best_so_far(run: RunData, values: Sequence[float]) -> list[float]:
    pick = max if run.direction == "maximize" else min
    out: list[float] = []
    for v in values:
        out.append(v if not out else pick(out[-1], v))
    return out


def convergence(fig: Any, run: RunData) -> str:
    """Every completed, valid trial's score and the best so far, against trial number and
    (when the run spent anything) against spend."""
    from matplotlib.ticker import MaxNLocator

    points = scored(run)
    if not points:
        nothing(fig, "no completed, valid trial yet")
        return "No completed, valid trial yet: no score to draw."
    cpu = sum(a["cpu_s"] for a in run.attempts)
    scale, unit = run.spend_unit(cpu)
    by_trial: dict[int, float] = {}
    for a in run.attempts:
        by_trial[a["number"]] = by_trial.get(a["number"], 0.0) + run.spent(a, scale)
    spent_by: dict[int, float] = {}
    total = 0.0
    for t in sorted(run.trials, key=lambda t: t["number"]):
        total += by_trial.get(t["number"], 0.0)
        spent_by[t["number"]] = total
    failed = [t["number"] for t in run.trials if t["status"] == "failed"]
    scores = [t["score"] for t in points]
    best = _best_so_far(run, scores)
    last = max(t["number"] for t in run.trials)
    panels: list[tuple[str, Callable[[int], float]]] = [("trial number", float)]
    if total > 0:
        panels.append((f"spent so far ({unit})", lambda n: spent_by[n]))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    log = wide_spread(scores)
    for ax, (label, where) in zip(axes, panels, strict=True):
        xs = [where(t["number"]) for t in points]
        ran = [(x, t["score"]) for x, t in zip(xs, points, strict=True) if not t["cached"]]
        reused = [(x, t["score"]) for x, t in zip(xs, points, strict=True) if t["cached"]]
        if ran:
            ax.scatter(*zip(*ran, strict=True), s=14, color=SKY_BLUE, edgecolors="none",
                       alpha=0.8, label=f"a trial ({len(ran)})", zorder=2)
        if reused:
            ax.scatter(*zip(*reused, strict=True), s=22, facecolors="none",
                       edgecolors=BLUE, linewidths=0.9, alpha=0.9,
                       label=f"reused, a cache hit ({len(reused)})", zorder=2)
        ax.step([*xs, where(last)], [*best, best[-1]], where="post", color=BLUE, linewidth=1.8,
                label="best so far", zorder=3)
        if failed:
            ax.plot([where(n) for n in failed], [0.02] * len(failed), linestyle="",
                    marker="|", markersize=9, color=VERMILLION, zorder=4,
                    transform=ax.get_xaxis_transform(), label=f"failed ({len(failed)})")
        ax.set_xlabel(label)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=label == "trial number"))
        if log:
            ax.set_yscale("log")
            log_ticks(ax.yaxis)
    axes[0].set_ylabel(better_label(run.metric, run.direction))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=len(handles),
               fontsize="small", frameon=False)
    against = " and against what the run had spent by then" if total > 0 else ""
    marks = (f"; the ticks along the bottom are the {len(failed)} trials that failed"
             if failed else "")
    return (f"The {run.metric} of each of the {len(points)} completed, valid trials (points"
            f"{'; hollow: reused' if any(t['cached'] for t in points) else ''})"
            f"{reused_note(points)} and the best so far ({run.direction}: the step line),"
            f" against trial number{against}{f' in {unit}' if against else ''}{marks}.")


def _lanes(attempts: Sequence[Mapping[str, Any]]) -> list[int]:
    """A slot for each attempt (in start order): the lowest one free when it started."""
    free: list[int] = []
    busy: list[tuple[float, int]] = []
    lanes = []
    count = 0
    for a in attempts:
        while busy and busy[0][0] <= a["start"]:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, count = count, count + 1
        heapq.heappush(busy, (a["end"], lane))
        lanes.append(lane)
    return lanes


def timeline(fig: Any, run: RunData) -> str:
    """Every attempt that started as a bar on the slot it held (one still running ends at
    the time the run was read), and every cache hit as a tick on a row of its own, when it
    was answered from the record."""
    from matplotlib.collections import PolyCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

    bars = [dict(a, end=a["end"] if a["end"] is not None else max(run.now, a["start"]),
                 state=a["state"] if a["end"] is not None else "running")
            for a in run.attempts if a["start"] is not None]
    hits = [t["ended"] for t in run.trials if t["cached"] and t["ended"] is not None]
    if not bars and not hits:
        nothing(fig, "no attempt started yet")
        return "No attempt started yet."
    ax = fig.subplots()
    lanes = _lanes(bars)
    t0 = min([*(a["start"] for a in bars), *hits])
    span = max([*(a["end"] for a in bars), *hits]) - t0
    scale, unit = time_unit(span)
    shown = sorted({a["state"] for a in bars}, key=lambda s: (s != "succeeded", s))
    for state in shown:
        verts = []
        for a, lane in zip(bars, lanes, strict=True):
            if a["state"] == state:
                x0, x1 = (a["start"] - t0) / scale, (a["end"] - t0) / scale
                verts.append([(x0, lane - 0.4), (x1, lane - 0.4), (x1, lane + 0.4),
                              (x0, lane + 0.4)])
        # Failures and interruptions are hatched too: told apart without their colour.
        ax.add_collection(PolyCollection(verts, facecolors=state_colour(state),
                                         edgecolors="white", linewidths=0, hatch=hatch(state)))
    handles: list[Any] = [Patch(facecolor=state_colour(s), edgecolor="white", hatch=hatch(s),
                                label=s) for s in shown]
    if hits:
        # A cache hit holds no slot: a tick on the row under them, when it was answered.
        ax.plot([(h - t0) / scale for h in hits], [-1.0] * len(hits), linestyle="",
                marker="|", markersize=14, color=BLUE)
        handles.append(Line2D([], [], linestyle="", marker="|", markersize=10, color=BLUE,
                              label="reused (cache hit)"))
    ax.autoscale_view()
    ax.set_xlim(left=0, right=max(span / scale, 1e-9) * 1.02 if not bars else None)
    top = max(lanes, default=0)
    ax.set_ylim(-1.6 if hits else -0.6, top + 0.6 if bars else -0.4)
    ticks = [v for v in MaxNLocator(integer=True, min_n_ticks=1).tick_values(0, top)
             if 0 <= v <= top] if bars else []
    ax.yaxis.set_major_locator(FixedLocator([-1.0, *ticks] if hits else ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(
        lambda v, _: "reused" if v < -0.5 else f"{v:.0f}"))
    _time_axis(ax.xaxis, unit, "the first attempt started" if bars else "the first cache hit")
    ax.set_ylabel("slot")
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    reused = (f"; {len(hits)} cache hit{'s' if len(hits) != 1 else ''} answered from the"
              " record (ticks on the row 'reused': they hold no slot)") if hits else ""
    if not bars:
        return (f"No attempt ran: the {len(hits)} trials were all answered from the record"
                f" (cache hits), over {span / scale:.3g} {unit}, each a tick when it was"
                " answered.")
    running = sum(1 for a in bars if a["state"] == "running")
    still = f", {running} still running (drawn up to now)" if running else ""
    slots = max(lanes) + 1
    return (f"{len(bars)} attempt{'s' if len(bars) != 1 else ''} on {slots}"
            f" slot{'s' if slots != 1 else ''}{still}, over"
            f" {span / scale:.3g} {unit}: an attempt takes the lowest slot free when it"
            " starts, so gaps are idle slots and steps are waves; failures and interruptions"
            f" are hatched{reused}.")


def _cost_events(run: RunData, scale: float) -> list[tuple[float, float, int]]:
    """``(when, spend, effective result)`` of every ended attempt and usable trial."""
    events: list[tuple[float, float, int]] = []
    for a in run.attempts:
        if a["end"] is not None:
            events.append((a["end"], run.spent(a, scale), 0))
    for t in run.trials:
        # A usable result, as the three numbers count them: completed or stopped at a rung.
        if (t["status"] in ("completed", "stopped") and t["valid"] and not t["cached"]
                and t["ended"] is not None):
            events.append((t["ended"], 0.0, 1))
    events.sort()
    return events


def cost(fig: Any, run: RunData) -> str:
    """What the run had spent and how many effective results it had, over its time."""
    from matplotlib.ticker import MaxNLocator

    scale, unit = run.spend_unit(sum(a["cpu_s"] for a in run.attempts))
    events = _cost_events(run, scale)
    hits = sorted(t["ended"] for t in run.trials if t["cached"] and t["valid"]
                  and t["status"] == "cached" and t["score"] is not None
                  and t["ended"] is not None)
    events += [(at, 0.0, 2) for at in hits]  # 2: a reused result
    events.sort()
    end = max(run.now, events[-1][0]) if run.status == "running" and events else (
        events[-1][0] if events else run.created)
    t_scale, t_unit = time_unit(end - run.created)
    xs, spend, results, reused = [0.0], [0.0], [0], [0]
    for at, spent, result in events:
        xs.append((at - run.created) / t_scale)
        spend.append(spend[-1] + spent)
        results.append(results[-1] + (result == 1))
        reused.append(reused[-1] + (result == 2))
    xs.append((end - run.created) / t_scale)
    spend.append(spend[-1])
    results.append(results[-1])
    reused.append(reused[-1])
    ax = fig.subplots()
    right = ax.twinx()
    handles = ax.step(xs, spend, where="post", color=BLUE, linewidth=1.8,
                      label=f"spent ({unit})")
    handles += right.step(xs, results, where="post", color=VERMILLION, linewidth=1.6,
                          linestyle="--", label="effective results")
    if hits:
        handles += right.step(xs, reused, where="post", color=GREEN, linewidth=1.6,
                              linestyle=":", label="reused results (cache hits, free)")
    ax.set_ylabel(f"spent ({unit})")
    right.set_ylabel("results" if hits else "effective results")
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0, top=1.05 * spend[-1] or 1.0)
    right.set_ylim(bottom=0, top=1.05 * max(results[-1], reused[-1]) or 1.0)
    ax.set_xlim(0, 1.02 * xs[-1] or 1.0)  # a step at the very end off the frame
    _time_axis(ax.xaxis, t_unit, "the run started")
    fig.legend(handles=handles, loc="outside upper center", ncols=len(handles),
               fontsize="small", frameon=False)
    per = (f"{spend[-1] / results[-1]:.3g} {unit} per effective result" if results[-1]
           else "no effective result yet")
    free = (f"; dotted: the {reused[-1]} results reused from the record, at no cost"
            if hits else "")
    return (f"What the run had spent in {unit} (solid, left axis: every ended attempt, failed"
            f" ones too) and its effective results (dashed, right axis: trials completed or"
            f" stopped at a rung, valid) over its {t_unit}: {spend[-1]:.3g} {unit} for"
            f" {results[-1]} effective results by the end drawn, {per}{free}.")


def outcomes(fig: Any, run: RunData) -> str:
    """Trials by outcome and failure class."""
    from matplotlib.ticker import MaxNLocator

    ax = fig.subplots()
    counts: dict[str, int] = {}
    colours: dict[str, str] = {}
    hatches: dict[str, str | None] = {}
    for t in run.trials:
        label = t["status"] if not t["failure"] else f"{t['status']}: {t['failure']}"
        colours[label], hatches[label] = state_colour(t["status"]), hatch(t["status"])
        if t["status"] in ("completed", "stopped") and not t["valid"]:
            label = f"{t['status']}: invalidated"
            colours[label], hatches[label] = GREY, "//"
        counts[label] = counts.get(label, 0) + 1
    labels = sorted(counts, key=lambda k: (-counts[k], k))
    fig.set_size_inches(10, 1.4 + 0.45 * max(len(labels), 2))
    for i, k in enumerate(labels):
        ax.barh(i, counts[k], color=colours[k], edgecolor="white", linewidth=0,
                hatch=hatches[k])
        ax.text(counts[k], i, f" {counts[k]}", va="center", fontsize="small")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("trials")
    ax.set_xlim(0, 1.1 * max(counts.values(), default=1))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return (f"{len(run.trials)} trials by outcome, with the failure class of each that"
            " failed; failures, interruptions and results found wrong are hatched.")
