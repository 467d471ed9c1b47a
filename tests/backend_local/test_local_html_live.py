"""`dse report --html OUT --watch`: the page of a running campaign, rewritten until it ends.

A real local-backend campaign runs in the background, its first trial held open until the test
releases it (a file it waits for), so the run stays `running` as long as the test needs. The
watch is a real `dse report` process; the page is read as written and opened in headless
Chromium (support.browser), which reloads it by itself while it carries the refresh. Every
wait polls for what it waits for, with generous timeouts: a loaded 2-core machine passes.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from dse.cli._cli import main
from support.browser import browser_page, figure_data
from support.cli import run_dse, start_dse, wait_for_running, write_plugin

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from pathlib import Path

WORK = '''
import pathlib, sys, time
import dse.trial
p = dse.trial.params()
if p["x"] == 0:
    gate = pathlib.Path({gate!r})
    deadline = time.monotonic() + 300
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
dse.trial.report({{"loss": float(p["x"]) + 1.0}})
'''

CAMPAIGN = f'''
[campaign]
name = "live"
agent = "list"
backend = "local"
mode = "rolling"
max_parallelism = 2
max_trials = 6

[agent.list]
points = [{{x = 0}}, {{x = 1}}, {{x = 2}}, {{x = 3}}, {{x = 4}}, {{x = 5}}]

[environment]
command = ["{sys.executable}", "work.py"]
time_limit = "600s"

[[objectives]]
metric = "loss"

[space]
x = {{ type = "int", low = 0, high = 9 }}
'''

LIVE = re.compile(r'<p id="live" class="live">live: refreshed at (\d\d:\d\d:\d\d), every 1 s,')
REFRESH = '<meta http-equiv="refresh" content="1">'


def poll(what: Callable[[], str | None], timeout: float = 120.0) -> str:
    """What *what* returns once it returns something, polling; fail after *timeout* s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found is not None:
            return found
        time.sleep(0.05)
    pytest.fail(f"nothing after {timeout} s: {what.__doc__}")


def page_text(page: Path, must: str) -> Callable[[], str | None]:
    def read() -> str | None:
        """the page, with what it must have"""
        try:
            text = page.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return text if must in text else None

    return read


def running_campaign(project: Path) -> subprocess.Popen[str]:
    """`dse run` of a campaign whose first trial waits for the file `gate` (the other five
    have ended when this returns): the run is `running` until the test makes the file."""
    write_plugin(project)
    (project / "work.py").write_text(WORK.format(gate=str(project / "gate")))
    (project / "campaign.toml").write_text(CAMPAIGN)
    run = start_dse(project, "run", "campaign.toml")
    wait_for_running(project / ".dse" / "dse.sqlite", 5, timeout=180,
                     sql="SELECT COUNT(*) FROM trials WHERE status = 'completed'")
    return run


def finish(run: subprocess.Popen[str], project: Path) -> None:
    (project / "gate").touch()
    err = run.communicate(timeout=180)[1]
    assert run.returncode == 0, err


T = TypeVar("T")

RELOAD_RACES = ("context was destroyed", "Cannot find context with specified id",
                "frame was detached")
"""What Chromium answers a read of a page that reloaded under it: the old page's JavaScript
context gone (destroyed while the read ran, or before the read found it: DOM.describeNode),
or its frame detached."""


def reloaded_while_read(exc: Exception) -> bool:
    """Whether *exc* says the page reloaded while it was read (:data:`RELOAD_RACES`)."""
    return any(race in str(exc) for race in RELOAD_RACES)


def between_reloads(browser: Any, read: Callable[[], T]) -> T:
    """What *read* reads of a page that reloads itself every second, read between two of its
    loads (a reload that destroys the page while it is read — on a fast machine, within the
    second — is waited out and the page read again, for a bounded minute)."""
    error = pytest.importorskip("playwright.sync_api").Error
    deadline = time.monotonic() + 60
    while True:
        try:
            return read()
        except error as exc:
            if not reloaded_while_read(exc) or time.monotonic() > deadline:
                raise
            browser.wait_for_load_state("load")


def read_between_reloads(browser: Any) -> tuple[str, str, dict[str, Any]]:
    """The live note, the refresh interval and the timeline's figure data of the page."""
    return between_reloads(browser, lambda: (
        browser.inner_text("#live"),
        browser.get_attribute('meta[http-equiv="refresh"]', "content"),
        figure_data(browser, "timeline")))


