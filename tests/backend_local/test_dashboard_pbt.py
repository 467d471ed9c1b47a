"""`dse dashboard` of a population-based training run in a real browser (Chromium through
Playwright): a trial made by an exploit says where its checkpoint came from and what changed,
its donor lists the trials that copied it, and the learning curves join each copy to the
point it started from."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest

from support.browser import browser_page
from support.dashboard import dashboard
from support.pbt import CAMPAIGN, MAX_STEP, pbt_workload

if TYPE_CHECKING:
    from pathlib import Path


def poll(page: Any, script: str, timeout: float = 60.0) -> Any:
    """What *script* (a function of the page) returns once truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = page.evaluate(script)
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"never true within {timeout} s: {script}")


def test_the_dashboard_shows_a_trials_lineage_and_joins_copies_on_the_curves(
    tmp_path: Path,
) -> None:
    (tmp_path / "w.py").write_text(pbt_workload())
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(
        name="pbt", backend="local", parallel=8, extra_campaign="", python=sys.executable,
        workload="w.py", extra_environment="", max_step=MAX_STEP, population=8)
        + "\n[backend.local]\ncpus = 8\n")
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    db = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    child, parent, step, member = db.execute(
        "SELECT t.number, p.number, l.parent_step, m.number FROM lineage l JOIN trials t"
        " ON t.id = l.trial_id JOIN trials p ON p.id = l.parent_id JOIN trials m"
        " ON m.id = l.member_id ORDER BY t.number LIMIT 1").fetchone()
    # Each copy that reported a point is joined (one made as its donor finished, or a cache
    # hit, has none).
    links = db.execute("SELECT COUNT(*) FROM lineage l WHERE EXISTS (SELECT 1 FROM progress p"
                       " WHERE p.trial_id = l.trial_id)").fetchone()[0]
    assert links
    board, url = dashboard(tmp_path)
    errors: list[str] = []
    try:
        with browser_page(errors, []) as page:
            page.goto(url + f"#/run/1/trial/{child}")
            text = poll(page, "() => document.querySelector('#lineage')?.textContent")
            assert (f"started from a copy of trial {parent}'s checkpoint (it had reported step"
                    f" {step}), in the place of trial {member}; lr: ") in text
            page.goto(url + f"#/run/1/trial/{parent}")
            poll(page, "() => document.querySelector('h1')?.textContent"
                       f".includes('trial {parent} ')")
            text = poll(page, "() => document.querySelector('#lineage')?.textContent")
            assert f"copied by trial {child} at step {step}" in text
            page.goto(url + "#/run/1/figures")
            poll(page, "() => document.querySelector('#chart-curves')?.dataset.ready")
            option = page.evaluate("""() => echarts.getInstanceByDom(
                document.querySelector('#chart-curves')).getOption()""")
            joined = [s for s in option["series"] if s["name"] == "started from a copy of"]
            assert len(joined) == links
            assert all(s["lineStyle"]["type"] == "dashed" for s in joined)
    finally:
        board.terminate()
        board.wait(timeout=30)
    assert not errors, errors
