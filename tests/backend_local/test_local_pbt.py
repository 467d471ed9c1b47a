"""Population-based training on real processes (the local backend): a population of 8,
members in the worst quantile replaced by copies of the best members' checkpoints with
perturbed learning rates; with the controller killed (``kill -9``) part way and the run
resumed, no lineage is broken, no checkpoint overwritten, no step run twice and the budget
charges exactly what ran."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from typing import TYPE_CHECKING

import dse
from dse.report._curves import learning_curves
from support.pbt import CAMPAIGN, MAX_STEP, pbt_workload
from support.pbt_checks import check_population, lineage_rows
from support.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

LOCAL = """
[backend.local]
cpus = 8

[backend.local.price]
cpu_hour = 3600

[budget]
money = "5000 USD"
"""


def _write(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text(pbt_workload())
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(
        name="pbt", backend="local", parallel=8, extra_campaign="", python=sys.executable,
        workload="w.py", extra_environment="", max_step=MAX_STEP, population=8) + LOCAL)


def _run(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def test_a_population_of_8_exploits_and_explores_with_every_lineage_intact(
    tmp_path: Path,
) -> None:
    _write(tmp_path)
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lineage = check_population(tmp_path, population=8)
    child = min(lineage)
    parent, step, member = lineage[child]
    shown = subprocess.run([sys.executable, "-m", "dse", "show", f"pbt:{child}"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert (f"a copy of trial {parent}'s checkpoint (it had reported step {step}), in the"
            f" place of trial {member}") in shown.stdout
    assert "params lr: " in shown.stdout
    member_shown = subprocess.run([sys.executable, "-m", "dse", "show", f"pbt:{member}"],
                                  cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "EXPLOITED" in member_shown.stdout, member_shown.stdout
    assert f"replaced by a copy of trial {parent}" in member_shown.stdout
    # The learning curves join each copy to the point of the trial it started from.
    store = dse.Store(tmp_path / ".dse" / "dse.sqlite")
    try:
        (run,) = store.reads.campaigns()
        page = [{"row": t.id, "number": t.number, "status": t.status.value, "score": t.score,
                 "cached": t.cache_of is not None, "valid": True}
                for t in store.reads.trials(run.id)]
        curves = learning_curves(store, run.id, run.spec, page)
        assert curves is not None
        assert curves.rungs == []
        drawn = {c.number: c for c in curves.curves}
        starts = {c.points[0] for n, c in drawn.items() if n in lineage and c.points}
        assert {b for _, b in curves.links} == starts
        for (step, value), _ in curves.links:
            assert any((step, value) in c.points for c in drawn.values())
    finally:
        store.close()


def test_a_controller_killed_mid_population_resumes_with_every_lineage_intact(
    tmp_path: Path,
) -> None:
    _write(tmp_path)
    controller = subprocess.Popen([sys.executable, "-m", "dse", "run", "c.toml"],
                                  cwd=tmp_path, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: controller.poll() is not None or lineage_rows(tmp_path) >= 2, 120,
                   "2 exploits")
        assert controller.poll() is None, controller.communicate()[0]
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=30)
    finally:
        if controller.poll() is None:
            controller.kill()
        controller.communicate()
    with contextlib.closing(sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")) as db:
        before = db.execute("SELECT trial_id, parent_id, parent_step FROM lineage").fetchall()
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    check_population(tmp_path, population=8)
    with contextlib.closing(sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")) as db:
        after = db.execute("SELECT trial_id, parent_id, parent_step FROM lineage").fetchall()
    assert set(before) <= set(after)  # what was recorded stands


def test_a_population_larger_than_max_parallelism_is_said_once(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text(pbt_workload())
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(
        name="pbt", backend="local", parallel=4, extra_campaign="", python=sys.executable,
        workload="w.py", extra_environment="", max_step=MAX_STEP, population=8) + LOCAL)
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "STEP_S": "0.02"})
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in (done.stdout + done.stderr).splitlines()
            if "stopping.pbt.population" in line]
    assert said == ["dse: warning: stopping.pbt.population = 8 but max_parallelism = 4: the"
                    " members that wait for room are judged late, against members that ran"
                    " ahead (give max_parallelism >= population)"]
    check_population(tmp_path, population=8)
