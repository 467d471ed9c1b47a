"""Budgets: ceilings a person writes, prices, and the ledger that enforces them before launch.

The rule (DESIGN.md, "Who pays"): before an attempt is dispatched, its *worst-case* spend — its
time limit (with the backend's overrun) times its resources, priced — is reserved from every
campaign ceiling; what cannot be reserved is not dispatched. When the attempt ends, its actual
spend replaces the reservation. Since every attempt is stopped at its time limit, actual spend
never exceeds what was reserved, so the campaign never spends past a ceiling.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._errors import ConfigError, did_you_mean
from dse.model._spend import Earlier, Spend
from dse.model._units import parse_duration

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dse.model._types import Resources

__all__ = [
    "BUDGET_KEYS",
    "PRICE_KEYS",
    "SCOPES",
    "TRIAL_CEILING_KEYS",
    "Budget",
    "Earlier",
    "Ledger",
    "Price",
    "Spend",
    "TrialCeilings",
    "parse_compute",
    "parse_money",
]

_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z][A-Za-z_-]*)\s*$")
_COMPUTE_UNITS = {
    "cpu-hour": "cpu", "cpu-hours": "cpu", "core-hour": "cpu", "core-hours": "cpu",
    "gpu-hour": "gpu", "gpu-hours": "gpu",
    "node-hour": "node", "node-hours": "node",
}
_EPS = 1e-9

BUDGET_KEYS = frozenset({"trials", "wall_clock", "compute", "money", "on_deadline", "scope",
                         "trial"})
"""The keys of a ``[budget]`` table."""
TRIAL_CEILING_KEYS = frozenset({"wall_time", "compute", "money"})
"""The keys of a ``[budget.trial]`` table."""
PRICE_KEYS = frozenset({"cpu_hour", "gpu_hour", "node_hour", "billing_hour", "currency"})
"""The keys of a ``[backend.<name>.price]`` table."""
SCOPES = ("campaign", "run")
"""What a campaign ceiling bounds (``[budget] scope``): everything the campaign's runs spent,
or each run on its own."""


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ConfigError(f"{where}: expected a non-negative number, got {value!r}")
    return number


def parse_compute(value: object, where: str) -> tuple[str, float]:
    """``"40 gpu-hours"`` → ``("gpu", 40.0)``; units: cpu-, core-, gpu-, node-hours."""
    match = _QUANTITY.match(value) if isinstance(value, str) else None
    unit = _COMPUTE_UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ConfigError(
            f"{where}: expected an amount of compute such as \"40 gpu-hours\","
            f" \"12 node-hours\" or \"100 cpu-hours\", got {value!r}"
        )
    return unit, _number(float(match.group(1)), where)


def parse_money(value: object, where: str) -> tuple[str, float]:
    """``"120 USD"`` → ``("USD", 120.0)``; the currency is a three-letter code."""
    match = _QUANTITY.match(value) if isinstance(value, str) else None
    if match is None or not re.fullmatch(r"[A-Z]{3}", match.group(2)):
        raise ConfigError(
            f"{where}: expected an amount of money such as \"120 USD\" or \"80 EUR\","
            f" got {value!r}"
        )
    return match.group(2), _number(float(match.group(1)), where)


@dataclass(frozen=True, slots=True)
class Price:
    """Money per hour of each resource; a backend's price model (default: free)."""

    cpu_hour: float = 0.0
    gpu_hour: float = 0.0
    node_hour: float = 0.0
    billing_hour: float = 0.0
    """Per hour of Slurm's billing TRES (used when the accounting reports it)."""
    currency: str = "USD"

    @classmethod
    def from_table(cls, raw: object, where: str) -> Price:
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a table such as {{ cpu_hour = 0.05 }}")
        unknown = sorted(set(raw) - PRICE_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}"
                              + did_you_mean(unknown, PRICE_KEYS))
        currency = raw.get("currency", "USD")
        if not isinstance(currency, str) or not re.fullmatch(r"[A-Z]{3}", currency):
            raise ConfigError(f"{where}.currency: expected a three-letter code such as \"USD\"")
        rates = {k: _number(v, f"{where}.{k}") for k, v in raw.items() if k != "currency"}
        return cls(currency=currency, **rates)

    def per_second(self, resources: Resources) -> float:
        """Money per second of an attempt holding *resources* (every CPU, GPU and node of
        every node it spans)."""
        hourly = (self.cpu_hour * resources.total_cpus + self.gpu_hour * resources.total_gpus
                  + self.node_hour * resources.nodes)
        return hourly / 3600.0

    def charge(self, elapsed_s: float, resources: Resources,
               usage: Mapping[str, float] | None = None) -> Spend:
        """The spend of an attempt that held *resources* for *elapsed_s* seconds; the
        backend's accounting (*usage*: ``elapsed_s``, ``cpus``, ``gpus``, ``nodes``,
        ``billing``), when it has one, is what was charged."""
        usage = usage or {}
        elapsed = max(float(usage.get("elapsed_s", elapsed_s)), 0.0)
        cpus = float(usage.get("cpus", resources.total_cpus))
        gpus = float(usage.get("gpus", resources.total_gpus))
        nodes = float(usage.get("nodes", resources.nodes))
        cpu_s, gpu_s, node_s = elapsed * cpus, elapsed * gpus, elapsed * nodes
        if "allocation_cpu_s" in usage:
            # A step of a shared allocation pays its share of it (see dse_slurm allocation
            # mode), not only what it asked for.
            cpu_s = float(usage["allocation_cpu_s"])
            node_s = float(usage.get("allocation_node_s", node_s))
        money = (self.cpu_hour * cpu_s + self.gpu_hour * gpu_s + self.node_hour * node_s) / 3600
        if self.billing_hour and "billing" in usage:
            money += self.billing_hour * float(usage["billing"]) * elapsed / 3600.0
        return Spend(elapsed, cpu_s, gpu_s, node_s, money)


