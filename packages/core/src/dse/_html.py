"""``dse report --html``: one self-contained HTML file with the console report and its plots.

The plots are drawn by matplotlib (the optional extra ``dse-core[report]``) as PNG images
embedded in the page, so the file opens anywhere without a network and stays a few hundred
kilobytes whatever the number of trials:

* **convergence**: the best score so far against trials and against spend;
* **timeline**: every attempt as a bar on the slot it held (waves and backfill visible);
* **parameters**: parallel coordinates of the trials' params, coloured by score;
* **cost**: cost per effective result over the run's time;
* **outcomes**: trials by outcome and failure class;
* **curves** (a run with a stopping rule or learning curves, :mod:`dse._curves`): the trials'
  learning curves with the stopping rule's stops and promotions.

A Pareto run (``[campaign] objectives = "pareto"``) has two more, first on its page (the plots
above rank its trials by the first objective alone), drawn by :mod:`dse._frontplot` from the
fronts :mod:`dse._front` reads:

* **front**: the current data version's trials, those on the Pareto front highlighted (two
  objectives: with the attainment staircase, the reference point and the hypervolume's area;
  more: pairwise projections);
* **hypervolume**: the front's hypervolume against trials and against spend.

A Pareto run with no trial scored on every objective yet has both, each saying so.
"""

from __future__ import annotations

import base64
import heapq
import html
import io
import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse._curves import CURVES, draw_curves, learning_curves
from dse._errors import DseError
from dse._front import pareto_fronts, pareto_objectives
from dse._frontplot import FRONT, FRONT_PLOTS, HYPERVOLUME, draw_front, draw_hypervolume
from dse._render import detail_lines, rollup_line
from dse._report import invalid_trials, rollup_by_objective, run_detail
from dse._types import RESOLVED_SCORER

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from pathlib import Path

    from dse._front import Front
    from dse._report import RunDetail
    from dse._store import Store

__all__ = ["PLOTS", "render_html", "write_html_report"]

PLOTS = ("convergence", "timeline", "parameters", "cost", "outcomes")
"""The figures every report has, in page order (each an ``<img id="plot-NAME">``)."""

LINES_DRAWN = 5000
"""Parallel coordinates draw at most this many trials (the best 100 always among them)."""

_STATE_COLOURS = {
    "succeeded": "#2e7d32", "failed": "#c62828", "timeout": "#ef6c00",
    "out_of_memory": "#6a1b9a", "cancelled": "#9e9e9e",
}
_OTHER_COLOUR = "#f9a825"  # interruptions: preempted, node_fail, lost, killed...


@dataclass(slots=True)
class _Run:
    name: str
    run: int
    direction: str
    metric: str
    currency: str
    created: float
    space: list[dict[str, Any]]
    trials: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    spec: Mapping[str, Any] = field(default_factory=dict)


def _load(store: Store, campaign_id: int) -> _Run:
    row = store.campaign(campaign_id)
    if row is None:
        raise DseError(f"{store.path}: no campaign run {campaign_id}")
    spec = row.spec
    objective = (spec.get("objectives") or [{}])[0]
    resolved = spec.get(RESOLVED_SCORER) or {}
    run = _Run(
        name=row.name, run=campaign_id,
        direction=str(resolved.get("direction") or objective.get("direction", "minimize")),
        metric=str(objective.get("metric", "score")),
        currency=str(spec.get("currency") or "USD"), created=float(row.created_at),
        space=list(spec.get("space") or []), spec=spec,
    )
    invalid = invalid_trials(store, campaign_id)
    number_of: dict[int, int] = {}
    for t in store.trials(campaign_id):
        number_of[t.id] = t.number
        run.trials.append({
            "row": t.id, "number": t.number, "status": t.status.value,
            "failure": t.failure.value if t.failure is not None else None,
            "score": t.score, "params": t.params,
            "valid": t.id not in invalid, "ended": t.ended_at,
            "cached": t.cache_of is not None,
        })
    attempts = store.attempts(campaign_id)
    # By start (an attempt that never started first, as SQL orders NULL).
    attempts.sort(key=lambda a: (a.started_at is not None, a.started_at or 0.0))
    for a in attempts:
        spend = a.spend
        run.attempts.append({
            "number": number_of[a.trial_id], "state": a.state.value, "start": a.started_at,
            "end": a.ended_at, "money": float(spend.money) if spend is not None else 0.0,
            "cpu_s": float(spend.cpu_s) if spend is not None else 0.0,
        })
    return run


