"""`dse dashboard` in a real browser (Debian's Chromium driven by Playwright, support.browser)
against a real `dse dashboard` process while a real local-backend campaign runs.

Each trial of the campaign waits for a file of its own (``gate-X``), so the test decides when
each ends: the trial table grows while the page is open, without a reload. Every wait polls
(bounded, generous): a loaded 2-core machine passes.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import pytest

from support.browser import browser_page, keep_screenshot, overlapping
from support.cli import start_dse, wait_for_running, write_plugin
from support.dashboard import dashboard

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

WORK = '''
import pathlib, sys, time
import dse.trial
p = dse.trial.params()
gate = pathlib.Path({gates!r}) / f"gate-{{p['x']}}"
deadline = time.monotonic() + 600
while not gate.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
for step in range(1, 4):
    dse.trial.report_progress(step, {{"loss": (p["x"] - 2.5) ** 2 + p["y"] + 3 - step}})
dse.trial.report({{"loss": (p["x"] - 2.5) ** 2 + p["y"], "y": p["y"]}})
'''

CAMPAIGN = f'''
[campaign]
name = "board"
agent = "list"
backend = "local"
mode = "rolling"
max_parallelism = 2
max_trials = 6

[agent.list]
points = [{{x = 0, y = 0.5}}, {{x = 1, y = 0.1}}, {{x = 2, y = 0.9}}, {{x = 3, y = 0.3}},
          {{x = 4, y = 0.7}}, {{x = 5, y = 0.2}}]

[environment]
command = ["{sys.executable}", "work.py"]
time_limit = "900s"

[[objectives]]
metric = "loss"

[space]
x = {{ type = "int", low = 0, high = 9 }}
y = {{ type = "float", low = 0.0, high = 1.0 }}
'''

def poll(page: Any, script: str, arg: Any = None, timeout: float = 60.0) -> Any:
    """What *script* (a function of the page, given *arg*) returns once truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = page.evaluate(script, arg)
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"never true within {timeout} s: {script}")