@dataclass(frozen=True, slots=True)
class TrialCeilings:
    """Per-trial ceilings; each translates into a time limit given the trial's resources."""

    wall_s: float | None = None
    compute: tuple[str, float] | None = None
    """(unit, hours)."""
    money: float | None = None

    def time_limit(self, base: float | None, resources: Resources, price: Price,
                   overrun_s: float, spent: Spend | None = None) -> float | None:
        """The time limit that keeps the trial's next attempt within these ceilings: the
        smallest of *base* (the environment's limit) and what the wall, compute and money
        ceilings leave at these resources after the trial's earlier attempts (*spent*), less
        the backend's *overrun_s*. Not positive: nothing is left for another attempt."""
        spent = spent or Spend()
        limits = [] if base is None else [base]
        if self.wall_s is not None:
            limits.append(self.wall_s - spent.wall_s - overrun_s)
        if self.compute is not None:
            unit, hours = self.compute
            units = {"cpu": resources.total_cpus, "gpu": resources.total_gpus,
                     "node": resources.nodes}[unit]
            if units:
                limits.append((hours * 3600.0 - spent.compute_s(unit)) / units - overrun_s)
        if self.money is not None:
            rate = price.per_second(resources)
            if rate > 0:
                limits.append((self.money - spent.money) / rate - overrun_s)
        # A price so small that the ceiling allows more than a float holds binds nothing.
        limits = [limit for limit in limits if math.isfinite(limit)]
        return min(limits) if limits else None


@dataclass(frozen=True, slots=True)
class Budget:
    """The campaign's ceilings (``None``: no ceiling of that kind)."""

    trials: int | None = None
    wall_clock_s: float | None = None
    compute: tuple[str, float] | None = None
    """(unit, hours)."""
    money: float | None = None
    currency: str | None = None
    on_deadline: str = "cancel"
    """At the wall-clock ceiling: ``cancel`` what runs, or let it ``finish`` (within its
    reservation)."""
    trial: TrialCeilings = TrialCeilings()
    scope: str = "campaign"
    """What the campaign ceilings bound: ``campaign``, everything the campaign's runs in the
    workspace spent (a rerun continues the count), or each ``run`` on its own."""

    @property
    def limited(self) -> bool:
        """Whether any campaign ceiling needs the ledger."""
        return any(x is not None for x in (self.trials, self.wall_clock_s, self.compute,
                                           self.money))

    def as_dict(self) -> dict[str, Any]:
        return {
            "trials": self.trials, "wall_clock_s": self.wall_clock_s,
            "compute": list(self.compute) if self.compute else None, "money": self.money,
            "currency": self.currency, "on_deadline": self.on_deadline,
            "trial": {"wall_s": self.trial.wall_s,
                      "compute": list(self.trial.compute) if self.trial.compute else None,
                      "money": self.trial.money},
            # Only when not the default: the spec of a run recorded before the key existed
            # is the same campaign.
            **({"scope": self.scope} if self.scope != "campaign" else {}),
        }


