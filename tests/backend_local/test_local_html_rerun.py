"""The HTML report of a rerun that is all cache hits (README: "run the same command again"),
opened in headless Chromium: every figure draws the results the run reuses, marked as reused,
none says there is nothing to draw, no text overlaps another; the table of the best trials is
on the page and sorts in the browser by the header clicked. The full-page screenshot is kept
(the test's tmp dir, and ``$DSE_ARTIFACTS`` when set). Also: parallel coordinates colour by
rank, so a few outliers do not paint the rest one colour."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from dse.report._html import PLOTS
from support.browser import (
    browser_page,
    distinct_colours,
    figure_data,
    keep_screenshot,
    overlapping,
)
from support.cli import run_dse, write_plugin

if TYPE_CHECKING:
    from pathlib import Path

WORK = '''
import dse.trial
p = dse.trial.params()
loss = (p["x"] - 5) ** 2 + (0.5 if p["layout"] == "col" else 0.0)
if p["x"] >= 10:
    loss *= 100  # a few outliers, far off the rest
dse.trial.report({"loss": loss, "gflops": 100.0 - loss})
'''

CAMPAIGN = f'''
[campaign]
name = "rerun"
agent = "list"
backend = "local"
mode = "rolling"
max_parallelism = 2

[agent.list]
points = [{", ".join(f'{{x = {x}, layout = "{lay}"}}' for x in range(12)
                     for lay in ("row", "col"))}]

[environment]
command = ["{sys.executable}", "work.py"]
time_limit = "60s"

[[objectives]]
metric = "loss"

[space]
x = {{ type = "int", low = 0, high = 11 }}
layout = ["row", "col"]
'''

NOTHING = ("no completed, valid trial yet", "No completed, valid trial", "no completed trial",
           "No attempt started yet", "no attempt started yet")


def assert_readable(key: str, figure: dict[str, Any]) -> None:
    assert figure["complete"], key
    assert figure["natural"] == [figure["width"], figure["height"]], key
    assert figure["texts"], key
    assert figure["overlaps"] == [], (key, figure["overlaps"])
    assert overlapping(figure["texts"]) == [], key
    for text, left, top, right, bottom in figure["texts"]:
        assert 0 <= left < right <= figure["width"], (key, text)
        assert 0 <= top < bottom <= figure["height"], (key, text)


def column(page: Any, index: int) -> list[str]:
    return page.eval_on_selector_all(
        "#best-trials tbody tr", f"rows => rows.map(r => r.cells[{index}].dataset.value)")


def test_a_rerun_of_cache_hits_draws_what_it_reuses_and_its_table_sorts(
    tmp_path: Path,
) -> None:
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    for _ in range(2):  # the second run: every configuration answered from the record
        done = run_dse(tmp_path, "run", "campaign.toml", timeout=180)
        assert done.returncode == 0, done.stderr
    assert "24 cached" in done.stdout, done.stdout
    report = tmp_path / "report.html"
    made = run_dse(tmp_path, "report", "campaign.toml", "--html", str(report), timeout=120)
    assert made.returncode == 0, made.stderr
    assert "HTML report of rerun run 2" in made.stderr
    text = report.read_text()
    assert "http://" not in text
    assert "https://" not in text

    errors: list[str] = []
    requests: list[str] = []
    with browser_page(errors, requests) as page:
        page.goto(report.as_uri(), wait_until="load")
        figures = {key: figure_data(page, key) for key in PLOTS}
        captions = page.eval_on_selector_all("figcaption", "cs => cs.map(c => c.textContent)")
        heads = page.eval_on_selector_all("#best-trials th", "hs => hs.map(h => h.textContent)")
        trials = column(page, 1)
        shows = page.eval_on_selector_all("#best-trials tbody tr",
                                          "rows => rows.map(r => r.cells[r.cells.length - 1]"
                                          ".textContent)")
        reused_marks = page.eval_on_selector_all("#best-trials .reused", "m => m.length")
        # Sorting in the browser: by trial number, then the other way; by a param (text).
        page.click("#best-trials th:nth-child(2)")
        by_trial = column(page, 1)
        sort_state = page.get_attribute("#best-trials th:nth-child(2)", "aria-sort")
        page.click("#best-trials th:nth-child(2)")
        by_trial_down = column(page, 1)
        page.click("#best-trials th:nth-child(3)")
        by_loss = column(page, 2)
        page.click("#best-trials th:nth-child(5)")
        by_layout = column(page, 4)
        shot, png = keep_screenshot(page, tmp_path, "report-rerun.png")

    assert errors == []
    assert all(url.startswith(("file:", "data:")) for url in requests), requests
    for key, figure in figures.items():
        assert_readable(key, figure)
        said = " ".join(t[0] for t in figure["texts"])
        assert not any(n in said for n in NOTHING), (key, said)
    for caption in captions:
        assert not any(n in caption for n in NOTHING), caption
    # Marked as reused: in the legends and captions of the figures that draw results.
    legend = {key: " ".join(t[0] for t in f["texts"]) for key, f in figures.items()}
    assert "reused, a cache hit (24)" in legend["convergence"]
    assert "reused, a cache hit (24)" in legend["parameters"]
    assert "reused (cache hit)" in legend["timeline"]
    assert "reused results (cache hits, free)" in legend["cost"]
    assert "cached" in figures["outcomes"]["axes"][0]["yticks"]
    assert any("all reused from the record" in c for c in captions), captions
    # The best trials' table: params, metrics, the dse show command of each, reused marked.
    assert heads == ["rank", "trial", "loss", "x", "layout", "gflops", "dse show"]
    assert len(trials) == 24
    assert trials[0] == "11"  # x = 5, layout row: loss 0, the 11th point
    assert shows[0] == "dse show rerun-2-11"
    assert reused_marks == 24
    assert by_trial == [str(n) for n in range(1, 25)]
    assert sort_state == "ascending"
    assert by_trial_down == [str(n) for n in range(24, 0, -1)]
    assert [float(v) for v in by_loss] == sorted(float(v) for v in by_loss)
    assert by_layout == sorted(by_layout)
    assert set(by_layout) == {"row", "col"}
    width, height, colours = distinct_colours(png)
    assert width == 1200
    assert height > 5 * 300
    assert colours > 200, colours
    assert shot.stat().st_size > 20_000
    # The shown command works on the record.
    shown = run_dse(tmp_path, "show", "rerun-2-11")
    assert shown.returncode == 0, shown.stderr
    assert "trial rerun-2-11" in shown.stdout


def test_parallel_coordinates_colour_by_rank_not_squeezed_by_outliers() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    from dse.report._drawn import draw_png
    from dse.report._parallel import draw_parameters
    from dse.report._plots import RunData

    space = [{"name": "a", "type": "int", "low": 0, "high": 99},
             {"name": "b", "choices": ["p", "q"]}]
    # 57 scores between 10 and 20, 3 outliers at 1000 and more: on a linear scale from the
    # lowest to the highest, the 57 would all take the same dark end of the map.
    scores = [10 + i / 5.6 for i in range(57)] + [1000.0, 2000.0, 5000.0]
    trials = [{"row": i, "number": i + 1, "status": "completed", "failure": None,
               "score": s, "params": {"a": i, "b": "pq"[i % 2]}, "valid": True,
               "ended": 1000.0 + i, "cached": False, "metrics": {"loss": s}}
              for i, s in enumerate(scores)]
    run = RunData(name="made", run=1, direction="minimize", metric="loss", currency="USD",
                  created=1000.0, status="completed", now=1000.0, space=space, trials=trials)
    fig = Figure(figsize=(10, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    caption = draw_parameters(fig, run)
    drawn = draw_png(fig)
    assert drawn.overlaps() == []
    host = fig.axes[0]
    rest, best = [c for c in host.collections if isinstance(c, LineCollection)]
    colours = [tuple(round(v, 3) for v in c) for c in rest.get_colors()]
    assert len(colours) == 60 - 5
    # By rank: (almost) every line its own colour, spread over the map's whole range.
    assert len(set(colours)) >= 50, len(set(colours))
    light = [sum(c[:3]) for c in colours]
    assert max(light) - min(light) > 1.0
    assert len(best.get_segments()) == 5  # the best 5 emphasised
    assert "rank" in caption
    # The colour bar is ticked with the scores at the worst, the quartiles and the best.
    bar = next(a for a in fig.axes if a.get_label() == "<colorbar>")
    ticks = [t.get_text() for t in bar.get_yticklabels()]
    assert ticks[0] == "5000"
    assert ticks[-1] == "10"
    assert any(14 < float(t) < 16 for t in ticks), ticks  # the median