def test_the_page_refreshes_while_the_run_runs_and_stops_once_it_ended(tmp_path: Path) -> None:
    run = running_campaign(tmp_path)
    page = tmp_path / "page.html"
    watch = start_dse(tmp_path, "report", "live", "--html", str(page), "--watch", "1")
    try:
        first = poll(page_text(page, REFRESH))
        assert "campaign live run 1: running" in first
        # The timeline draws the trial still running up to the time of the page.
        assert "1 still running (drawn up to now)" in first
        # Without --watch, a running run's page is a snapshot, and says so.
        snap = tmp_path / "snapshot.html"
        once = run_dse(tmp_path, "report", "live", "--html", str(snap), timeout=120)
        assert once.returncode == 0, once.stderr
        snapshot = snap.read_text(encoding="utf-8")
        assert 'http-equiv="refresh"' not in snapshot
        assert re.search(r'<p id="snapshot" class="live">The run was running at'
                         r" \d\d:\d\d:\d\d, when this page was written; it is not refreshed",
                         snapshot), snapshot[:2000]
        at = LIVE.search(first)
        assert at is not None, first[:600]
        # Rewritten while the run runs: a later page says a later time.
        later = poll(lambda: (t if (m := LIVE.search(t := page.read_text(encoding="utf-8")))
                              and m[1] != at[1] else None))
        assert REFRESH in later

        errors: list[str] = []
        with browser_page(errors, []) as browser:
            browser.goto(page.as_uri(), wait_until="load")
            note, refresh, timeline = read_between_reloads(browser)
            # The browser reloads the page by itself.
            with browser.expect_event("load", timeout=60_000):
                pass
            report = between_reloads(browser, lambda: browser.inner_text("#report"))
            assert report.startswith("campaign live run 1: running")
        assert errors == []
        assert re.fullmatch(r"live: refreshed at \d\d:\d\d:\d\d, every 1 s, while the run is"
                            r" running \(dse report --watch\)\.", note), note
        assert refresh == "1"
        # The trial still running is on the timeline, drawn up to the time of the page.
        assert "running" in [t[0] for t in timeline["texts"]]
    finally:
        finish(run, tmp_path)
    err = watch.communicate(timeout=180)[1]
    assert watch.returncode == 0, err
    assert err.splitlines()[-1] == (f"HTML report of live run 1: {page} (the run is completed:"
                                    " not rewritten any more)")
    final = page.read_text(encoding="utf-8")
    assert "campaign live run 1: completed" in final
    assert 'http-equiv="refresh"' not in final
    assert 'id="live"' not in final
    assert sorted(p.name for p in tmp_path.glob("*page.html*")) == ["page.html"]


def test_ctrl_c_stops_the_watch_and_the_page_stops_refreshing(tmp_path: Path) -> None:
    run = running_campaign(tmp_path)
    page = tmp_path / "page.html"
    watch = start_dse(tmp_path, "report", "live", "--html", str(page), "--watch", "2")
    try:
        poll(page_text(page, '<meta http-equiv="refresh" content="2">'))
        os.kill(watch.pid, signal.SIGINT)
        err = watch.communicate(timeout=120)[1]
    finally:
        finish(run, tmp_path)
    assert watch.returncode == 130, err
    assert err.splitlines()[-1] == "dse: error: interrupted"
    stopped = page.read_text(encoding="utf-8")
    assert 'http-equiv="refresh"' not in stopped
    assert re.search(r'<p id="stopped" class="live">The watch stopped at \d\d:\d\d:\d\d, the'
                     " run still running: this page is not refreshed any more.</p>", stopped)
    assert "campaign live run 1: running" in stopped
    assert sorted(p.name for p in tmp_path.glob("*page.html*")) == ["page.html"]


def test_the_watch_ends_when_the_runs_controller_is_gone(tmp_path: Path) -> None:
    run = running_campaign(tmp_path)
    os.kill(run.pid, signal.SIGKILL)  # the record keeps the run `running`; nobody holds it
    run.communicate(timeout=60)
    page = tmp_path / "page.html"
    try:
        watch = run_dse(tmp_path, "report", "live", "--html", str(page), "--watch", "1",
                        timeout=120)
    finally:
        (tmp_path / "gate").touch()  # the orphaned trial ends
    assert watch.returncode == 0, watch.stderr
    assert watch.stderr.splitlines()[-1] == (
        f"HTML report of live run 1: {page} (the run is running, without a controller: not"
        " rewritten any more)")
    final = page.read_text(encoding="utf-8")
    assert 'http-equiv="refresh"' not in final
    assert re.search(r'<p id="stopped" class="live">The watch stopped at \d\d:\d\d:\d\d, no'
                     r" controller runs it \(its controller is gone; dse run resumes it\):"
                     " this page is not refreshed any more.</p>", final), final[:2000]


def test_watch_is_in_the_help_and_needs_html(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--watch [SECONDS]" in help_text
    assert "rewrite the page every SECONDS (default 10)" in help_text
    assert main(["report", "live", "--watch"]) == 2
    assert capsys.readouterr().err.strip() == (
        "dse: error: dse report: --watch rewrites the page --html writes (give --html"
        " OUT.html, without --json)")
    with pytest.raises(SystemExit):
        main(["report", "live", "--html", "p.html", "--watch", "0"])
    assert "seconds between pages, from 1 to 86400" in capsys.readouterr().err
