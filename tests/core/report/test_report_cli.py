"""`dse report`, `dse status` and `dse run` on a budgeted campaign: spend against each ceiling
and the three numbers, in real subprocesses on real SQLite files."""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
from typing import TYPE_CHECKING, Any

import pytest
from rich.console import Console as RichConsole

import dse
from dse.launch._console import LiveView
from dse.report._terminal import Console
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent
from support.cli import run_dse, write_plugin

if TYPE_CHECKING:
    from pathlib import Path

    from dse.engine._engine import Engine

# Every probe job runs 0.0625 s: a power of two, so its spend (end minus start) is exact even
# at the magnitude of epoch seconds.
# At 3600 USD per CPU-hour one trial costs 0.0625 USD and reserves its 0.1 s time limit,
# 0.10 USD. Points with x % 4 == 3 fail with exit code 3.
SCRIPT = '''
from dse import JobState
from dse.testing import ProbeScript


def timed(params):
    if params["x"] % 4 == 3:
        return ProbeScript(seconds=0.0625, state=JobState.FAILED, exit_code=3)
    return ProbeScript(seconds=0.0625, metrics={"value": float(params["x"])})
'''

CAMPAIGN = """
[campaign]
name = "{name}"
agent = "list"
backend = "probe"
max_parallelism = 2
poll_interval = "1ms"
serves = {serves}

[agent.list]
points = {points}

[environment]
time_limit = "100ms"

[budget]
money = "1 USD"

[backend.probe]
script = "budget_script:timed"

[backend.probe.price]
cpu_hour = 3600

[[objectives]]
metric = "value"

[space]
x = {{ type = "int", low = 0, high = 1000 }}
"""