def click_point(page: Any, chart: str, series: int, value: list[float], done: str) -> None:
    """Click the point of *chart*'s series *series* at *value* as a user would, until *done*
    (a function of the page) holds: the chart scrolled into view, the point's pixel read
    afresh before each click, a click again after 2 s when the first found the page still
    laying itself out (a figure drawn after the point was read moves it), for a bounded
    minute."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        x, y = page.evaluate("""([chart, series, value]) => {
            const n = document.querySelector(chart);
            n.scrollIntoView({block: "center"});
            const r = n.getBoundingClientRect();
            const [px, py] = echarts.getInstanceByDom(n).convertToPixel({seriesIndex: series},
                                                                         value);
            return [r.left + px, r.top + py]; }""", [chart, series, value])
        page.mouse.click(x, y)
        settle = time.monotonic() + 2
        while time.monotonic() < settle:
            if page.evaluate(done):
                return
            time.sleep(0.05)
    pytest.fail(f"clicking {chart}'s point {value} never made {done} true within 60 s")


ROWS = ("() => [...document.querySelectorAll('#trials tbody tr')]"
        ".map(r => [...r.cells].map(c => c.textContent))")


def rows(page: Any) -> list[list[str]]:
    return list(page.evaluate(ROWS))


def figure_texts(page: Any, key: str) -> list[list[Any]]:
    """Every text the figure *key* drew (its SVG), as ``[text, left, top, right, bottom]``."""
    return list(page.evaluate("""key => [...document.querySelectorAll(
        `#chart-${key} svg text`)].filter(t => t.textContent.trim() && t.getBBox().width > 0)
        .map(t => { const r = t.getBoundingClientRect();
                    return [t.textContent, r.left, r.top, r.right, r.bottom]; })""", key))


@pytest.fixture
def running(tmp_path: Path) -> tuple[Path, subprocess.Popen[str]]:
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK.format(gates=str(tmp_path)))
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    run = start_dse(tmp_path, "run", "campaign.toml")
    wait_for_running(tmp_path / ".dse" / "dse.sqlite", 2, timeout=180)
    return tmp_path, run


def test_the_trial_table_grows_live_and_sorts_filters_and_opens_a_trial(running: Any) -> None:
    project, run = running
    board, url = dashboard(project)
    errors: list[str] = []
    requests: list[str] = []
    with browser_page(errors, requests) as page:
        page.goto(url + "#/run/1")
        page.evaluate("() => { window.loadedOnce = true; }")
        poll(page, "() => document.querySelectorAll('#trials tbody tr').length >= 2")
        assert {r[1] for r in rows(page)} == {"running"}
        # Each trial ended (its gate opened) shows on the open page, pushed, not reloaded.
        latencies = []
        for x in range(6):
            start = time.monotonic()
            (project / f"gate-{x}").touch()
            poll(page, """n => [...document.querySelectorAll('#trials tbody tr')]
                .filter(r => r.cells[1].textContent === 'completed').length >= n""", x + 1)
            latencies.append(time.monotonic() - start)
        print(f"trial ended -> shown on the page: {', '.join(f'{s:.2f}' for s in latencies)} s")
        assert page.evaluate("() => window.loadedOnce === true")  # never reloaded
        assert run.wait(timeout=180) == 0
        assert len(rows(page)) == 6
        keep_screenshot(page, project, "dashboard-trials.png")

        # Sort by the score: ascending, then descending.
        page.click("th[data-sort=score]")
        poll(page, "() => document.querySelector('th[data-sort=score].sorted')")
        scores = [float(r[3]) for r in rows(page)]
        assert scores == sorted(scores)
        page.click("th[data-sort=score]")
        poll(page, "() => document.querySelector('th[data-sort=score].desc')")
        scores = [float(r[3]) for r in rows(page)]
        assert scores == sorted(scores, reverse=True)

        # Filter: x from 2 to 4 (a param range), then the status.
        page.select_option("select[name=range-param]", "x")
        page.fill("input[name=range-low]", "2")
        page.press("input[name=range-low]", "Enter")
        page.fill("input[name=range-high]", "4")
        page.press("input[name=range-high]", "Enter")
        poll(page, "() => document.querySelector('#shown').dataset.total === '3'")
        assert sorted(int(r[4]) for r in rows(page)) == [2, 3, 4]
        page.check("input[name=status][value=failed]")
        poll(page, "() => document.querySelector('#shown').dataset.total === '0'")

        # A trial's page: the five answers, its attempt, its log's tail.
        page.goto(url + "#/run/1/trial/4")
        poll(page, "() => document.querySelector('#outcome')")
        assert page.inner_text("#outcome") == "completed"
        answers = page.eval_on_selector_all("dl[data-answer]", "d => d.map(x => x.dataset.answer)")
        assert answers == ["run", "data", "ended", "cost", "concluded"]
        assert page.eval_on_selector_all("#attempts tbody tr", "r => r.length") == 1
        poll(page, "() => document.querySelector('#chart-curve')?.dataset.ready")
        assert not overlapping(figure_texts(page, "curve"))

        # The run's learning curves: every trial's three points, a click opens one.
        page.goto(url + "#/run/1/figures")
        poll(page, "() => document.querySelector('#chart-curves')?.dataset.ready")
        option = page.evaluate("""() => echarts.getInstanceByDom(
            document.querySelector('#chart-curves')).getOption()""")
        lines = [s for s in option["series"] if s["type"] == "line"]
        assert sorted(int(s["name"].split()[1]) for s in lines) == [1, 2, 3, 4, 5, 6]
        assert {len(s["data"]) for s in lines} == {3}
        assert [a["name"] for a in option["xAxis"] + option["yAxis"]] == [
            "step", "loss (minimize)"]
        assert not overlapping(figure_texts(page, "curves"))
    board.terminate()
    board.wait(timeout=30)
    assert not errors, errors
    assert all(r.startswith(url.split("#")[0].rstrip("/")) for r in requests), requests


PROBED = """
[campaign]
name = "figs"
agent = "list"
backend = "probe"
max_parallelism = 4
poll_interval = "1ms"