def render_html(store: Store, campaign_id: int, out: Path, report_lines: Sequence[str], *,
                fronts: Sequence[Front] | None = None) -> Path:
    """Write the HTML report of run *campaign_id* to *out*: *report_lines* (the console
    report) and the plots; *fronts*: a Pareto run's fronts when the caller has them read
    (:attr:`RunDetail.fronts`), else read here. Needs matplotlib (``pip install
    'dse-core[report]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DseError(
            "dse report --html draws its plots with matplotlib, which is not installed:"
            " pip install 'dse-core[report]'"
        ) from None
    run = _load(store, campaign_id)
    drawers: dict[str, tuple[str, Callable[[Any, _Run], str]]] = {
        "convergence": ("Convergence", _convergence),
        "timeline": ("Timeline of attempts per slot", _timeline),
        "parameters": ("Parameters (parallel coordinates)", _parameters),
        "cost": ("Cost per effective result", _cost),
        "outcomes": ("Outcomes and failure classes", _outcomes),
    }
    keys: list[str] = list(PLOTS)
    if pareto_objectives(run.spec) is not None:
        read = list(fronts) if fronts is not None else pareto_fronts(store, campaign_id,
                                                                      run.spec)
        drawers[FRONT] = ("Pareto front", lambda fig, _: draw_front(fig, read))
        drawers[HYPERVOLUME] = ("Hypervolume", lambda fig, r: draw_hypervolume(
            fig, read, r.attempts, r.currency))
        keys[:0] = FRONT_PLOTS
    curves = learning_curves(store, campaign_id, run.spec, run.trials)
    if curves is not None:
        drawers[CURVES] = ("Learning curves, stops and promotions",
                           lambda fig, _: draw_curves(fig, curves))
        keys.append(CURVES)
    figures = []
    for key in keys:
        title, draw = drawers[key]
        fig = plt.figure(figsize=(10, 4.2), dpi=100)
        caption = draw(fig, run)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", bbox_inches="tight")
        plt.close(fig)
        data = base64.b64encode(buffer.getvalue()).decode("ascii")
        figures.append(
            f'<figure><h2>{html.escape(title)}</h2><img id="plot-{key}" alt="{html.escape(title)}"'
            f' src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}'
            "</figcaption></figure>"
        )
    title = f"dse report: {run.name} run {run.run}"
    page = _PAGE.format(
        title=html.escape(title), report=html.escape("\n".join(report_lines)),
        figures="\n".join(figures),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }}
pre {{ background: #f5f5f5; padding: 1em; overflow-x: auto; }}
figure {{ margin: 2em 0; }} img {{ max-width: 100%; }}
figcaption {{ color: #555; font-size: 0.9em; }}
</style></head>
<body><h1>{title}</h1>
<pre id="report">{report}</pre>
{figures}
</body></html>
"""


def _better(direction: str) -> Callable[[float, float], bool]:
    if direction == "maximize":
        return lambda a, b: a > b
    return lambda a, b: a < b


def _scored(run: _Run) -> list[dict[str, Any]]:
    """Completed, valid, scored trials that ran (not cache hits), in number order."""
    return [t for t in run.trials if t["status"] == "completed" and t["valid"]
            and t["score"] is not None and math.isfinite(t["score"]) and not t["cached"]]


