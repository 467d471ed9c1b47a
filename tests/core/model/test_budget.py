"""Budgets: ceilings parsed from what a person writes, reserved before launch, spend recorded
per attempt, and the three numbers to the cent on a probe with known durations and prices."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.model._budget import Budget, Ledger, Price, Spend, TrialCeilings, parse_budget
from dse.report._report import summarize
from dse.testing import FakeClock, ProbeBackend, ProbeCluster, ProbeScript, ScriptedAgent

if TYPE_CHECKING:
    from pathlib import Path


def campaign(
    tmp_path: Path, *, budget: Mapping[str, Any] | None = None,
    price: Mapping[str, Any] | None = None, environment: Mapping[str, Any] | None = None,
    **table: Any,
) -> dse.Campaign:
    data: dict[str, Any] = {
        # The probe sleeps the fake clock to the next end, so the cadence may be long.
        "campaign": {"name": "budget", "max_parallelism": 2, "mode": "rolling",
                     "poll_interval": "1h", **table},
        "space": {"x": {"type": "int", "low": 0, "high": 10_000}},
        "objectives": [{"metric": "value"}],
        "environment": dict({"time_limit": "10s"} if environment is None else environment),
    }
    if budget is not None:
        data["budget"] = dict(budget)
    if price is not None:
        data["backend"] = {"probe": {"price": dict(price)}}
    return dse.campaign_from_dict(data, workspace=tmp_path / "ws")


def run_timed(
    camp: dse.Campaign, script: Callable[[Mapping[str, Any]], ProbeScript],
    proposals: int = 10_000,
) -> tuple[dse.CampaignResult, dse.Store, FakeClock]:
    clock = FakeClock(start=0.0)
    store = dse.Store(camp.workspace / "dse.sqlite")
    engine = dse.Engine(
        camp, agent=ScriptedAgent({"x": i} for i in range(proposals)),
        backend=ProbeBackend(script, clock=clock), store=store, clock=clock,
    )
    return engine.run(), store, clock


def seconds(duration: float) -> Callable[[Mapping[str, Any]], ProbeScript]:
    return lambda params: ProbeScript(seconds=duration, metrics={"value": float(params["x"])})


# -- what a person writes ------------------------------------------------------------------

def test_ceilings_in_the_units_a_person_writes() -> None:
    budget = parse_budget({
        "trials": 50, "wall_clock": "2h", "compute": "40 gpu-hours", "money": "120 USD",
        "on_deadline": "finish",
        "trial": {"wall_time": "10m", "compute": "12 node-hours", "money": "2.5 USD"},
    }, "c.toml: budget")
    assert budget == Budget(
        trials=50, wall_clock_s=7200.0, compute=("gpu", 40.0), money=120.0, currency="USD",
        on_deadline="finish",
        trial=TrialCeilings(wall_s=600.0, compute=("node", 12.0), money=2.5),
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"compute": "40 gpu-years"}, r"c.toml: budget.compute: expected an amount of compute"),
        ({"money": "-3 USD"}, r"c.toml: budget.money: expected an amount of money"),
        ({"money": "3 dollars"}, r"c.toml: budget.money: expected an amount of money"),
        ({"trials": -1}, r"c.toml: budget.trials: expected a non-negative integer"),
        ({"wall_clock": "soon"}, r"c.toml: budget.wall_clock: expected a duration"),
        ({"trial": {"wall_time": "-5m"}}, r"c.toml: budget.trial.wall_time"),
        ({"trial": {"gpus": 1}}, r"c.toml: budget.trial: unknown key\(s\) \['gpus'\]"),
        ({"money": "1 USD", "trial": {"money": "1 EUR"}}, r"one currency per campaign"),
        ({"on_deadline": "panic"}, r"c.toml: budget.on_deadline: expected"),
        ({"ceiling": 3}, r"c.toml: budget: unknown key\(s\) \['ceiling'\]"),
    ],
)
def test_a_bad_ceiling_is_one_error_naming_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(dse.ConfigError, match=message):
        parse_budget(raw, "c.toml: budget")


def test_a_price_table_is_checked_and_read(tmp_path: Path) -> None:
    camp = campaign(tmp_path, price={"cpu_hour": 0.5, "gpu_hour": 2, "currency": "EUR"})
    assert camp.price == Price(cpu_hour=0.5, gpu_hour=2.0, currency="EUR")
    with pytest.raises(dse.ConfigError, match=r"backend.probe.price.cpu_hour: expected a"):
        campaign(tmp_path, price={"cpu_hour": -1})
    with pytest.raises(dse.ConfigError, match=r"ceilings in USD but backend.probe.price is in"):
        campaign(tmp_path, price={"currency": "EUR"}, budget={"money": "5 USD"})


def test_a_money_ceiling_without_a_time_limit_cannot_be_reserved(tmp_path: Path) -> None:
    camp = campaign(tmp_path, budget={"money": "5 USD"}, environment={})
    with pytest.raises(dse.ConfigError, match=r"needs a time\s+limit per trial"):
        run_timed(camp, seconds(1.0))


# -- the ledger ----------------------------------------------------------------------------

def test_the_ledger_refuses_what_would_pass_a_ceiling_and_settles_actual_spend() -> None:
    ledger = Ledger(Budget(money=1.0, currency="USD", compute=("cpu", 1.0), trials=3),
                    started_at=0.0)
    worst = Spend(wall_s=1000.0, cpu_s=1000.0, money=0.4)
    for _ in range(2):
        assert ledger.refusal(worst, 0.0, new_trial=True) is None
        ledger.reserve(worst, new_trial=True)
    assert ledger.refusal(worst, 0.0, new_trial=True) == "money ceiling 1 USD"
    ledger.settle(worst, Spend(wall_s=10.0, cpu_s=10.0, money=0.004))
    assert ledger.refusal(worst, 0.0, new_trial=True) is None
    ledger.reserve(worst, new_trial=True)
    assert ledger.refusal(worst, 0.0, new_trial=True) == "trials ceiling 3 reached"
    assert ledger.refusal(Spend(cpu_s=2700.0), 0.0, new_trial=False) == (
        "compute ceiling 1 cpu-hours"
    )


def test_per_trial_ceilings_become_the_time_limit_at_the_trials_resources() -> None:
    ceilings = TrialCeilings(wall_s=3600.0, compute=("gpu", 2.0), money=3.0)
    price = Price(gpu_hour=4.0)
    two_gpus = dse.Resources(cpus=1, gpus=2)
    # 2 gpu-hours on 2 GPUs: 1 h; 3 USD at 8 USD/h: 1350 s; less a 10 s overrun.
    assert ceilings.time_limit(7200.0, two_gpus, price, 10.0) == pytest.approx(1340.0)
    assert ceilings.time_limit(600.0, two_gpus, price, 10.0) == 600.0
    assert TrialCeilings().time_limit(None, two_gpus, price, 10.0) is None


# -- on the probe, with known durations and prices -----------------------------------------

def test_a_money_ceiling_to_the_cent(tmp_path: Path) -> None:
    # 1 CPU at 36 USD per CPU-hour = 1 cent per second. A trial may run 10 s (10 cents
    # reserved) and runs 6 s (6 cents spent); 1 USD affords exactly 16 trials.
    camp = campaign(tmp_path, budget={"money": "1 USD"}, price={"cpu_hour": 36})
    result, store, _ = run_timed(camp, seconds(6.0))

    assert (result.status, result.end_reason) == ("budget_exhausted", "budget_exhausted")
    trials = store.reads.trials(result.campaign_id)
    assert [t.status for t in trials] == [dse.TrialStatus.COMPLETED] * 16
    summary = summarize(store, result.campaign_id)
    assert round(summary.spent.money, 2) == 0.96
    assert summary.spent.money <= 1.0
    assert summary.wall_s == 54.0  # 7 pairs of 6 s, then two single trials
    assert round(summary.throughput_per_h, 2) == round(16 * 3600 / 54, 2) == 1066.67
    assert round(summary.effective_per_h, 2) == 1066.67
    assert summary.cost_per_effective == pytest.approx(0.06)
    assert summary.compute_per_effective_h("cpu") == pytest.approx(6.0 / 3600.0)
    for attempt in store.reads.attempts(result.campaign_id):
        assert attempt.spend is not None
        assert attempt.spend.as_dict() == pytest.approx(
            {"wall_s": 6.0, "cpu_s": 6.0, "gpu_s": 0.0, "node_s": 6.0, "money": 0.06}
        )
    events = store.reads.events(result.campaign_id, "budget_exhausted")
    assert [(e.data or {}).get("reason") for e in events] == ["money ceiling 1 USD"]
    store.close()


def test_a_node_hour_ceiling_reserves_every_node_of_a_trial_and_stops_launches_exactly(
    tmp_path: Path,
) -> None:
    # Trials of 3 nodes with a 10 s limit (30 node-seconds reserved each) run 6 s (18 spent),
    # two at a time, under 0.03 node-hours (108 node-seconds): two at 0 s (60 reserved), two
    # at 6 s (36 spent + 60), one at 12 s (72 + 30; a second would make 132), none at 18 s
    # (90 + 30 > 108). Counting one node each, 10 node-seconds would be reserved instead.
    camp = campaign(tmp_path, budget={"compute": "0.03 node-hours"},
                    environment={"time_limit": "10s", "nodes": 3})
    result, store, clock = run_timed(camp, seconds(6.0))

    assert (result.status, result.end_reason) == ("budget_exhausted", "budget_exhausted")
    assert len(store.reads.trials(result.campaign_id)) == 5
    assert clock.now == 18.0
    summary = summarize(store, result.campaign_id)
    assert summary.spent.node_s == pytest.approx(5 * 3 * 6.0)
    assert summary.spent.node_s <= 108.0
    events = store.reads.events(result.campaign_id, "budget_exhausted")
    assert [(e.data or {}).get("reason") for e in events] == ["compute ceiling 0.03 node-hours"]
    store.close()


def test_a_trial_ceiling_cuts_the_trial_at_its_time_limit(tmp_path: Path) -> None:
    camp = campaign(tmp_path, budget={"trials": 3, "trial": {"money": "0.05 USD"}},
                    price={"cpu_hour": 36})
    result, store, _ = run_timed(camp, seconds(30.0))

    assert result.end_reason == "budget_exhausted"
    rows = store.reads.trials(result.campaign_id)
    assert [(r.status, r.failure) for r in rows] == [
        (dse.TrialStatus.BUDGET_EXHAUSTED, dse.FailureClass.TIME_LIMIT)
    ] * 3
    summary = summarize(store, result.campaign_id)
    assert summary.spent.money == pytest.approx(0.15)  # 3 trials cut at 5 s, 5 cents each
    assert summary.effective == 0
    assert summary.cost_per_effective is None
    store.close()


@pytest.mark.parametrize(("on_deadline", "expected"), [
    ("cancel", ["completed"] * 4 + ["cancelled"] * 2),
    ("finish", ["completed"] * 2),
])
def test_the_wall_clock_ceiling_stops_dispatch(
    tmp_path: Path, on_deadline: str, expected: list[str]
) -> None:
    # Trials of 4 s (time limit 10 s), two at a time, a 10 s deadline. "cancel" starts two
    # at 0, 4 and 8 s and cancels the last two at 10 s; "finish" starts only those that
    # could run to their time limit before the deadline: the two at 0 s.
    camp = campaign(tmp_path, budget={"wall_clock": "10s", "on_deadline": on_deadline})
    result, store, clock = run_timed(camp, seconds(4.0))

    assert (result.status, result.end_reason) == ("budget_exhausted", "budget_exhausted")
    assert [t.status.value for t in store.reads.trials(result.campaign_id)] == expected
    assert clock.now <= 10.0 + 1e-9
    store.close()


def test_spend_follows_the_backends_accounting_when_it_has_one() -> None:
    price = Price(cpu_hour=3.6, gpu_hour=36.0, node_hour=1.8, billing_hour=0.36)
    res = dse.Resources(cpus=2, gpus=1)
    assert price.charge(100.0, res) == Spend(100.0, 200.0, 100.0, 100.0,
                                             pytest.approx(0.2 + 1.0 + 0.05))
    # Slurm's sacct: what it says was allocated is what is charged, billing TRES included.
    charged = price.charge(100.0, res, {"elapsed_s": 50.0, "cpus": 4.0, "billing": 10.0})
    assert charged == Spend(50.0, 200.0, 50.0, 50.0, pytest.approx(0.2 + 0.5 + 0.025 + 0.05))
    # A step of a shared allocation pays its share of the allocation.
    share = price.charge(10.0, res, {"elapsed_s": 10.0, "cpus": 2.0, "allocation_cpu_s": 60.0,
                                     "allocation_node_s": 10.0})
    assert (share.cpu_s, share.node_s) == (60.0, 10.0)
    assert share.money == pytest.approx((3.6 * 60 + 36 * 10 + 1.8 * 10) / 3600)


def test_a_resumed_run_counts_what_it_spent_before_the_crash(tmp_path: Path) -> None:
    camp = campaign(tmp_path, budget={"money": "1 USD"}, price={"cpu_hour": 36})
    clock = FakeClock(start=0.0)
    store = dse.Store(camp.workspace / "dse.sqlite")
    cluster = ProbeCluster()

    class Crash(BaseException):
        pass

    class Die(dse.EngineListener):
        def on_pass(self, engine: dse.Engine) -> None:
            if engine.stats.passes == 4:
                raise Crash

    def engine(listener: dse.EngineListener | None = None) -> dse.Engine:
        return dse.Engine(
            camp, agent=ScriptedAgent({"x": i} for i in range(10_000)),
            backend=ProbeBackend(seconds(6.0), clock=clock, cluster=cluster), store=store,
            clock=clock, listener=listener,
        )

    first = engine(Die())
    with pytest.raises(Crash):
        first.run()
    store.reopen_campaign(first.campaign_id)  # what a real crash leaves: a running run
    before = summarize(store, first.campaign_id).spent.money
    assert before > 0

    second = engine()
    result = second.run(resume=first.campaign_id)

    assert second.ledger.spent.money <= 1.0
    assert result.end_reason == "budget_exhausted"
    spent = summarize(store, first.campaign_id).spent.money
    assert spent == pytest.approx(second.ledger.spent.money)
    assert before < spent <= 1.0
    # The budget bought the same 16 full trials (6 cents each) as an uninterrupted run,
    # less what the trials the crash cancelled had spent before it.
    completed = [t for t in store.reads.trials(first.campaign_id)
                 if t.status is dse.TrialStatus.COMPLETED]
    assert spent + 0.10 > 1.0
    assert len(completed) >= 14
    store.close()


def test_a_price_per_partition_follows_the_campaigns_partition(tmp_path: Path) -> None:
    def priced(options: dict[str, Any]) -> dse.Campaign:
        return dse.campaign_from_dict({
            "campaign": {"name": "p", "backend": "probe"},
            "space": {"x": [1, 2]}, "objectives": [{"metric": "value"}],
            "backend": {"probe": options},
        }, workspace=tmp_path / "ws")

    table = {"gpu": {"gpu_hour": 2.5}, "default": {"node_hour": 1.0}}
    # The probe takes no partition option; price selection happens before the backend sees
    # its options, so build the campaign only.
    assert priced({"price": table, "partition": "gpu"}).price == Price(gpu_hour=2.5)
    assert priced({"price": table}).price == Price(node_hour=1.0)
    with pytest.raises(dse.ConfigError, match=r"backend.probe.price: no price for partition"
                                              r" 'cpu' and no 'default'"):
        priced({"price": {"gpu": {"gpu_hour": 1}}, "partition": "cpu"})
    # Keys beside the partition tables apply to each, unless it sets its own: a currency
    # given once is not lost (it was, silently, falling back to USD).
    shared = {"currency": "EUR", "cpu_hour": 0.5, "gpu": {"gpu_hour": 2.5},
              "default": {"cpu_hour": 0.1}}
    assert priced({"price": shared, "partition": "gpu"}).price == Price(
        cpu_hour=0.5, gpu_hour=2.5, currency="EUR")
    assert priced({"price": shared}).price == Price(cpu_hour=0.1, currency="EUR")


def test_a_ceiling_at_a_vanishing_price_binds_nothing() -> None:
    # 1 USD at a subnormal price per node-hour would allow more seconds than a float holds.
    price = Price(node_hour=2.2e-309)
    ceilings = TrialCeilings(money=1.0)
    assert ceilings.time_limit(None, dse.Resources(), price, 0.0) is None
    assert ceilings.time_limit(60.0, dse.Resources(), price, 0.0) == 60.0
