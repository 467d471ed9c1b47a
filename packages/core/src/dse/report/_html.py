"""``dse report --html``: one self-contained HTML file with the console report and its plots.

The plots are drawn by matplotlib (the optional extra ``dse-core[report]``) as PNG images
embedded in the page, so the file opens anywhere without a network and stays a few hundred
kilobytes whatever the number of trials (:mod:`dse.report._plots`, :mod:`dse.report._parallel`):

* **convergence**: every completed trial's score and the best so far, against trials and
  against spend;
* **timeline**: every attempt as a bar on the slot it held (waves and backfill visible);
* **parameters**: parallel coordinates of the trials' params on their own axes, coloured by
  score, the best emphasised;
* **importance**, **slices**, **contour** (:mod:`dse.report._landscapeplot`, from the data
  :mod:`dse.report._landscape` reads): each param's share of the importance by PED-ANOVA, the
  objective against each param (the most important first), and the mean objective over a
  grid of the two most important;
* **cost**: what the run had spent and its effective results over its time;
* **outcomes**: trials by outcome and failure class;
* **curves** (a run with a stopping rule or learning curves, :mod:`dse.report._curves`): the trials'
  learning curves with the stopping rule's stops and promotions.

Cache hits are results of the run too: every figure draws them, marked reused (a rerun
answered from the record draws what it reuses). Above the figures, a table of the best
:data:`BEST_LISTED` trials (params, metrics, each one's ``dse show`` command) sorts by the
header clicked, through a small inline script (nothing is fetched).

A Pareto run (``[campaign] objectives = "pareto"``) has two more, first on its page (the plots
above rank its trials by the first objective alone), drawn by :mod:`dse.report._frontplot` from the
fronts :mod:`dse.report._front` reads:

* **front**: the current data version's trials, those on the Pareto front highlighted (two
  objectives: with the attainment staircase, the reference point and the hypervolume's area;
  more: pairwise projections);
* **hypervolume**: the front's hypervolume against trials and against spend.

A Pareto run with no trial scored on every objective yet has both, each saying so.

Each ``<img>`` carries what its figure says in words, read from the matplotlib objects that
drew it (:mod:`dse.report._drawn`): ``data-axes`` (each axes' labels, scales and drawn tick labels),
``data-texts`` (every text drawn, with its box in the image's pixels) and ``data-overlaps``
(the pairs of texts that overlap: none, on a page drawn right).

While the run is running a page written by a watch (``dse report --html OUT --watch``,
:func:`watch_html_report`) refreshes itself (``<meta http-equiv="refresh">``) and says when
it was written; the watch rewrites it (atomically) until the run ends, then writes it once
more without the refresh.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import re
import time
from typing import TYPE_CHECKING, Any

from dse.model._errors import DseError
from dse.model._trialfile import write_trial_file
from dse.report._curves import CURVES, draw_curves, learning_curves
from dse.report._drawn import draw_png
from dse.report._front import pareto_fronts, pareto_objectives
from dse.report._frontplot import FRONT, HYPERVOLUME, draw_front, draw_hypervolume
from dse.report._landscape import landscape
from dse.report._landscapeplot import (
    CONTOUR,
    IMPORTANCE,
    SLICES,
    draw_contour,
    draw_importance,
    draw_slices,
)
from dse.report._palette import better_label
from dse.report._parallel import draw_parameters
from dse.report._plots import convergence, cost, load_run, outcomes, scored, timeline
from dse.report._render import WATCH_EVERY, detail_lines, rollup_line
from dse.report._report import rollup_by_objective, run_detail

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from pathlib import Path

    from dse.record._base import Storage
    from dse.report._drawn import Drawn
    from dse.report._front import Front
    from dse.report._plots import RunData
    from dse.report._report import RunDetail

__all__ = ["BEST_LISTED", "PLOTS", "best_table", "check_matplotlib", "render_html",
           "watch_html_report", "write_html_report"]

PLOTS = ("convergence", "timeline", "parameters", IMPORTANCE, SLICES, CONTOUR, "cost",
         "outcomes")
"""The figures every report has, in page order (each an ``<img id="plot-NAME">``)."""

_TITLES = {
    "convergence": "Convergence", "timeline": "Timeline of attempts per slot",
    "parameters": "Parameters (parallel coordinates)",
    IMPORTANCE: "Parameter importance (PED-ANOVA)",
    SLICES: "Slices: the objective against each param",
    CONTOUR: "Contour: the mean objective over a pair of params",
    "cost": "Spend and effective results over time", "outcomes": "Outcomes and failure classes",
    FRONT: "Pareto front", HYPERVOLUME: "Hypervolume",
    CURVES: "Learning curves, stops and promotions",
}


def _drawers(store: Storage, run: RunData, fronts: Sequence[Front] | None
             ) -> dict[str, Callable[[Any, RunData], str]]:
    """The figures of *run*'s page, in page order, each with its drawer."""
    drawers: dict[str, Callable[[Any, RunData], str]] = {}
    if pareto_objectives(run.spec) is not None:
        read = list(fronts) if fronts is not None else pareto_fronts(store, run.run, run.spec)
        drawers[FRONT] = lambda fig, _: draw_front(fig, read)
        drawers[HYPERVOLUME] = lambda fig, r: draw_hypervolume(fig, read, r.attempts,
                                                              r.currency)
    view = landscape(run)  # read once for the three figures
    drawers.update({
        "convergence": convergence, "timeline": timeline, "parameters": draw_parameters,
        IMPORTANCE: lambda fig, r: draw_importance(fig, r, view),
        SLICES: lambda fig, r: draw_slices(fig, r, view),
        CONTOUR: lambda fig, r: draw_contour(fig, r, view),
        "cost": cost, "outcomes": outcomes})
    curves = learning_curves(store, run.run, run.spec, run.trials)
    if curves is not None:
        drawers[CURVES] = lambda fig, _: draw_curves(fig, curves)
    return drawers