[agent.list]
points = [{points}]

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 9 }}
rate = {{ type = "float", low = 0.001, high = 1.0, log = true }}
kind = {{ type = "categorical", choices = ["a", "b", "c"] }}
"""


def test_figures_have_labelled_axes_no_overlapping_text_and_brushing_lists_trials(
    tmp_path: Path,
) -> None:
    write_plugin(tmp_path)
    points = ", ".join(f'{{x = {i % 10}, rate = {0.001 * 1.25 ** i:.6f}, kind = "{"abc"[i % 3]}"}}'
                       for i in range(30))
    (tmp_path / "campaign.toml").write_text(PROBED.format(points=points))
    done = start_dse(tmp_path, "run", "campaign.toml")
    assert done.wait(timeout=180) == 0
    board, url = dashboard(tmp_path)
    errors: list[str] = []
    figures = ("convergence", "parallel", "importance", "contour", "slice-x", "slice-rate",
               "slice-kind", "timeline")
    with browser_page(errors, []) as page:
        page.goto(url + "#/run/1/figures")
        for key in figures:
            poll(page, "k => document.querySelector(`#chart-${k}`)?.dataset.ready", key)
        names = {key: page.evaluate("""k => { const o = echarts.getInstanceByDom(
            document.querySelector(`#chart-${k}`)).getOption();
            return [...(o.xAxis || []), ...(o.yAxis || []), ...(o.parallelAxis || [])]
                .map(a => a.name || null); }""", key) for key in figures}
        assert names["convergence"] == ["trial", "value (minimize)"]
        assert names["parallel"] == ["x", "rate", "kind", "value"]
        assert names["importance"] == ["share of the importance (PED-ANOVA)", None]
        assert names["contour"][0] in ("x", "rate", "kind")
        assert names["contour"][1] in ("x", "rate", "kind")
        assert names["slice-rate"] == ["rate", "value"]
        assert names["timeline"] == ["time since the run started (s)", "slot"]
        # The importance bars name every param, and its shares sum to one.
        option = page.evaluate("""() => echarts.getInstanceByDom(
            document.querySelector('#chart-importance')).getOption()""")
        assert sorted(option["yAxis"][0]["data"]) == ["kind", "rate", "x"]
        assert abs(sum(option["series"][0]["data"]) - 1.0) < 1e-6
        # The contour's cells are coloured by their mean: as many colours as distinct means.
        fills = page.evaluate("""() => new Set([...document.querySelectorAll(
            '#chart-contour svg path')].map(p => p.getAttribute('fill'))
            .filter(f => f && f !== 'none' && f !== 'transparent')).size""")
        assert fills >= 10, fills
        for key in figures:
            texts = figure_texts(page, key)
            assert texts, key
            assert not overlapping(texts), (key, overlapping(texts))
        keep_screenshot(page, tmp_path, "dashboard-figures.png")

        # Brushing: drag along the first axis (x: it spans the data, 0 to 9, bottom to top)
        # over its upper part; the trials there are listed, each a link to its page.
        left, top, height = page.eval_on_selector("#chart-parallel", """n => {
            const r = n.getBoundingClientRect(); return [r.left, r.top, r.height]; }""")
        axis_x = left + 60
        page.mouse.move(axis_x, top + 40 - 2)
        page.mouse.down()
        page.mouse.move(axis_x, top + 40 + (height - 70) * 0.45, steps=8)
        page.mouse.up()
        selected = poll(page, "() => document.querySelector('#brushed').dataset.selected")
        numbers = sorted(int(n) for n in selected.split(","))
        assert 0 < len(numbers) < 30
        assert min((n - 1) % 10 for n in numbers) >= 4  # the top of the x axis: its largest
    board.terminate()
    board.wait(timeout=30)
    assert not errors, errors


PARETO = """
[campaign]
name = "mo"
agent = "list"
backend = "probe"
objectives = "pareto"
max_parallelism = 2
poll_interval = "1ms"

[agent.list]
points = [{{x = 1}}, {{x = 2}}, {{x = 3}}, {{x = 4}}, {{x = 5}}]

[backend.probe]
script = "mo_script:scored"

[[objectives]]
metric = "time"

[[objectives]]
metric = "acc"
direction = "maximize"

