"""The budget gate on its own: reservations before an attempt, settlement after it, the
refusal each ceiling gives, and per-trial ceilings across retries (no engine, no store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dse import ConfigError, EnvironmentConfig, JobSpec, JobState, JobStatus, Resources
from dse.engine._gate import BudgetGate
from dse.model._budget import Budget, Price, Spend, TrialCeilings

CENT_A_SECOND = Price(cpu_hour=36.0)
"""1 CPU costs 0.01 USD per second."""


def spec(time_limit: float | None = 10.0, cpus: int = 1, gpus: int = 0,
         nodes: int = 1) -> JobSpec:
    return JobSpec("t-1", 1, {}, Path("t-1"), resources=Resources(cpus, gpus, nodes=nodes),
                   time_limit=time_limit)


def ended(started_at: float | None, **usage: float) -> JobStatus:
    return JobStatus("job-1", JobState.SUCCEEDED, started_at=started_at, usage=usage or None)


def gate(price: Price = CENT_A_SECOND, overrun_s: float = 0.0, **budget: Any) -> BudgetGate:
    return BudgetGate(Budget(currency="USD", **budget), price, overrun_s=overrun_s)


def admit_until_refused(
    the_gate: BudgetGate, job: JobSpec, *, new_trial: bool = True, now: float = 0.0
) -> tuple[int, str]:
    """Reserve attempts of *job* until the gate refuses one; how many it took, and why not
    more. A refusal reserves nothing."""
    for count in range(1_000):
        before = (the_gate.reserved, the_gate.trials)
        taken = the_gate.reserve(job, now, new_trial=new_trial)
        if isinstance(taken, str):
            assert (the_gate.reserved, the_gate.trials) == before
            return count, taken
    raise AssertionError("the gate never refused")


# -- reserve and settle --------------------------------------------------------------------

def test_an_attempt_reserves_its_worst_case_and_settles_what_it_spent() -> None:
    the_gate = gate(money=1.0, overrun_s=2.0)
    # 10 s limit + 2 s overrun on 1 CPU at 1 cent a second.
    worst = Spend(12.0, 12.0, 0.0, 12.0, 0.12)
    assert the_gate.worst(spec()) == worst
    assert the_gate.reserve(spec(), 0.0, new_trial=True) == worst
    assert (the_gate.reserved, the_gate.spent, the_gate.trials) == (worst, Spend(), 1)

    actual = the_gate.charge(spec(), ended(started_at=3.0), ended_at=9.0)
    assert actual == Spend(6.0, 6.0, 0.0, 6.0, 0.06)
    assert the_gate.settle(worst, actual) == actual
    assert (the_gate.reserved, the_gate.spent) == (Spend(), actual)


def test_an_attempt_that_overruns_its_limit_spends_no_more_than_its_reservation() -> None:
    # The ceiling holds exactly one worst case: 10 s + 3 s overrun on 2 CPUs = 0.26 USD.
    the_gate = gate(money=0.26, overrun_s=3.0)
    job = spec(cpus=2)
    reserved = the_gate.reserve(job, 0.0, new_trial=True)
    assert isinstance(reserved, Spend)
    assert reserved.money == pytest.approx(0.26)
    # The backend ended it at its limit plus the overrun: it spent all it reserved.
    actual = the_gate.charge(job, ended(started_at=5.0), ended_at=5.0 + 10.0 + 3.0)
    assert actual == pytest.approx(reserved)
    the_gate.settle(reserved, actual)
    assert the_gate.spent.money <= 0.26 + 1e-9
    assert the_gate.reserved == pytest.approx(Spend())
    assert the_gate.reserve(job, 20.0, new_trial=True) == "money ceiling 0.26 USD"


def test_unconfirmed_and_unsubmitted_attempts_settle_their_reservation_or_nothing() -> None:
    the_gate = gate(money=1.0)
    held = the_gate.reserve(spec(), 0.0, new_trial=True)
    assert isinstance(held, Spend)
    # The backend never confirmed the end: the attempt is charged what it reserved.
    assert the_gate.settle(held, None) == held
    cancelled = the_gate.reserve(spec(), 0.0, new_trial=True)
    assert isinstance(cancelled, Spend)
    # Cancelled before it was submitted: nothing spent, the reservation is freed.
    assert the_gate.settle(cancelled, Spend()) == Spend()
    # Never reserved (resumed from a record that held nothing for it).
    assert the_gate.settle(None, None) == Spend()
    assert (the_gate.spent, the_gate.reserved) == (held, Spend())


def test_the_charge_is_the_run_time_or_the_backends_accounting() -> None:
    the_gate = gate(price=Price(cpu_hour=3.6, gpu_hour=36.0, node_hour=1.8))
    job = spec(cpus=2, gpus=1)
    assert the_gate.charge(job, ended(started_at=None), ended_at=50.0) == Spend()
    # An end reported before the start (clock skew) is no negative spend.
    assert the_gate.charge(job, ended(started_at=60.0), ended_at=50.0) == Spend()
    ran = the_gate.charge(job, ended(started_at=0.0), ended_at=100.0)
    assert ran.as_dict() == pytest.approx(Spend(100.0, 200.0, 100.0, 100.0, 1.25).as_dict())
    # What the accounting says was used is what is charged (Slurm's sacct).
    accounted = the_gate.charge(job, ended(started_at=0.0, elapsed_s=50.0, cpus=4.0),
                                ended_at=100.0)
    assert accounted.as_dict() == pytest.approx(Spend(50.0, 200.0, 50.0, 50.0, 0.725).as_dict())


def test_a_trial_of_three_nodes_reserves_node_hours_for_every_node() -> None:
    # 10 s limit + 2 s overrun on each of 3 nodes (one 1-CPU task each), at a cent a
    # node-second: 36 node-seconds, 36 CPU-seconds, 0.36 USD, before it is launched.
    the_gate = gate(price=Price(node_hour=36.0), overrun_s=2.0, compute=("node", 1.0))
    worst = Spend(12.0, 36.0, 0.0, 36.0, 0.36)
    assert the_gate.worst(spec(nodes=3)) == pytest.approx(worst)
    assert the_gate.reserve(spec(nodes=3), 0.0, new_trial=True) == pytest.approx(worst)
    assert the_gate.reserved == pytest.approx(worst)


# -- refusals ------------------------------------------------------------------------------

@pytest.mark.parametrize(("budget", "job", "admitted", "refusal"), [
    # 12 s (10 s + 2 s overrun) at 1 cent a CPU-second.
    ({"trials": 2}, spec(), 2, "trials ceiling 2 reached"),
    ({"trials": 0}, spec(), 0, "trials ceiling 0 reached"),
    ({"money": 1.0}, spec(), 8, "money ceiling 1 USD"),  # 8 x 0.12; a 9th makes 1.08
    ({"money": 0.1}, spec(), 0, "money ceiling 0.1 USD"),
    ({"compute": ("cpu", 1.0)}, spec(cpus=25), 12, "compute ceiling 1 cpu-hours"),  # 300 each
    ({"compute": ("gpu", 0.1)}, spec(gpus=3), 10, "compute ceiling 0.1 gpu-hours"),  # 36 each
    ({"compute": ("node", 0.01)}, spec(cpus=8), 3, "compute ceiling 0.01 node-hours"),
    # 0.03 node-hours = 108 node-seconds: three trials of 3 nodes x 12 s, not nine.
    ({"compute": ("node", 0.03)}, spec(nodes=3), 3, "compute ceiling 0.03 node-hours"),
    ({"compute": ("cpu", 0.03)}, spec(nodes=3), 3, "compute ceiling 0.03 cpu-hours"),
    ({"compute": ("gpu", 0.03)}, spec(gpus=1, nodes=3), 3, "compute ceiling 0.03 gpu-hours"),
    ({"money": 5.0, "compute": ("cpu", 0.01)}, spec(), 3, "compute ceiling 0.01 cpu-hours"),
])
def test_each_ceiling_refuses_what_would_pass_it(
    budget: dict[str, Any], job: JobSpec, admitted: int, refusal: str
) -> None:
    the_gate = gate(overrun_s=2.0, **budget)
    assert admit_until_refused(the_gate, job) == (admitted, refusal)


@pytest.mark.parametrize(("on_deadline", "now", "refusal"), [
    ("cancel", 0.0, None),
    ("cancel", 149.0, None),  # it may start: it is cancelled at the deadline
    ("cancel", 150.0, "wall-clock ceiling reached"),
    ("cancel", 400.0, "wall-clock ceiling reached"),
    ("finish", 138.0, None),  # 138 + 10 s + 2 s overrun ends at the deadline
    ("finish", 138.5, "the attempt could not finish before the wall-clock ceiling"),
    ("finish", 150.0, "wall-clock ceiling reached"),
])
def test_the_wall_clock_ceiling_cancels_or_only_starts_what_can_finish(
    on_deadline: str, now: float, refusal: str | None
) -> None:
    the_gate = gate(overrun_s=2.0, wall_clock_s=100.0, on_deadline=on_deadline)
    the_gate.open(50.0)
    assert the_gate.deadline == 150.0
    taken = the_gate.reserve(spec(), now, new_trial=True)
    assert (taken if isinstance(taken, str) else None) == refusal


def test_a_retry_is_not_a_new_trial_but_still_pays() -> None:
    the_gate = gate(trials=1, money=0.25)
    first = the_gate.reserve(spec(), 0.0, new_trial=True)
    assert isinstance(first, Spend)
    assert the_gate.reserve(spec(), 0.0, new_trial=True) == "trials ceiling 1 reached"
    the_gate.settle(first, Spend(wall_s=4.0, cpu_s=4.0, node_s=4.0, money=0.04))
    # The interrupted trial's second attempt: the trials ceiling is not touched...
    assert admit_until_refused(the_gate, spec(), new_trial=False) == (
        2, "money ceiling 0.25 USD")
    assert the_gate.trials == 1


def test_a_held_reservation_is_taken_without_a_check() -> None:
    # A resumed run re-takes what its still-running attempt reserved before the crash, even
    # when the ceiling (now shared with what was spent before) would refuse it today.
    the_gate = gate(money=0.12, trials=1)
    the_gate.open(0.0)
    the_gate.restore([Spend(wall_s=5.0, cpu_s=5.0, node_s=5.0, money=0.05)], trials=1)
    assert the_gate.reserve(spec(), 0.0, new_trial=False) == "money ceiling 0.12 USD"
    assert the_gate.hold(spec()) == Spend(10.0, 10.0, 0.0, 10.0, 0.1)
    assert the_gate.reserved == Spend(10.0, 10.0, 0.0, 10.0, 0.1)
    assert the_gate.trials == 1
    assert the_gate.reserve(spec(time_limit=1.0), 0.0, new_trial=False) == (
        "money ceiling 0.12 USD")


def test_a_resumed_run_counts_its_start_its_spend_and_its_trials() -> None:
    the_gate = gate(trials=3, wall_clock_s=60.0, money=1.0)
    spends = [Spend(money=0.1), Spend(money=0.2), Spend(money=0.3)]
    the_gate.open(100.0)
    the_gate.restore(spends, trials=2)
    assert (the_gate.started_at, the_gate.deadline, the_gate.trials) == (100.0, 160.0, 2)
    assert the_gate.spent.money == 0.1 + 0.2 + 0.3  # summed in the record's order
    assert admit_until_refused(the_gate, spec(time_limit=1.0), now=120.0) == (
        1, "trials ceiling 3 reached")
    assert the_gate.reserve(spec(), 160.0, new_trial=False) == "wall-clock ceiling reached"


# -- per-trial ceilings --------------------------------------------------------------------

@pytest.mark.parametrize(("ceilings", "job", "price", "overrun_s", "limits"), [
    # 30 s per trial, 2 s overrun: 20 s (the environment's limit), then 30 - 22 - 2 = 6 s,
    # then nothing left.
    (TrialCeilings(wall_s=30.0), spec(20.0), CENT_A_SECOND, 2.0, [20.0, 6.0]),
    # 1 gpu-hour on 2 GPUs: 1800 s of which each attempt takes all it may.
    (TrialCeilings(compute=("gpu", 1.0)), spec(None, gpus=2), Price(), 0.0, [1800.0]),
    (TrialCeilings(compute=("gpu", 1.0)), spec(1000.0, gpus=2), Price(), 0.0, [1000.0, 800.0]),
    # 1 USD at 2 cents a second (2 CPUs), 5 s overrun: 45 s, then nothing.
    (TrialCeilings(money=1.0), spec(None, cpus=2), CENT_A_SECOND, 5.0, [45.0]),
    (TrialCeilings(money=1.0), spec(15.0, cpus=2), CENT_A_SECOND, 5.0, [15.0, 15.0, 5.0]),
    # The tightest ceiling binds: 60 cpu-seconds on 3 CPUs is 20 s.
    (TrialCeilings(wall_s=100.0, compute=("cpu", 60 / 3600), money=9.0),
     spec(None, cpus=3), CENT_A_SECOND, 0.0, [20.0]),
    # A compute ceiling on GPUs binds nothing on a CPU-only trial.
    (TrialCeilings(compute=("gpu", 1.0)), spec(None), CENT_A_SECOND, 0.0, [None]),
])
def test_per_trial_ceilings_hold_across_attempts(
    ceilings: TrialCeilings, job: JobSpec, price: Price, overrun_s: float,
    limits: list[float | None],
) -> None:
    # Each attempt runs to its limit plus the overrun; the next gets what is left.
    the_gate = BudgetGate(Budget(trial=ceilings), price, overrun_s=overrun_s)
    spent = Spend()
    got: list[float | None] = []
    while len(got) < len(limits):
        limit = the_gate.time_limit(job, spent)
        got.append(limit)
        if limit is None or limit <= 0:
            break
        spent = spent + the_gate.charge(job, ended(started_at=0.0), ended_at=limit + overrun_s)
    assert got == pytest.approx(limits)
    if got[-1] is not None:
        limit = the_gate.time_limit(job, spent)
        assert limit is not None
        assert limit <= 1e-9  # nothing left for another attempt
        assert ceilings.wall_s is None or spent.wall_s <= ceilings.wall_s + 1e-9
        if ceilings.compute is not None:
            unit, hours = ceilings.compute
            assert spent.compute_s(unit) <= hours * 3600 + 1e-9
        assert ceilings.money is None or spent.money <= ceilings.money + 1e-9


# -- how many new trials fit ---------------------------------------------------------------

def test_affordable_counts_trials_of_the_campaigns_size_among_others() -> None:
    environment = EnvironmentConfig(time_limit=10.0, resources=Resources(cpus=1))
    the_gate = gate(money=1.0)
    # 10 cents a campaign-sized trial; nothing is reserved by asking.
    assert the_gate.affordable(20, 0.0, environment) == (10, "money ceiling 1 USD")
    assert the_gate.affordable(4, 0.0, environment) == (4, None)
    assert the_gate.reserved == Spend()
    # A trial that asks for 4 CPUs (40 cents), twice: 20 cents are left, two small trials.
    for _ in range(2):
        assert isinstance(the_gate.reserve(spec(cpus=4), 0.0, new_trial=True), Spend)
    assert the_gate.affordable(5, 0.0, environment) == (2, "money ceiling 1 USD")
    assert the_gate.reserve(spec(cpus=4), 0.0, new_trial=True) == "money ceiling 1 USD"
    assert isinstance(the_gate.reserve(spec(cpus=2), 0.0, new_trial=True), Spend)
    assert the_gate.affordable(5, 0.0, environment) == (0, "money ceiling 1 USD")


def test_affordable_per_trial_ceilings_shrink_the_campaign_sized_trial() -> None:
    # A 0.05 USD per-trial ceiling cuts the 10 s limit to 5 s (5 cents): 20 fit in 1 USD.
    environment = EnvironmentConfig(time_limit=10.0, resources=Resources(cpus=1))
    the_gate = gate(money=1.0, trial=TrialCeilings(money=0.05))
    assert the_gate.affordable(30, 0.0, environment) == (20, "money ceiling 1 USD")


def test_affordable_without_a_time_limit_counts_only_trials_and_the_clock() -> None:
    environment = EnvironmentConfig(resources=Resources(cpus=64))
    assert gate().affordable(7, 0.0, environment) == (7, None)
    the_gate = gate(trials=3, wall_clock_s=10.0)
    assert the_gate.reserve(spec(None), 0.0, new_trial=True) == Spend()
    assert the_gate.affordable(5, 0.0, environment) == (2, "trials ceiling 3 reached")
    assert the_gate.affordable(5, 10.0, environment) == (0, "wall-clock ceiling reached")


# -- ceilings that cannot be enforced ------------------------------------------------------

@pytest.mark.parametrize(("budget", "environment", "overrun_s", "message"), [
    ({"money": 5.0}, EnvironmentConfig(), 0.0,
     "c.toml: budget: a compute, money or finishing wall-clock ceiling needs a time limit"
     " per trial to reserve (set environment.time_limit or budget.trial.*)"),
    ({"compute": ("gpu", 2.0)}, EnvironmentConfig(), 0.0, "needs a time limit per trial"),
    ({"wall_clock_s": 60.0, "on_deadline": "finish"}, EnvironmentConfig(), 0.0,
     "needs a time limit per trial"),
    ({"trial": TrialCeilings(wall_s=1.0)}, EnvironmentConfig(), 1.0,
     "c.toml: budget.trial: the per-trial ceilings leave no time to run on 1 CPUs and 0 GPUs"
     " (the backend may run 1s past a time limit)"),
    ({"trial": TrialCeilings(money=0.01)},
     EnvironmentConfig(time_limit=60.0, resources=Resources(cpus=2, gpus=1)), 0.5,
     "leave no time to run on 2 CPUs and 1 GPUs (the backend may run 0.5s past"),
])
def test_a_ceiling_that_cannot_be_enforced_is_refused_up_front(
    budget: dict[str, Any], environment: EnvironmentConfig, overrun_s: float, message: str
) -> None:
    the_gate = gate(overrun_s=overrun_s, **budget)
    with pytest.raises(ConfigError) as refused:
        the_gate.check(environment, where="c.toml")
    assert message in str(refused.value)


@pytest.mark.parametrize("budget", [
    {},
    {"trials": 4, "wall_clock_s": 60.0},  # a cancelling deadline needs no time limit
    {"money": 5.0, "trial": TrialCeilings(money=1.0)},  # the per-trial ceiling is the limit
])
def test_a_ceiling_that_can_be_enforced_passes_the_check(budget: dict[str, Any]) -> None:
    gate(**budget).check(EnvironmentConfig(), where="c.toml")
