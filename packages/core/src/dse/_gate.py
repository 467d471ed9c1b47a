"""TEMPORARY shim of the budget gate (replaced by the tested module on merge)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse._budget import Ledger, Spend
from dse._errors import ConfigError

if TYPE_CHECKING:
    from dse._budget import Budget, Price
    from dse._campaign import EnvironmentConfig
    from dse._types import JobSpec, JobStatus, Resources


class BudgetGate:
    def __init__(self, budget: Budget, price: Price, *, overrun_s: float) -> None:
        self.budget, self.price, self.overrun_s = budget, price, float(overrun_s)
        self.ledger = Ledger(budget, started_at=0.0)

    def check(self, environment: EnvironmentConfig, *, where: str) -> None:
        budget = self.budget
        env = environment
        limit = budget.trial.time_limit(env.time_limit, env.resources, self.price,
                                        self.overrun_s)
        needs_limit = budget.compute is not None or budget.money is not None or (
            budget.wall_clock_s is not None and budget.on_deadline == "finish"
        )
        if limit is None and needs_limit:
            raise ConfigError(
                f"{where}: budget: a compute, money or finishing wall-clock ceiling needs a time"
                " limit per trial to reserve (set environment.time_limit or budget.trial.*)"
            )
        if limit is not None and limit <= 0:
            raise ConfigError(
                f"{where}: budget.trial: the per-trial ceilings leave no time to run on"
                f" {env.resources.cpus} CPUs and {env.resources.gpus} GPUs (the backend may"
                f" run {self.overrun_s:g}s past a time limit)"
            )

    def worst(self, spec: JobSpec) -> Spend:
        return self.worst_case(spec.time_limit, spec.resources)

    def worst_case(self, time_limit: float | None, resources: Resources) -> Spend:
        if time_limit is None:
            return Spend()
        wall = time_limit + self.overrun_s
        return Spend(wall, wall * resources.cpus, wall * resources.gpus, wall,
                     wall * self.price.per_second(resources))

    def time_limit(self, spec: JobSpec, spent: Spend) -> float | None:
        return self.budget.trial.time_limit(
            spec.time_limit, spec.resources, self.price, self.overrun_s, spent
        )

    def affordable(
        self, want: int, now: float, environment: EnvironmentConfig
    ) -> tuple[int, str | None]:
        if not self.ledger.budget.limited:
            return want, None
        env = environment
        limit = self.budget.trial.time_limit(
            env.time_limit, env.resources, self.price, self.overrun_s
        )
        return self.ledger.affordable(self.worst_case(limit, env.resources), now, want)

    def reserve(self, spec: JobSpec, now: float, *, new_trial: bool) -> Spend | str:
        worst = self.worst(spec)
        why = self.ledger.refusal(worst, now, new_trial=new_trial)
        if why is not None:
            return why
        self.ledger.reserve(worst, new_trial=new_trial)
        return worst

    def hold(self, spec: JobSpec) -> Spend:
        worst = self.worst(spec)
        self.ledger.reserve(worst, new_trial=False)
        return worst

    def charge(self, spec: JobSpec, status: JobStatus, ended_at: float) -> Spend:
        started = status.started_at
        elapsed = max(ended_at - started, 0.0) if started is not None else 0.0
        return self.price.charge(elapsed, spec.resources, status.usage)

    def settle(self, reserved: Spend | None, actual: Spend | None) -> Spend:
        reserved = reserved or Spend()
        actual = reserved if actual is None else actual
        self.ledger.settle(reserved, actual)
        return actual

    @property
    def deadline(self) -> float | None:
        return self.ledger.deadline

    @property
    def started_at(self) -> float:
        return self.ledger.started_at

    @started_at.setter
    def started_at(self, value: float) -> None:
        self.ledger.started_at = value

    @property
    def spent(self) -> Spend:
        return self.ledger.spent

    @property
    def reserved(self) -> Spend:
        return self.ledger.reserved