[space]
x = {{ type = "int", low = 0, high = 9 }}
"""

MO_SCRIPT = '''
from dse.testing import ProbeScript

ACC = {1: 50.0, 2: 80.0, 3: 60.0, 4: 70.0, 5: 90.0}


def scored(p):
    x = p["x"]
    time = {1: 1.0, 2: 2.0, 3: 3.0, 4: 3.5, 5: 5.0}[x]
    return ProbeScript(metrics={"time": time, "acc": ACC[x]})
'''


def pareto_dashboard(tmp_path: Path, script: str,
                     campaign: str) -> tuple[subprocess.Popen[str], str]:
    """A dashboard of the finished Pareto run of *campaign* (its probe script *script*)."""
    write_plugin(tmp_path)
    (tmp_path / "mo_script.py").write_text(script)
    (tmp_path / "campaign.toml").write_text(campaign)
    done = start_dse(tmp_path, "run", "campaign.toml")
    _, err = done.communicate(timeout=180)
    assert done.returncode == 0, err
    return dashboard(tmp_path)


def front_option(page: Any, url: str) -> Any:
    """The front figure's options, once the run's figures page drew it."""
    page.goto(url + "#/run/1/figures")
    poll(page, "() => document.querySelector('#chart-front')?.dataset.ready")
    return page.evaluate("""() => echarts.getInstanceByDom(
        document.querySelector('#chart-front')).getOption()""")


def test_a_pareto_runs_front_names_its_trials_and_a_click_opens_one(tmp_path: Path) -> None:
    board, url = pareto_dashboard(tmp_path, MO_SCRIPT, PARETO.format())
    errors: list[str] = []
    with browser_page(errors, []) as page:
        option = front_option(page, url)
        assert [a["name"] for a in option["xAxis"] + option["yAxis"]] == [
            "time (minimize)", "acc (maximize)"]
        dominated, front = option["series"]
        # Trials 3 (time 3, acc 60) and 4 (3.5, 70) are dominated by trial 2 (2, 80).
        assert sorted(p[2] for p in front["data"]) == [1, 2, 5]
        assert sorted(p[2] for p in dominated["data"]) == [3, 4]
        assert not overlapping(figure_texts(page, "front"))
        # A finished run's page is drawn once: the event stream's first event (and three of
        # the watch's reads after it) finds nothing newer than what the page was drawn from.
        poll(page, "() => document.getElementById('live').className === 'live on'")
        time.sleep(1.5)
        assert page.evaluate("() => document.body.dataset.generation") is None
        click_point(page, "#chart-front", 1, [5.0, 90.0],
                    "() => location.hash === '#/run/1/trial/5'")
        poll(page, "() => document.querySelector('#outcome')")
    board.terminate()
    board.wait(timeout=30)
    assert not errors, errors


MO3_SCRIPT = '''
from dse.testing import ProbeScript

# (time, acc, mem): 3 is dominated on time and acc by 2, but uses the least memory.
SCORES = {1: (1.0, 50.0, 9.0), 2: (2.0, 80.0, 8.0), 3: (3.0, 60.0, 1.0), 4: (3.5, 70.0, 8.5),
          5: (5.0, 90.0, 9.5)}


def scored(p):
    time, acc, mem = SCORES[p["x"]]
    return ProbeScript(metrics={"time": time, "acc": acc, "mem": mem}, node=f"node{p['x'] % 2}")
'''


def test_three_objectives_front_plots_the_two_chosen_and_the_timeline_has_each_nodes_slots(
    tmp_path: Path,
) -> None:
    board, url = pareto_dashboard(tmp_path, MO3_SCRIPT, PARETO.format().replace(
        "[space]", '[[objectives]]\nmetric = "mem"\n\n[space]'))
    errors: list[str] = []
    with browser_page(errors, []) as page:
        option = front_option(page, url)
        assert [a["name"] for a in option["xAxis"] + option["yAxis"]] == [
            "time (minimize)", "acc (maximize)"]
        dominated, front = option["series"]
        # On all three objectives only trial 4 is dominated (by 2); 3 is on the front for
        # its memory, though 2 beats it on the two plotted.
        assert sorted(p[2] for p in front["data"]) == [1, 2, 3, 5]
        assert [p[2] for p in dominated["data"]] == [4]
        assert front["type"] == "scatter"  # a projection: no staircase
        page.select_option("select[data-axis='y']", "2")
        poll(page, """() => echarts.getInstanceByDom(document.querySelector('#chart-front'))
            ?.getOption().yAxis[0].name === 'mem (minimize)'""")
        assert not overlapping(figure_texts(page, "front"))
        timeline = page.evaluate("""() => echarts.getInstanceByDom(
            document.querySelector('#chart-timeline')).getOption()""")
        assert timeline["yAxis"][0]["name"] == "node · slot"
        labels = timeline["yAxis"][0]["data"]
        assert {label.split(" · ")[0] for label in labels} == {"node0", "node1"}
        assert not overlapping(figure_texts(page, "timeline"))
    board.terminate()
    board.wait(timeout=30)
    assert not errors, errors
