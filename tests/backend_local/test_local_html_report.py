"""The HTML report of a real local-backend campaign, opened in headless Chromium.

The campaign runs real processes (one configuration in four fails); ``dse report --html``
writes the page; Debian's Chromium (``.ci/run`` installs it) loads it through Playwright with
no network. The screenshot is kept in the test's tmp dir as the CI artifact.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from dse._html import PLOTS
from support.cli import run_dse, write_plugin

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

CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no Chromium here: `apt-get install chromium` (.ci/run installs it)")
    return path


def test_the_html_report_loads_in_chromium_offline_with_every_plot(tmp_path: Path) -> None:
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    browser_path = chromium()
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
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report.as_uri(), wait_until="load")
            loaded = {
                key: page.eval_on_selector(
                    f"#plot-{key}", "img => img.complete && img.naturalWidth > 300")
                for key in PLOTS
            }
            captions = page.eval_on_selector_all("figcaption", "cs => cs.map(c => c.textContent)")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()

    assert errors == []
    assert loaded == dict.fromkeys(PLOTS, True)
    assert len(captions) == len(PLOTS)
    assert any("completed, valid trials" in c for c in captions)
    # Nothing but the page itself and its embedded images: it needs no network.
    assert all(url.startswith(("file:", "data:")) for url in requests), requests
    assert (tmp_path / "report.png").stat().st_size > 20_000


def test_report_html_names_the_missing_run_in_one_line(tmp_path: Path) -> None:
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


@pytest.mark.parametrize("outcome", ["fail", "none"])
def test_a_run_with_no_completed_trial_still_renders_every_plot(tmp_path: Path,
                                                               outcome: str) -> None:
    import dse
    from dse._html import render_html
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