def _attribute(value: Any) -> str:
    return html.escape(json.dumps(value, ensure_ascii=False), quote=True)


def _figure(key: str, drawn: Drawn, caption: str) -> str:
    """The ``<figure>`` of plot *key*: its image, with what it says as data, and caption."""
    title = html.escape(_TITLES[key])
    texts = [[t.text, *(round(v, 1) for v in t.box)] for t in drawn.texts]
    overlaps = [[a.text, b.text] for a, b in drawn.overlaps()]
    data = base64.b64encode(drawn.png).decode("ascii")
    return (
        f'<figure><h2>{title}</h2><img id="plot-{key}" alt="{title}" width="{drawn.width}"'
        f' height="{drawn.height}" data-axes="{_attribute([a.as_dict() for a in drawn.axes])}"'
        f' data-texts="{_attribute(texts)}" data-overlaps="{_attribute(overlaps)}"'
        f' src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}'
        "</figcaption></figure>"
    )


def _clock(at: float) -> str:
    return datetime.datetime.fromtimestamp(at).strftime("%H:%M:%S")


def _note(run: RunData, live: float | None) -> tuple[str, str]:
    """The page's refresh (for its head) and what it says of it, while the run runs."""
    if run.status != "running":
        return "", ""
    if live is None:
        return "", (f'<p id="snapshot" class="live">The run was running at {_clock(run.now)},'
                    " when this page was written; it is not refreshed (dse report --html"
                    " OUT.html --watch keeps rewriting it until the run ends).</p>")
    every = max(1, round(live))
    return (f'<meta http-equiv="refresh" content="{every}">',
            f'<p id="live" class="live">live: refreshed at {_clock(run.now)}, every'
            f" {every} s, while the run is running (dse report --watch).</p>")


BEST_LISTED = 25
"""The best trials the page's table lists (``dse export`` has every one)."""


