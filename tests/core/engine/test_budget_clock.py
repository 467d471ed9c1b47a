"""Budgets on the bad day, the pure parts: a wall clock that steps (the fake clock's
``step``), a resume in a new process (whose monotonic clock starts again), and a campaign
whose earlier runs spent its ceilings (``[budget] scope``). The real processes are in
``tests/backend_local/test_budget_bad_day.py``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import dse
from dse.engine._gate import BudgetGate
from dse.model._budget import Budget, Earlier, Ledger, Price, Spend
from dse.report._render import outcome_lines
from dse.report._report import run_detail
from dse.testing import FakeClock, ProbeBackend, ProbeCluster, ProbeScript, ScriptedAgent

POLL = 1.0
"""Seconds between passes: the probe's untimed jobs move no clock, the engine's waits do."""


def campaign(tmp_path: Path, budget: Mapping[str, Any], **table: Any) -> dse.Campaign:
    return dse.campaign_from_dict({
        "campaign": {"name": "clock", "max_parallelism": 2, "mode": "waves",
                     "poll_interval": f"{POLL}s", **table},
        "space": {"x": {"type": "int", "low": 0, "high": 10_000}},
        "objectives": [{"metric": "value"}],
        "environment": {"time_limit": "10s"},
        "budget": dict(budget),
    }, workspace=tmp_path / "ws")


def script(params: Mapping[str, Any]) -> ProbeScript:
    # Ends at the third pass: its time is the engine's waits, not a timed script's.
    return ProbeScript(passes=2, metrics={"value": float(params["x"])})


class Step(dse.EngineListener):
    """Steps the wall clock by *seconds* at pass *at* (NTP, a suspended laptop)."""

    def __init__(self, clock: FakeClock, seconds: float, at: int = 3) -> None:
        self.clock, self.seconds, self.at = clock, seconds, at

    def on_pass(self, engine: dse.Engine) -> None:
        if engine.stats.passes == self.at and self.seconds:
            self.clock.step(self.seconds)


def engine(camp: dse.Campaign, store: dse.Store, clock: FakeClock, *,
           listener: dse.EngineListener | None = None,
           cluster: ProbeCluster | None = None, proposals: int = 10_000) -> dse.Engine:
    return dse.Engine(camp, agent=ScriptedAgent({"x": i} for i in range(proposals)),
                      backend=ProbeBackend(script, clock=clock, cluster=cluster),
                      store=store, clock=clock, listener=listener)


def wall_run(tmp_path: Path, step: float) -> tuple[dse.CampaignResult, int, float, float]:
    """A 10 s wall-clock budget run with the wall clock stepped by *step* on the way: how it
    ended, its trials, the monotonic time it took and the run time the record keeps."""
    camp = campaign(tmp_path / f"step{step:+g}", {"wall_clock": "10s"})
    clock = FakeClock()
    store = dse.Store(camp.workspace / "dse.sqlite")
    try:
        result = engine(camp, store, clock, listener=Step(clock, step)).run()
        return (result, len(store.reads.trials(result.campaign_id)), clock.mono,
                store.summaries.run_time(result.campaign_id))
    finally:
        store.close()


@pytest.mark.parametrize("step", [3600.0, -3600.0], ids=["forward-1h", "back-1h"])
def test_a_wall_clock_step_neither_ends_nor_stretches_a_wall_clock_budget(
    tmp_path: Path, step: float
) -> None:
    # The run without a step is the measure: a step forward ended it at once (the deadline
    # was a wall-clock time), a step back let it run an hour more.
    steady, trials, took, run_s = wall_run(tmp_path, 0.0)
    assert (steady.status, steady.end_reason) == ("budget_exhausted", "budget_exhausted")
    assert 10.0 <= took <= 10.0 + 2 * POLL
    assert trials >= 4

    stepped, stepped_trials, stepped_took, stepped_run_s = wall_run(tmp_path, step)

    assert (stepped.status, stepped.end_reason) == (steady.status, steady.end_reason)
    assert stepped_took == took
    assert stepped_trials == trials
    assert stepped_run_s == pytest.approx(run_s) == pytest.approx(took)


def test_a_resumed_run_counts_on_from_the_run_time_its_record_keeps(tmp_path: Path) -> None:
    # Killed at 4 s of its 10 s; resumed an hour later (wall) in a new process (whose
    # monotonic clock starts again at 0): 6 s are left, not none (the deadline was the run's
    # creation plus 10 s of wall clock), and not 10.
    camp = campaign(tmp_path, {"wall_clock": "10s"})
    store = dse.Store(camp.workspace / "dse.sqlite")
    cluster = ProbeCluster()

    class Crash(BaseException):
        pass

    class Die(dse.EngineListener):
        def on_pass(self, engine: dse.Engine) -> None:
            if engine.clock.monotonic() >= 4.0:
                raise Crash

    first_clock = FakeClock()
    first = engine(camp, store, first_clock, listener=Die(), cluster=cluster)
    with pytest.raises(Crash):
        first.run()
    store.reopen_campaign(first.campaign_id)  # what a real crash leaves: a running run
    recorded = store.summaries.run_time(first.campaign_id)
    assert 3.0 <= recorded <= 4.0 + POLL
    trials_before = len(store.reads.trials(first.campaign_id))

    clock = FakeClock(start=first_clock.now + 3600.0)
    result = engine(camp, store, clock, cluster=cluster).run(resume=first.campaign_id)

    assert (result.status, result.end_reason) == ("budget_exhausted", "budget_exhausted")
    assert clock.mono == pytest.approx(10.0 - recorded, abs=2 * POLL)
    assert len(store.reads.trials(first.campaign_id)) > trials_before
    assert store.summaries.run_time(first.campaign_id) == pytest.approx(10.0, abs=2 * POLL)
    store.close()


def test_a_rerun_of_a_spent_campaign_answers_from_the_record_and_runs_nothing_new(
    tmp_path: Path,
) -> None:
    camp = campaign(tmp_path, {"trials": 4})
    store = dse.Store(camp.workspace / "dse.sqlite")
    try:
        runs = [engine(camp, store, FakeClock(), proposals=12).run() for _ in range(3)]
        dispatched = [store.reads.dispatched(r.campaign_id) for r in runs]
        assert dispatched == [4, 0, 0]
        assert all(r.end_reason == "budget_exhausted" for r in runs)
        for rerun in runs[1:]:
            statuses = [t.status for t in store.reads.trials(rerun.campaign_id)]
            # The four configurations again, from the record; the fifth refused.
            assert statuses == [dse.TrialStatus.CACHED] * 4 + [dse.TrialStatus.BUDGET_EXHAUSTED]
        detail = run_detail(store, runs[2].campaign_id)
        lines = outcome_lines(runs[2], detail, camp)
        (spent,) = [line for line in lines if line.startswith("budget spent:")]
        assert "4 of 4 trials" in spent
        assert "earlier runs 1, 2" in spent
        assert "--set budget.trials=8" in spent
        assert "--set budget.scope=run" in spent

        # Raised, the ceiling buys only the difference; per run, a ceiling of its own.
        raised = engine(campaign(tmp_path, {"trials": 6}), store, FakeClock(),
                        proposals=12).run()
        assert store.reads.dispatched(raised.campaign_id) == 2
        alone = engine(campaign(tmp_path, {"trials": 6, "scope": "run"}), store, FakeClock(),
                       proposals=12).run()
        assert store.reads.dispatched(alone.campaign_id) == 6
    finally:
        store.close()


def test_a_larger_max_trials_still_runs_what_the_campaigns_budget_has_left(
    tmp_path: Path,
) -> None:
    store = dse.Store(tmp_path / "ws" / "dse.sqlite")
    try:
        first = engine(campaign(tmp_path, {"trials": 6}, max_trials=3), store,
                       FakeClock()).run()
        assert (first.end_reason, store.reads.dispatched(first.campaign_id)) == ("max_trials", 3)
        more = engine(campaign(tmp_path, {"trials": 6}, max_trials=5), store,
                      FakeClock()).run()
        assert (more.end_reason, store.reads.dispatched(more.campaign_id)) == ("max_trials", 2)
        most = engine(campaign(tmp_path, {"trials": 6}, max_trials=10), store,
                      FakeClock()).run()
        dispatched = store.reads.dispatched(most.campaign_id)
        assert (most.end_reason, dispatched) == ("budget_exhausted", 1)
    finally:
        store.close()


def test_the_ledger_counts_what_the_earlier_runs_spent() -> None:
    ledger = Ledger(Budget(trials=4, money=10.0, currency="USD", wall_clock_s=100.0),
                    started_at=50.0)
    ledger.earlier = Earlier(runs=(1,), trials=3, spent=Spend(money=7.0), run_s=60.0)
    assert ledger.deadline == 90.0  # 40 s of the 100 left, from this run's start
    assert ledger.refusal(Spend(money=2.0), 60.0, new_trial=True) is None
    assert ledger.refusal(Spend(money=4.0), 60.0, new_trial=True) == "money ceiling 10 USD"
    assert ledger.refusal(Spend(), 90.0, new_trial=True) == "wall-clock ceiling reached"
    ledger.reserve(Spend(money=2.0), new_trial=True)
    assert ledger.refusal(Spend(), 60.0, new_trial=True) == "trials ceiling 4 reached"


def test_an_attempt_is_charged_the_controllers_measure_when_the_backend_takes_one() -> None:
    gate = BudgetGate(Budget(), Price(cpu_hour=3600.0), overrun_s=2.0)
    spec = dse.JobSpec("t", 1, {}, trial_dir=Path("t"), time_limit=3.0)
    # A wrapper stopped for 25 s stamps 25 s; the controller measured 5.
    stamped = dse.JobStatus("j", dse.JobState.TIMEOUT, started_at=100.0, ended_at=125.0)
    assert gate.charge(spec, stamped, 125.0).money == pytest.approx(25.0)
    measured = dse.JobStatus("j", dse.JobState.TIMEOUT, started_at=100.0, ended_at=125.0,
                             elapsed_s=5.0)
    assert gate.charge(spec, measured, 125.0).money == pytest.approx(5.0)
    nan = dse.JobStatus("j", dse.JobState.TIMEOUT, started_at=100.0, ended_at=104.0,
                        elapsed_s=math.nan)
    assert gate.charge(spec, nan, 104.0).money == pytest.approx(4.0)


def test_the_fake_clock_steps_its_wall_clock_alone() -> None:
    clock = FakeClock(start=10.0)
    clock.sleep(2.0)
    clock.step(-3600.0)
    assert (clock.time(), clock.monotonic(), clock.slept) == (10.0 + 2.0 - 3600.0, 2.0, 2.0)
    assert dse.SystemClock().monotonic() <= dse.SystemClock().monotonic()