def parse_budget(raw: object, where: str) -> Budget:
    """The ``[budget]`` table (and its ``[budget.trial]``)."""
    if raw is None:
        return Budget()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = sorted(set(raw) - BUDGET_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}"
                          + did_you_mean(unknown, BUDGET_KEYS))
    trials = raw.get("trials")
    if trials is not None and (not isinstance(trials, int) or isinstance(trials, bool)
                               or trials < 0):
        raise ConfigError(f"{where}.trials: expected a non-negative integer, got {trials!r}")
    wall = raw.get("wall_clock")
    compute = raw.get("compute")
    money = raw.get("money")
    on_deadline = raw.get("on_deadline", "cancel")
    if on_deadline not in ("cancel", "finish"):
        raise ConfigError(f"{where}.on_deadline: expected \"cancel\" or \"finish\","
                          f" got {on_deadline!r}")
    scope = raw.get("scope", "campaign")
    if scope not in SCOPES:
        raise ConfigError(f"{where}.scope: expected \"campaign\" (every run of the campaign"
                          f" counts) or \"run\" (each run on its own), got {scope!r}")
    currencies: set[str] = set()
    money_amount = None
    if money is not None:
        currency, money_amount = parse_money(money, f"{where}.money")
        currencies.add(currency)
    trial_raw = raw.get("trial", {})
    if not isinstance(trial_raw, dict):
        raise ConfigError(f"{where}.trial: expected a table")
    unknown = sorted(set(trial_raw) - TRIAL_CEILING_KEYS)
    if unknown:
        raise ConfigError(f"{where}.trial: unknown key(s) {unknown}"
                          + did_you_mean(unknown, TRIAL_CEILING_KEYS))
    trial_money = None
    if "money" in trial_raw:
        currency, trial_money = parse_money(trial_raw["money"], f"{where}.trial.money")
        currencies.add(currency)
    if len(currencies) > 1:
        raise ConfigError(f"{where}: one currency per campaign, got {sorted(currencies)}")
    trial = TrialCeilings(
        wall_s=None if "wall_time" not in trial_raw
        else parse_duration(trial_raw["wall_time"], f"{where}.trial.wall_time"),
        compute=None if "compute" not in trial_raw
        else parse_compute(trial_raw["compute"], f"{where}.trial.compute"),
        money=trial_money,
    )
    return Budget(
        trials=trials,
        wall_clock_s=None if wall is None else parse_duration(wall, f"{where}.wall_clock"),
        compute=None if compute is None else parse_compute(compute, f"{where}.compute"),
        money=money_amount,
        currency=currencies.pop() if currencies else None,
        on_deadline=on_deadline,
        trial=trial,
        scope=scope,
    )


class Ledger:
    """Spent and reserved amounts of one campaign against its :class:`Budget`.

    Times (*started_at*, the ``now`` of :meth:`refusal`) are readings of a monotonic clock,
    so a step of the wall clock neither ends a wall-clock budget early nor stretches it.
    """

    def __init__(self, budget: Budget, *, started_at: float) -> None:
        self.budget = budget
        self.started_at = started_at
        """When the run started on the monotonic clock (for a resumed run: this process's
        start less the run time the record has)."""
        self.spent = Spend()
        """What this run's settled attempts were charged."""
        self.reserved = Spend()
        self.trials = 0
        """Trials this run dispatched (retries are attempts of the same trial, not new
        trials)."""
        self.earlier = Earlier()
        """What the campaign's earlier runs spent (counted with this run's, see
        :class:`Earlier`)."""

    @property
    def deadline(self) -> float | None:
        wall = self.budget.wall_clock_s
        return None if wall is None else self.started_at + wall - self.earlier.run_s

    def refusal(self, worst: Spend, now: float, *, new_trial: bool) -> str | None:
        """Why an attempt whose worst case is *worst* cannot be afforded now (``None``: it
        can)."""
        budget = self.budget
        earlier = self.earlier
        if (new_trial and budget.trials is not None
                and self.trials + earlier.trials >= budget.trials):
            return f"trials ceiling {budget.trials} reached"
        deadline = self.deadline
        if deadline is not None:
            if now >= deadline - _EPS:
                return "wall-clock ceiling reached"
            if budget.on_deadline == "finish" and now + worst.wall_s > deadline + _EPS:
                return "the attempt could not finish before the wall-clock ceiling"
        if budget.compute is None and budget.money is None:
            return None
        committed = earlier.spent + self.spent + self.reserved + worst
        if budget.compute is not None:
            unit, hours = budget.compute
            if committed.compute_s(unit) > hours * 3600.0 + _EPS:
                return f"compute ceiling {hours:g} {unit}-hours"
        if budget.money is not None and committed.money > budget.money + _EPS:
            return f"money ceiling {budget.money:g} {budget.currency}"
        return None

    def affordable(self, worst: Spend, now: float, want: int) -> tuple[int, str | None]:
        """How many of *want* new trials whose worst case is *worst* could be reserved now
        (nothing is reserved), and the refusal that stops the next one."""
        trial = copy.copy(self)
        for count in range(want):
            why = trial.refusal(worst, now, new_trial=True)
            if why is not None:
                return count, why
            trial.reserve(worst, new_trial=True)
        return want, None

    def reserve(self, worst: Spend, *, new_trial: bool) -> None:
        self.reserved = self.reserved + worst
        if new_trial:
            self.trials += 1

    def settle(self, reserved: Spend, actual: Spend) -> None:
        """An attempt ended: its actual spend replaces its reservation."""
        self.reserved = self.reserved - reserved
        self.spent = self.spent + actual