def _convergence(fig: Any, run: _Run) -> str:
    from matplotlib.ticker import MaxNLocator

    left, right = fig.subplots(1, 2)
    better = _better(run.direction)
    spend_by_trial: dict[int, float] = {}
    money = sum(a["money"] for a in run.attempts) > 0
    for a in run.attempts:
        cost = a["money"] if money else a["cpu_s"] / 3600.0
        spend_by_trial[a["number"]] = spend_by_trial.get(a["number"], 0.0) + cost
    xs, best, spend_x = [], [], []
    current: float | None = None
    spent = 0.0
    scored = {t["number"]: t for t in _scored(run)}
    for t in sorted(run.trials, key=lambda t: t["number"]):
        spent += spend_by_trial.get(t["number"], 0.0)
        s = scored.get(t["number"])
        if s is None:
            continue
        if current is None or better(s["score"], current):
            current = s["score"]
        xs.append(t["number"])
        best.append(current)
        spend_x.append(spent)
    unit = run.currency if money else "CPU-hours"
    left.step(xs, best, where="post", color="#1565c0")
    left.set_xlabel("trial")
    left.set_ylabel(f"best {run.metric} so far")
    right.step(spend_x, best, where="post", color="#1565c0")
    right.set_xlabel(f"spend ({unit})")
    right.xaxis.set_major_locator(MaxNLocator(5))
    fig.tight_layout()
    return (f"Best {run.metric} ({run.direction}) over {len(xs)} completed, valid trials,"
            f" against trials and against spend in {unit}.")


def _lanes(attempts: Sequence[dict[str, Any]]) -> list[int]:
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


def _timeline(fig: Any, run: _Run) -> str:
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    ax = fig.subplots()
    done = [a for a in run.attempts if a["start"] is not None and a["end"] is not None]
    lanes = _lanes(done)
    t0 = min((a["start"] for a in done), default=run.created)
    verts, colours = [], []
    for a, lane in zip(done, lanes, strict=True):
        x0, x1 = (a["start"] - t0) / 60.0, (a["end"] - t0) / 60.0
        verts.append([(x0, lane - 0.4), (x1, lane - 0.4), (x1, lane + 0.4), (x0, lane + 0.4)])
        colours.append(_STATE_COLOURS.get(a["state"], _OTHER_COLOUR))
    ax.add_collection(PolyCollection(verts, facecolors=colours, edgecolors="none"))
    ax.autoscale_view()
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("minutes since the first attempt started")
    ax.set_ylabel("slot")
    shown = sorted({a["state"] for a in done})
    ax.legend(handles=[Patch(color=_STATE_COLOURS.get(s, _OTHER_COLOUR), label=s) for s in shown],
              loc="upper right", fontsize="small")
    return (f"{len(done)} attempts on {max(lanes, default=-1) + 1} slots (an attempt takes the"
            " lowest slot free when it starts): gaps are idle slots, steps are waves.")


def _parameters(fig: Any, run: _Run) -> str:
    import matplotlib
    from matplotlib.cm import ScalarMappable
    from matplotlib.collections import LineCollection
    from matplotlib.colors import Normalize

    ax = fig.subplots()
    scored = _scored(run)
    names = [p["name"] for p in run.space]
    if not scored or not names:
        ax.text(0.5, 0.5, "no completed trial", ha="center", va="center")
        ax.set_axis_off()
        return "No completed, valid trial to draw."
    reverse = run.direction == "maximize"
    ranked = sorted(scored, key=lambda t: t["score"], reverse=reverse)
    chosen = ranked[:100]
    rest = ranked[100:]
    if len(rest) > LINES_DRAWN - len(chosen):
        rest = random.Random(0).sample(rest, LINES_DRAWN - len(chosen))
    chosen = rest + chosen  # the best drawn last, on top
    axes = [_axis(p, [t["params"].get(p["name"]) for t in chosen]) for p in run.space]
    lines = [[(i, axis(t["params"].get(name))) for i, (name, axis) in
              enumerate(zip(names, axes, strict=True))] for t in chosen]
    scores = [t["score"] for t in chosen]
    # Yellow is best: the colour map runs the other way when lower is better.
    cmap = matplotlib.colormaps["viridis" if reverse else "viridis_r"]
    norm = Normalize(min(scores), max(scores))
    ax.add_collection(LineCollection(lines, colors=cmap(norm(scores)), linewidths=0.8,
                                     alpha=0.6))
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=run.metric)
    ax.set_xlim(-0.2, len(names) - 0.8)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks([0, 1], ["low", "high"])
    for i in range(len(names)):
        ax.axvline(i, color="#bbb", linewidth=0.8)
    drawn = f"{len(chosen)} of {len(scored)}" if len(chosen) < len(scored) else f"{len(scored)}"
    return (f"{drawn} completed trials (the best 100 always), each a line through its params"
            f" (numbers scaled to their range, categories in order); yellow is the best"
            f" {run.metric}.")