TRIAL_COST = 0.0625
WORST_CASE = 0.1


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory with the list agent plugin and the timed probe script."""
    (tmp_path / "budget_script.py").write_text(SCRIPT)
    return write_plugin(tmp_path)


def write_campaign(project: Path, name: str, points: list[int], serves: list[str]) -> Path:
    path = project / f"{name}.toml"
    path.write_text(CAMPAIGN.format(
        name=name, serves=json.dumps(serves),
        points="[" + ", ".join(f"{{x = {x}}}" for x in points) + "]",
    ))
    return path


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture
def paid(project: Path) -> Path:
    """A campaign that runs out of money (1 USD) before the agent runs out of points; point
    2 is proposed twice (the second time a cache hit)."""
    points = [1, 2, 3, 2, *range(4, 40)]
    campaign = write_campaign(project, "paid", points, ["latency"])
    proc = ok(run_dse(project, "run", str(campaign)))
    # A spent budget is a normal end, said plainly on the last line.
    assert proc.stdout.splitlines()[-1] == "budget exhausted: money ceiling 1 USD; spent 0.94 USD"
    assert "dse: warning" not in proc.stderr
    assert "budget exhausted: money ceiling 1 USD" in proc.stderr
    assert "trial 1 completed; best 1 (trial 1); spent 0.06/1.00 USD" in proc.stderr
    return campaign


def record(project: Path, sql: str, *args: Any) -> list[Any]:
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def test_report_json_has_spend_within_the_ceiling_and_the_three_numbers(
    project: Path, paid: Path
) -> None:
    doc = json.loads(ok(run_dse(project, "report", "paid", "--json")).stdout)
    (run,) = doc["runs"]
    assert (run["campaign"], run["status"], run["end_reason"]) == (
        "paid", "budget_exhausted", "budget_exhausted"
    )
    assert run["budget_reason"] == "money ceiling 1 USD"

    # Spend against the ceiling: never past it, and nothing more affordable was left.
    money = run["budget"]["money"]
    assert (money["ceiling"], money["unit"]) == (1.0, "USD")
    assert money["spent"] <= money["ceiling"]
    assert money["spent"] + WORST_CASE > money["ceiling"]
    assert set(run["budget"]) == {"money"}

    # The figures agree with the record, attempt by attempt.
    spends = [json.loads(s) for (s,) in record(project, "SELECT spend FROM attempts"
                                               " WHERE spend IS NOT NULL")]
    assert run["spent"]["money"] == pytest.approx(sum(s["money"] for s in spends))
    assert run["spent"]["money"] == pytest.approx(TRIAL_COST * len(spends))
    assert run["spent"]["cpu_hours"] == pytest.approx(sum(s["cpu_s"] for s in spends) / 3600)
    statuses = dict(record(project, "SELECT status, COUNT(*) FROM trials GROUP BY status"))
    assert run["trials"] == {"total": sum(statuses.values()), **statuses}
    assert run["effective"] == statuses["completed"]
    assert run["finished"] == statuses["completed"] + statuses["failed"]
    assert run["failures"] == {"nonzero_exit": statuses["failed"]}

    # The three numbers, by their definitions.
    wall = run["wall_clock_s"]
    (created, ended), = record(project, "SELECT created_at, ended_at FROM campaigns")
    assert wall == pytest.approx(ended - created)
    assert run["throughput_per_h"] == pytest.approx(run["finished"] * 3600 / wall)
    assert run["effective_per_h"] == pytest.approx(run["effective"] * 3600 / wall)
    assert run["cost_per_effective"] == pytest.approx(run["spent"]["money"] / run["effective"])
    assert run["compute_per_effective_h"]["cpu"] == pytest.approx(
        run["spent"]["cpu_hours"] / run["effective"]
    )

    # The cache hit cost nothing and points to the trial it reuses.
    assert run["trials"]["cached"] == 1
    assert run["cache_hits"] == [{"trial": 4, "reuses_run": 1, "reuses_trial": 2,
                                  "cost": 0.0, "reused_cost": TRIAL_COST}]
    assert run["best"] == {"trial": 1, "metric": "value", "direction": "minimize",
                           "score": 1.0, "params": {"x": 1}}

    (latency,) = doc["objectives"]
    assert (latency["objective"], latency["runs"]) == ("latency", [1])
    assert latency["spent"]["money"] == pytest.approx(run["spent"]["money"])
    assert latency["cost_per_effective"] == pytest.approx(run["cost_per_effective"])


def test_report_text_shows_each_figure_on_its_line(project: Path, paid: Path) -> None:
    doc = json.loads(ok(run_dse(project, "report", "--json")).stdout)
    (run,) = doc["runs"]
    out = ok(run_dse(project, "report", str(paid))).stdout
    lines = out.splitlines()
    assert lines[0] == "campaign paid run 1: budget_exhausted (budget_exhausted:" \
        " money ceiling 1 USD)"
    completed, failed = run["trials"]["completed"], run["trials"]["failed"]
    expected = [
        "  best         trial 1: value=1 (minimize), params {\"x\": 1}",
        f"  trials       {run['trials']['total']}: {completed} completed, {failed} failed,"
        " 1 cached",
        f"  failures     nonzero_exit {failed}",
        "  spend        money 0.94 / 1.00 USD",
        f"  effective    {run['effective_per_h']:,.0f} results/h ({completed} usable)",
        f"  cost         {run['cost_per_effective']:.2f} USD,",
        "  cache hits   1, costing nothing: trial 4 reuses trial 2 (0.06 USD)",
        "objective latency: run 1; spent 0.94 USD,",
    ]
    for needle in expected:
        assert any(line.startswith(needle) for line in lines), (needle, out)
    assert any(line.startswith("  throughput   ") and "trials/h" in line for line in lines)
    assert "per effective result" in out


def test_status_shows_the_three_numbers(project: Path, paid: Path) -> None:
    report = json.loads(ok(run_dse(project, "report", "--json")).stdout)["runs"][0]
    (run,) = json.loads(ok(run_dse(project, "status", "--json")).stdout)
    for key in ("throughput_per_h", "effective_per_h", "cost_per_effective"):
        assert run[key] == pytest.approx(report[key]), key
    assert (run["spent"], run["currency"]) == (pytest.approx(0.9375), "USD")
    text = ok(run_dse(project, "status")).stdout
    for header in ("trials/h", "results/h", "cost/result", "spent"):
        assert header in text
    row = next(line for line in text.splitlines() if " paid " in line)
    assert f"{report['cost_per_effective']:.2f} USD" in row
    assert "0.94 USD" in row


def test_objectives_roll_up_every_run_that_serves_them(project: Path, paid: Path) -> None:
    # A second campaign serves latency and area; its point 1 is a cache hit of run 1.
    other = write_campaign(project, "other", [1, 100, 101], ["latency", "area"])
    ok(run_dse(project, "run", str(other)))
    doc = json.loads(ok(run_dse(project, "report", "other", "--json")).stdout)
    (run,) = doc["runs"]
    assert (run["status"], run["end_reason"]) == ("completed", "agent_exhausted")
    assert run["spent"]["money"] == pytest.approx(2 * TRIAL_COST)
    assert run["cache_hits"] == [{"trial": 1, "reuses_run": 1, "reuses_trial": 1,
                                  "cost": 0.0, "reused_cost": TRIAL_COST}]
    paid_run = json.loads(ok(run_dse(project, "report", "1", "--json")).stdout)["runs"][0]
    objectives = {o["objective"]: o for o in doc["objectives"]}
    assert set(objectives) == {"area", "latency"}
    assert objectives["area"]["runs"] == [2]
    assert objectives["latency"]["runs"] == [1, 2]
    latency = objectives["latency"]
    assert latency["spent"]["money"] == pytest.approx(
        paid_run["spent"]["money"] + run["spent"]["money"]
    )
    assert latency["effective"] == paid_run["effective"] + run["effective"]
    assert latency["cost_per_effective"] == pytest.approx(
        latency["spent"]["money"] / latency["effective"]
    )
    text = ok(run_dse(project, "report", "other")).stdout
    assert "objective latency: runs 1, 2; spent 1.06 USD" in text
    assert "trial 1 reuses trial 1 of run 1 (0.06 USD)" in text


def assert_one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.splitlines()[0]]
    assert proc.stderr.startswith("dse: error: ")
    assert needle in proc.stderr


def test_a_bad_target_is_one_error_line(project: Path, paid: Path) -> None:
    assert_one_line_error(run_dse(project, "report", "nope"), "no campaign run named 'nope'")
    assert_one_line_error(run_dse(project, "report", "missing.toml"), "cannot read")


def test_report_without_a_record_is_one_error_line(project: Path) -> None:
    assert_one_line_error(run_dse(project, "report"), "no dse record")


# -- the live view on a terminal -----------------------------------------------------------

def test_the_live_view_shows_the_three_numbers_and_budget_bars(tmp_path: Path) -> None:
    camp = dse.campaign_from_dict({
        "campaign": {"name": "live", "max_parallelism": 2, "mode": "rolling",
                     "poll_interval": "1h"},
        "space": {"x": {"type": "int", "low": 0, "high": 100}},
        "objectives": [{"metric": "value"}],
        "environment": {"time_limit": "10s"},
        "budget": {"money": "1 USD", "trials": 50, "wall_clock": "1h",
                   "compute": "1 cpu-hours"},
        "backend": {"probe": {"price": {"cpu_hour": 36}}},
    }, workspace=tmp_path / "ws")
    frames: list[str] = []

    class Recording(LiveView):
        """Keeps the frame of each pass as a terminal would show it."""

        def on_pass(self, engine: Engine) -> None:
            screen = RichConsole(file=io.StringIO(), width=120, record=True)
            screen.print(self._render(engine))
            frames.append(screen.export_text())

    console = Console()
    console.out = console.err = RichConsole(file=io.StringIO(), force_terminal=True, width=120)
    clock = FakeClock(start=0.0)
    engine = dse.Engine(
        camp, agent=ScriptedAgent({"x": i} for i in range(100)),
        backend=ProbeBackend(
            lambda p: ProbeScript(seconds=6.0, metrics={"value": float(p["x"])}), clock=clock
        ),
        store=dse.Store(camp.workspace / "dse.sqlite"), clock=clock, listener=Recording(console),
    )
    result = engine.run()
    assert result.status == "budget_exhausted"
    # 1 cent per second: after the first pass (6 s) two trials spent 6 cents each, and the
    # next two reserve their 10 s time limit (10 cents each).
    first = frames[0]
    assert "0.12 spent + 0.20 reserved / 1.00 USD" in first
    assert "0.00333 spent + 0.00556 reserved / 1 cpu-hours" in first
    assert "2 ended + 2 in flight / 50" in first
    assert "6.0s / 1h00m" in first
    assert "1,200 trials/h, 1,200 results/h, 0.06 USD, 0.00167 cpu-h per result" in first
    # 30 cells: 0.12 of 1 USD spent is 4 of them, 0.20 reserved the next 6.
    assert "money        ████▒▒▒▒▒▒····················  0.12 spent" in first
    last = frames[-1]
    assert "0.96 spent + 0.00 reserved / 1.00 USD" in last


def test_report_html_without_matplotlib_says_what_to_install_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dse.cli._cli import main

    store = dse.Store(tmp_path / ".dse" / "dse.sqlite")
    campaign = dse.campaign_from_dict(
        {"campaign": {"name": "plain", "max_trials": 2},
         "space": {"x": {"type": "int", "low": 0, "high": 9}},
         "objectives": [{"metric": "value"}]},
        workspace=tmp_path / ".dse",
    )
    clock = FakeClock()
    dse.Engine(campaign, agent=ScriptedAgent([{"x": 1}, {"x": 2}]), store=store, clock=clock,
               backend=ProbeBackend(clock=clock)).run()
    store.close()
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # not installed
    monkeypatch.chdir(tmp_path)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    code = main(["report", "plain", "--html", str(tmp_path / "r.html")])
    assert code == 2
    lines = [line for line in err.getvalue().splitlines() if "error" in line]
    assert lines == ["dse: error: dse report --html draws its plots with matplotlib, which is"
                     " not installed: pip install 'dse-core[report]'"]
    assert not (tmp_path / "r.html").exists()
