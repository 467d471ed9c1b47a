"""A money ceiling on real processes: the campaign runs exactly what it can afford."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

import dse
from dse.report._report import summarize
from support.cli import run_dse, write_plugin

if TYPE_CHECKING:
    from pathlib import Path

# 1 USD per CPU-second, one trial at a time. A trial may run 10 s plus the local backend's
# overrun (a grace of 1 s + 1 s): 12 USD are reserved before each. Each runs 3 s and a little
# (its process starting), so on an idle machine after 6 trials at most 33 - 12 = 21 USD are
# spent and a 7th fits; after 7, more than 21 are, and an 8th does not. On a loaded machine a
# trial takes longer, and fewer fit: the test checks the rule, not the count.
RESERVED = 12.0
CEILING = 33.0
CAMPAIGN = """
[campaign]
name = "afford"
agent = "list"
backend = "local"
mode = "rolling"
max_parallelism = 1
poll_interval = ["0.05s", "0.2s"]
serves = ["tiles-q4"]

[agent.list]
points = [POINTS]

[environment]
command = ["python", "work.py", "{x}"]
time_limit = "10s"

[backend.local]
cpus = 8
grace = "1s"

[backend.local.price]
cpu_hour = 3600

[budget]
money = "33 USD"

[[objectives]]
metric = "value"

[space]
x = { type = "int", low = 0, high = 1000 }
"""


def test_a_money_ceiling_runs_exactly_the_trials_it_affords(tmp_path: Path) -> None:
    project = write_plugin(tmp_path)
    (project / "work.py").write_text(
        "import sys, time\nimport dse.trial\n"
        "time.sleep(3)\ndse.trial.report({'value': float(sys.argv[1])})\n"
    )
    points = ", ".join(f"{{ x = {i} }}" for i in range(1, 30))
    (project / "campaign.toml").write_text(CAMPAIGN.replace("POINTS", points))

    proc = run_dse(project, "run", "campaign.toml", timeout=120)

    assert proc.returncode == 0, proc.stderr
    assert "budget exhausted" in (proc.stdout + proc.stderr).lower()
    store = dse.Store(project / ".dse" / "dse.sqlite")
    try:
        (run,) = store.reads.campaigns()
        assert (run.status, run.end_reason) == ("budget_exhausted", "budget_exhausted")
        trials = store.reads.trials(run.id)
        ran = len(trials)
        assert ran >= 2
        assert [t.status for t in trials] == [dse.TrialStatus.COMPLETED] * ran
        summary = summarize(store, run.id)
        assert CEILING - RESERVED < summary.spent.money <= CEILING
        # Each trial's spend is its own run time at 1 USD per second: never the reservation.
        spends = []
        for attempt in store.reads.attempts(run.id):
            spend = attempt.spend
            assert spend is not None
            assert spend.money == pytest.approx(spend.cpu_s, rel=1e-12)
            assert 3.0 < spend.money < RESERVED
            spends.append(spend.money)
        # Exactly what it affords: the last trial's reservation fitted beside what the others
        # had spent; one more would not have.
        assert sum(spends[:-1]) + RESERVED <= CEILING
        assert sum(spends) + RESERVED > CEILING
        assert summary.effective == ran
        assert summary.cost_per_effective == summary.spent.money / ran
        assert summary.throughput_per_h > 0
    finally:
        store.close()

    report = run_dse(project, "report", "campaign.toml", "--json")
    assert report.returncode == 0, report.stderr
    (run_figures,) = json.loads(report.stdout)["runs"]
    assert run_figures["status"] == "budget_exhausted"
    assert run_figures["budget_reason"] == "money ceiling 33 USD"
    money = run_figures["budget"]["money"]
    assert money["ceiling"] == 33.0
    assert money["spent"] == pytest.approx(summary.spent.money)
    assert money["spent"] <= money["ceiling"]
    assert run_figures["effective"] == ran
    assert run_figures["throughput_per_h"] == pytest.approx(summary.throughput_per_h)
    assert run_figures["effective_per_h"] == pytest.approx(summary.effective_per_h)
    assert run_figures["cost_per_effective"] == pytest.approx(summary.spent.money / ran)
    text = run_dse(project, "report", "campaign.toml").stdout
    assert f"money {summary.spent.money:.2f} / 33.00 USD" in text