def _cell(value: Any) -> str:
    """A ``<td>``: *value* as text, with ``data-value`` to sort by (numbers as numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        text = "-" if value is None else str(value)
        return f'<td data-value="{html.escape(text, quote=True)}">{html.escape(text)}</td>'
    shown = f"{value:.6g}" if isinstance(value, float) else str(value)
    return f'<td class="num" data-value="{value!r}">{shown}</td>'


def best_table(run: RunData, limit: int = BEST_LISTED) -> str:
    """The page's table of the best *limit* trials of *run* (cache hits among them, marked
    reused): rank, trial, score, each param and metric, and the ``dse show`` command of
    each; its headers sort it (the page's inline script)."""
    ranked = sorted(scored(run), key=lambda t: (t["score"], t["number"]),
                    reverse=run.direction == "maximize")
    if run.direction == "maximize":  # the lowest number first among equals, as ranked
        ranked.sort(key=lambda t: (-t["score"], t["number"]))
    ranked = ranked[:limit]
    if not ranked:
        return '<p id="best-none">No completed, valid trial yet: no best trials to list.</p>'
    params = [str(p.get("name")) for p in run.space]
    metrics = sorted({m for t in ranked for m in t["metrics"]} - {run.metric})
    heads = ["rank", "trial", run.metric, *params, *metrics, "dse show"]
    header = "".join(f'<th scope="col" data-key="{i}" aria-sort="none">{html.escape(h)}'
                     "</th>" for i, h in enumerate(heads))
    rows = []
    for rank, t in enumerate(ranked, 1):
        show = f"dse show {run.name}-{run.run}-{t['number']}"
        mark = ' <span class="reused">reused</span>' if t["cached"] else ""
        cells = [_cell(rank), f'<td class="num" data-value="{t["number"]}">{t["number"]}'
                 f"{mark}</td>", _cell(t["score"]),
                 *(_cell(t["params"].get(p)) for p in params),
                 *(_cell(t["metrics"].get(m)) for m in metrics),
                 f'<td data-value="{t["number"]}"><code>{html.escape(show)}</code></td>']
        rows.append(f'<tr id="trial-{t["number"]}">{"".join(cells)}</tr>')
    shown = len(ranked)
    return (
        f'<section id="best"><h2>The best {shown} trial{"s" if shown != 1 else ""}</h2>'
        f'<p class="note">By {html.escape(better_label(run.metric, run.direction))};'
        " a header sorts the table (again: the other way). Each row's command prints the"
        " trial's whole record; a reused trial is a cache hit, whose record names the trial"
        f' it reuses.</p><table id="best-trials"><thead><tr>{header}</tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table></section>'
    )


def render_html(store: Storage, campaign_id: int, out: Path, report_lines: Sequence[str], *,
                fronts: Sequence[Front] | None = None, live: float | None = None) -> Path:
    """Write the HTML report of run *campaign_id* to *out*: *report_lines* (the console
    report) and the plots; *fronts*: a Pareto run's fronts when the caller has them read
    (:attr:`RunDetail.fronts`), else read here; *live*: the seconds between the pages a
    watch writes (the page refreshes itself that often while the run is running), ``None``
    for a page written once. Needs matplotlib (``pip install 'dse-core[report]'``)."""
    return _render(store, campaign_id, out, report_lines, fronts=fronts, live=live)[0]


def check_matplotlib() -> None:
    """Raise :class:`DseError`, one line saying how to install it, when matplotlib (which
    draws the page's plots) cannot be imported."""
    try:
        import matplotlib
        import matplotlib.figure  # noqa: F401 - what the page needs of it
    except ImportError:
        raise DseError(
            "dse report --html draws its plots with matplotlib, which is not installed:"
            " pip install 'dse-core[report]'"
        ) from None


def _render(store: Storage, campaign_id: int, out: Path, report_lines: Sequence[str], *,
            fronts: Sequence[Front] | None, live: float | None) -> tuple[Path, str]:
    """:func:`render_html`, and the run's status as the page shows it."""
    check_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run = load_run(store, campaign_id)
    figures = []
    for key, draw in _drawers(store, run, fronts).items():
        fig = Figure(figsize=(10, 4.2), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        caption = draw(fig, run)
        figures.append(_figure(key, draw_png(fig), caption))
    title = f"dse report: {run.name} run {run.run}"
    refresh, note = _note(run, live)
    page = _PAGE.format(
        title=html.escape(title), refresh=refresh, note=note,
        report=html.escape("\n".join(report_lines)), figures="\n".join(figures),
        table=best_table(run), script=_SORT_SCRIPT,
    )
    _write(out, page)
    return out, run.status


def _write(out: Path, text: str) -> None:
    """Replace *out* by *text* at once: a reader (a browser refreshing it) sees the old page
    or the new one, never part of one."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_trial_file(out.parent, out.name, text.encode("utf-8"))


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">{refresh}<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }}
pre {{ background: #f5f5f5; padding: 1em; overflow-x: auto; }}
figure {{ margin: 2em 0; }} img {{ max-width: 100%; height: auto; }}
figcaption {{ color: #555; font-size: 0.9em; }}
.live {{ border-left: 4px solid #0072B2; background: #eef5fb; padding: 0.5em 1em; }}
table {{ border-collapse: collapse; font-size: 0.9em; display: block; overflow-x: auto; }}
th, td {{ padding: 0.25em 0.6em; border-bottom: 1px solid #ddd; text-align: left;
  white-space: nowrap; }}
th {{ cursor: pointer; background: #f5f5f5; user-select: none; }}
th[aria-sort="ascending"]::after {{ content: " \\25B2"; }}
th[aria-sort="descending"]::after {{ content: " \\25BC"; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
.reused {{ color: #0072B2; font-size: 0.8em; border: 1px solid #0072B2; border-radius: 3px;
  padding: 0 0.2em; }}
.note {{ color: #555; font-size: 0.9em; }}
</style></head>
<body><h1>{title}</h1>
{note}
<pre id="report">{report}</pre>
{table}
{figures}
<script>{script}</script>
</body></html>
"""

_SORT_SCRIPT = """
document.querySelectorAll("table#best-trials").forEach(function (table) {
  var heads = table.querySelectorAll("th");
  heads.forEach(function (th, column) {
    th.addEventListener("click", function () {
      var up = th.getAttribute("aria-sort") !== "ascending";
      heads.forEach(function (h) { h.setAttribute("aria-sort", "none"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[column].dataset.value, y = b.cells[column].dataset.value;
        var nx = parseFloat(x), ny = parseFloat(y);
        var order = (!isNaN(nx) && !isNaN(ny) && String(nx) !== "NaN")
          ? nx - ny : x.localeCompare(y);
        return (up ? order : -order) || (a.rowIndex - b.rowIndex);
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""
"""Sorts the best trials' table by the header clicked: ascending, then descending (numbers
as numbers, text as text); the page keeps working offline (nothing is fetched)."""


def _page_lines(store: Storage, campaign_id: int, details: Iterable[RunDetail] | None
                ) -> tuple[list[str], RunDetail]:
    """The console report of run *campaign_id* and the rollup of each objective label it
    serves (over every run of the workspace, or of *details*)."""
    now = time.time()  # a running run's wall clock and rates run to now
    every = list(details) if details is not None else [
        run_detail(store, run.id, now=now) for run in store.reads.campaigns()
    ]
    found = [d for d in every if d.summary.campaign_id == campaign_id]
    detail = found[-1] if found else run_detail(store, campaign_id, now=now)
    rollups = [r for r in rollup_by_objective(d.summary for d in every)
               if r.label in detail.summary.serves]
    return [*detail_lines(detail), "", *(rollup_line(r) for r in rollups)], detail


def write_html_report(
    store: Storage, campaign_id: int, out: Path, *, details: Iterable[RunDetail] | None = None,
    live: float | None = None,
) -> Path:
    """Write the page ``dse report --html`` writes for run *campaign_id* to *out*: its
    report, the rollup of each objective label it serves (over every run of the workspace,
    or of *details* when the caller has them read), and the plots; *live*: as
    :func:`render_html`'s. Needs matplotlib (``pip install 'dse-core[report]'``); returns
    *out*."""
    lines, detail = _page_lines(store, campaign_id, details)
    return render_html(store, campaign_id, out, lines, fronts=detail.fronts, live=live)


def watch_html_report(
    store: Storage, campaign_id: int, out: Path, *, every: float = WATCH_EVERY,
    details: Iterable[RunDetail] | None = None,
) -> str:
    """Write the page of run *campaign_id* to *out* every *every* seconds while the run is
    running (a page slower to draw than that: after as long again as it took), each
    refreshing itself every *every* seconds; once the run has ended, write it once more
    without the refresh and return the run's status. Each page replaces the last at once.
    *details*: as :func:`write_html_report`'s, for the first page. A ``KeyboardInterrupt``
    (Ctrl+C) leaves the last page whole, its refresh taken out, and goes on up."""
    unheld = False
    try:
        while True:
            started = time.monotonic()
            lines, detail = _page_lines(store, campaign_id, details)
            details = None
            status = _render(store, campaign_id, out, lines, fronts=detail.fronts,
                             live=every)[1]
            if status != "running":
                if detail.summary.status == status:
                    return status
                continue  # it ended between the report's read and the figures': draw again
            if not _controlled(store, campaign_id):
                # Recorded running, but no controller holds it: its controller died (a
                # `dse run` of the campaign resumes it), and nothing would change the page
                # — unless it ended the run since the page read it (it records the end
                # before it lets the lock go): read once more at once.
                if unheld:
                    _unwatch(out, "no controller runs it (its controller is gone; dse run"
                             " resumes it)")
                    return "running, without a controller"
                unheld = True
                continue
            unheld = False
            took = time.monotonic() - started
            # A page that takes longer to draw than the interval is drawn every other
            # interval at most: the watch never takes a whole core from the run it watches.
            time.sleep(max(every - took, took))
    except KeyboardInterrupt:
        _unwatch(out)
        raise


_REFRESH = re.compile(r'<meta http-equiv="refresh"[^>]*>')
_LIVE = re.compile(r'<p id="live" class="live">.*?</p>', re.DOTALL)


def _controlled(store: Storage, campaign_id: int) -> bool:
    """Whether a live controller holds run *campaign_id*'s campaign (its lock, its lease)."""
    row = store.reads.campaign(campaign_id)
    return row is None or store.alive(row.name)


def _unwatch(out: Path, why: str = "the run still running") -> None:
    """Take the refresh out of the page at *out*, saying the watch stopped, and *why*."""
    try:
        page = out.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    note = (f'<p id="stopped" class="live">The watch stopped at {_clock(time.time())}, {why}:'
            " this page is not refreshed any more.</p>")
    _write(out, _LIVE.sub(lambda _: note, _REFRESH.sub("", page, count=1), count=1))
