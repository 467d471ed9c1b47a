"""The HTML report of a real local-backend campaign, opened in headless Chromium.

The campaign runs real processes (one configuration in four fails); ``dse report --html``
writes the page; Debian's Chromium (``.ci/run`` installs it) loads it through Playwright with
no network. What each figure says is checked as the browser has the page: its axes' labels and
tick labels, read from the matplotlib objects that drew them (``data-axes``), and every text's
box in the image (``data-texts``): none overlaps another, none is cut off. The full-page
screenshot is kept as the CI artefact (the test's tmp dir, and ``$DSE_ARTIFACTS`` when set).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import pytest

from dse.report._html import PLOTS
from support.browser import (
    browser_page,
    by_name,
    distinct_colours,
    figure_data,
    keep_screenshot,
    overlapping,
)
from support.cli import run_dse, write_plugin

if TYPE_CHECKING:
    from pathlib import Path

WORK = '''
import sys
import dse.trial
p = dse.trial.params()
if p["x"] % 4 == 3:
    sys.exit(3)
dse.trial.report({"loss": (p["x"] - 7) ** 2 * p["lr"]})
'''

CAMPAIGN = f'''
[campaign]
name = "html"
agent = "random"
backend = "local"
mode = "rolling"
max_parallelism = 2
max_trials = 16

[environment]
command = ["{sys.executable}", "work.py"]
time_limit = "60s"

[[objectives]]
metric = "loss"

[space]
x = {{ type = "int", low = 0, high = 15 }}
lr = {{ type = "float", low = 1e-3, high = 1.0, log = true }}
layout = ["row", "col"]
'''


def assert_readable(key: str, figure: dict[str, Any]) -> None:
    """Figure *key* loaded, says something, and no text of it overlaps another or is cut
    off: checked from the boxes the page carries, not only from the page's own verdict."""
    assert figure["complete"], key
    assert figure["natural"] == [figure["width"], figure["height"]], key
    assert figure["texts"], key
    assert figure["overlaps"] == [], (key, figure["overlaps"])
    assert overlapping(figure["texts"]) == [], key
    for text, left, top, right, bottom in figure["texts"]:
        assert 0 <= left < right <= figure["width"], (key, text)
        assert 0 <= top < bottom <= figure["height"], (key, text)


def assert_labelled(figures: dict[str, dict[str, Any]]) -> None:
    """Each axis says what it shows: the params' own values, the metric and its direction,
    time in seconds (a run of a few seconds)."""
    params = figures["parameters"]["axes"]
    assert params[0]["xticks"] == ["x", "lr", "layout"]
    axes = by_name(params)
    assert axes["lr"]["yscale"] == "log"
    assert axes["lr"]["yticks"] == ["0.001", "0.01", "0.1", "1"]
    assert axes["layout"]["yticks"] == ["row", "col"]
    numbers = [int(t) for t in axes["x"]["yticks"]]
    assert len(numbers) >= 3
    assert numbers == sorted(numbers)
    assert set(numbers) <= set(range(16))
    assert axes["<colorbar>"]["ylabel"] == "loss (lower is better)"
    convergence = figures["convergence"]["axes"][0]
    assert (convergence["xlabel"], convergence["ylabel"]) == ("trial number",
                                                              "loss (lower is better)")
    assert convergence["xticks"]
    assert convergence["yticks"]
    assert figures["convergence"]["axes"][1]["xlabel"] == "spent so far (CPU-seconds)"
    assert figures["timeline"]["axes"][0]["xlabel"] == "seconds since the first attempt started"
    spend, results = figures["cost"]["axes"]
    assert spend["xlabel"] == "seconds since the run started"
    assert (spend["ylabel"], results["ylabel"]) == ("spent (CPU-seconds)", "effective results")
    outcomes = figures["outcomes"]["axes"][0]["yticks"]
    assert outcomes == ["completed", "failed: nonzero_exit"]