def _axis(param: dict[str, Any], values: Sequence[Any]) -> Callable[[Any], float]:
    """Where a value of *param* sits on its parallel-coordinates axis, in [0, 1]."""
    choices = param.get("choices")
    if choices:
        index = {repr(c): i for i, c in enumerate(choices)}
        top = max(len(choices) - 1, 1)
        return lambda v: index.get(repr(v), 0) / top
    log = bool(param.get("log"))
    low, high = param.get("low"), param.get("high")
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        seen = [v for v in values if isinstance(v, int | float)]
        low, high = (min(seen), max(seen)) if seen else (0.0, 1.0)

    def scale(v: Any) -> float:
        if not isinstance(v, int | float):
            return 0.0
        if log and v > 0 and low > 0:
            return (math.log(v) - math.log(low)) / ((math.log(high) - math.log(low)) or 1.0)
        return (v - low) / ((high - low) or 1.0)

    return scale


def _cost(fig: Any, run: _Run) -> str:
    ax = fig.subplots()
    money = sum(a["money"] for a in run.attempts) > 0
    unit = run.currency if money else "CPU-hours"
    events: list[tuple[float, float, int]] = []
    for a in run.attempts:
        if a["end"] is not None:
            events.append((a["end"], a["money"] if money else a["cpu_s"] / 3600.0, 0))
    for t in run.trials:
        # A usable result, as the three numbers count them: completed or stopped at a rung.
        if (t["status"] in ("completed", "stopped") and t["valid"] and not t["cached"]
                and t["ended"] is not None):
            events.append((t["ended"], 0.0, 1))
    events.sort()
    t0 = run.created
    xs, ys = [], []
    spent, effective = 0.0, 0
    for at, cost, result in events:
        spent += cost
        effective += result
        if effective:
            xs.append((at - t0) / 3600.0)
            ys.append(spent / effective)
    ax.plot(xs, ys, color="#6d4c41")
    ax.set_xlabel("hours since the run started")
    ax.set_ylabel(f"{unit} per effective result")
    ax.set_ylim(bottom=0)
    return (f"Cumulative spend over cumulative effective results (completed or stopped at a"
            f" rung, valid), in {unit}: how much each usable result has cost so far.")


def _outcomes(fig: Any, run: _Run) -> str:
    ax = fig.subplots()
    counts: dict[str, int] = {}
    for t in run.trials:
        label = t["status"] if not t["failure"] else f"{t['status']}: {t['failure']}"
        if t["status"] in ("completed", "stopped") and not t["valid"]:
            label = f"{t['status']}: invalidated"
        counts[label] = counts.get(label, 0) + 1
    labels = sorted(counts, key=lambda k: (-counts[k], k))
    ax.barh(labels, [counts[k] for k in labels], color="#546e7a")
    ax.invert_yaxis()
    ax.set_xlabel("trials")
    for i, k in enumerate(labels):
        ax.text(counts[k], i, f" {counts[k]}", va="center", fontsize="small")
    fig.tight_layout()
    return f"{len(run.trials)} trials by outcome, with the failure class of each that failed."


def write_html_report(
    store: Store, campaign_id: int, out: Path, *, details: Iterable[RunDetail] | None = None,
) -> Path:
    """Write the page ``dse report --html`` writes for run *campaign_id* to *out*: its
    report, the rollup of each objective label it serves (over every run of the workspace,
    or of *details* when the caller has them read), and the plots. Needs matplotlib
    (``pip install 'dse-core[report]'``); returns *out*."""
    every = list(details) if details is not None else [
        run_detail(store, run.id) for run in store.campaigns()
    ]
    found = [d for d in every if d.summary.campaign_id == campaign_id]
    detail = found[-1] if found else run_detail(store, campaign_id)
    rollups = [r for r in rollup_by_objective(d.summary for d in every)
               if r.label in detail.summary.serves]
    lines = [*detail_lines(detail), "", *(rollup_line(r) for r in rollups)]
    return render_html(store, campaign_id, out, lines, fronts=detail.fronts)