def test_the_html_report_loads_in_chromium_offline_every_plot_labelled_and_readable(
    tmp_path: Path,
) -> None:
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    done = run_dse(tmp_path, "run", "campaign.toml", timeout=120)
    assert done.returncode == 0, done.stderr
    report = tmp_path / "report.html"
    made = run_dse(tmp_path, "report", "html", "--html", str(report), timeout=120)
    assert made.returncode == 0, made.stderr
    assert f"HTML report of html run 1: {report}" in made.stderr
    text = report.read_text()
    # The console report is in the page: the run, its three numbers, its objective's spend.
    assert "campaign html run 1: completed" in text
    assert "throughput" in text
    assert "objective html: run 1; spent" in text
    assert "http://" not in text
    assert "https://" not in text

    errors: list[str] = []
    requests: list[str] = []
    with browser_page(errors, requests) as page:
        page.goto(report.as_uri(), wait_until="load")
        figures = {key: figure_data(page, key) for key in PLOTS}
        captions = page.eval_on_selector_all("figcaption", "cs => cs.map(c => c.textContent)")
        # A finished run's page is written once: it does not refresh itself.
        live = page.eval_on_selector_all('meta[http-equiv="refresh"], #live, #snapshot',
                                         "found => found.length")
        shot, png = keep_screenshot(page, tmp_path, "report.png")

    assert errors == []
    assert set(figures) == set(PLOTS)
    for key, figure in figures.items():
        assert_readable(key, figure)
    assert_labelled(figures)
    assert live == 0
    assert len(captions) == len(PLOTS)
    assert any("completed, valid trials" in c for c in captions)
    # Nothing but the page itself and its embedded images: it needs no network.
    assert all(url.startswith(("file:", "data:")) for url in requests), requests
    # The screenshot is the page drawn: as wide as the window, as tall as five figures,
    # and not blank (text and plots make hundreds of colours; an empty page has one).
    width, height, colours = distinct_colours(png)
    assert width == 1200
    assert height > 5 * 300
    assert colours > 200, colours
    assert shot.stat().st_size > 20_000


def test_report_html_names_a_missing_run_in_one_line_and_goes_with_json(tmp_path: Path) -> None:
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.replace("max_trials = 16",
                                                             "max_trials = 2"))
    assert run_dse(tmp_path, "run", "campaign.toml", timeout=120).returncode == 0
    done = run_dse(tmp_path, "report", "nothing", "--html", str(tmp_path / "r.html"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "no campaign run named 'nothing'" in done.stderr
    assert not (tmp_path / "r.html").exists()
    # --json and --html together: the JSON on stdout, the page in its file.
    both = run_dse(tmp_path, "report", "html", "--json", "--html", str(tmp_path / "j.html"),
                   timeout=120)
    assert both.returncode == 0, both.stderr
    (run,) = json.loads(both.stdout)["runs"]
    assert run["trials"]["total"] == 2
    assert "campaign html run 1: completed" in (tmp_path / "j.html").read_text()


@pytest.mark.parametrize("outcome", ["fail", "none"])
def test_a_run_with_no_completed_trial_still_renders_every_plot(tmp_path: Path,
                                                               outcome: str) -> None:
    import dse
    from dse.report._html import render_html
    from dse.testing import FakeClock, ProbeBackend, ScriptedAgent

    points = [] if outcome == "none" else [{"x": i, "outcome": "fail"} for i in range(3)]
    campaign = dse.campaign_from_dict(
        {"campaign": {"name": "empty", "max_trials": 3},
         "space": {"x": {"type": "int", "low": 0, "high": 9},
                   "outcome": ["succeed", "fail"]},
         "objectives": [{"metric": "value"}]},
        workspace=tmp_path / ".dse",
    )
    store = dse.Store(tmp_path / ".dse" / "dse.sqlite")
    clock = FakeClock()
    result = dse.Engine(campaign, agent=ScriptedAgent(points), store=store, clock=clock,
                        backend=ProbeBackend(clock=clock)).run()
    out = render_html(store, result.campaign_id, tmp_path / "r.html", ["report"])
    text = out.read_text()
    assert all(f'id="plot-{key}"' in text for key in PLOTS)
    assert "No completed, valid trial to draw." in text
