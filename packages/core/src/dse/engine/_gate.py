"""The budget gate: the one owner of a campaign's budget state (docs/budgets.md).

The engine asks the gate before every attempt and tells it after: :meth:`BudgetGate.reserve`
takes the attempt's worst case from every ceiling or says why it cannot, and
:meth:`BudgetGate.settle` replaces that reservation with what the attempt spent. The gate
needs no store, backend or clock: times are passed in — readings of the engine's monotonic
clock (:meth:`dse.Clock.monotonic`), which a step of the wall clock does not move — so it is
tested on its own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from dse.model._budget import Earlier, Ledger, Spend
from dse.model._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dse.campaign._model import EnvironmentConfig
    from dse.model._budget import Budget, Price
    from dse.model._types import JobSpec, JobStatus, Resources

__all__ = ["BudgetGate"]


class BudgetGate:
    """Reserves each attempt's worst case before it starts and settles its actual spend after.

    An attempt's worst case is its time limit plus the backend's *overrun_s* (how long the
    backend may let it run past that limit), times its CPUs, GPUs and one node, priced by
    *price*. A reservation must fit under every ceiling of *budget* together with what is
    already spent and reserved; what does not fit is refused, and nothing is reserved for it.
    Since no attempt runs past its limit plus the overrun, settling never spends more than was
    reserved, and the campaign never spends past a ceiling.

    The per-trial ceilings of *budget* become each attempt's time limit
    (:meth:`time_limit`), given what the trial's earlier attempts spent.
    """

    def __init__(self, budget: Budget, price: Price, *, overrun_s: float) -> None:
        self.budget = budget
        """The campaign's ceilings."""
        self.price = price
        """The backend's price model."""
        self.overrun_s = float(overrun_s)
        """How long the backend may let an attempt run past its time limit."""
        self.ledger = Ledger(budget, started_at=0.0)
        """Spent and reserved amounts against the ceilings (the console reads them)."""

    # -- before the campaign starts -------------------------------------------------------

    def check(self, environment: EnvironmentConfig, *, where: str) -> None:
        """Raise :class:`ConfigError` (naming *where*) when the campaign's ceilings cannot be
        enforced for trials of *environment*: a compute, money or finishing wall-clock ceiling
        without a time limit to reserve, or per-trial ceilings that leave no time to run."""
        budget = self.budget
        limit = budget.trial.time_limit(environment.time_limit, environment.resources,
                                        self.price, self.overrun_s)
        needs_limit = budget.compute is not None or budget.money is not None or (
            budget.wall_clock_s is not None and budget.on_deadline == "finish"
        )
        if limit is None and needs_limit:
            message = (
                f"{where}: budget: a compute, money or finishing wall-clock ceiling needs a time"
                " limit per trial to reserve (set environment.time_limit or budget.trial.*)"
            )
            raise ConfigError(message)
        if limit is not None and limit <= 0:
            resources = environment.resources
            message = (
                f"{where}: budget.trial: the per-trial ceilings leave no time to run on"
                f" {resources.describe()} (the backend may"
                f" run {self.overrun_s:g}s past a time limit)"
            )
            raise ConfigError(message)

    def open(self, started_at: float) -> None:
        """The run (new or resumed) started at *started_at* on the monotonic clock: the
        wall-clock ceiling counts from there. A resumed run passes the time of this process's
        start less the run time the record says earlier processes drove it (a monotonic
        reading means nothing in another process)."""
        self.ledger.started_at = started_at

    def carry(self, earlier: Earlier) -> None:
        """What the campaign's earlier runs spent (``[budget] scope = "campaign"``, the
        default): counted against every campaign ceiling of this run."""
        self.ledger.earlier = earlier

    def restore(self, spent: Iterable[Spend], *, trials: int) -> None:
        """A resumed run: what its attempts *spent* before (in the record's order) and how
        many *trials* it dispatched (retries and cache hits are not trials)."""
        ledger = self.ledger
        for spend in spent:
            ledger.spent = ledger.spent + spend
        ledger.trials = trials

    # -- what an attempt may spend --------------------------------------------------------

    def time_limit(self, spec: JobSpec, spent: Spend) -> float | None:
        """The time limit that keeps an attempt of *spec* within the per-trial ceilings when
        its trial's earlier attempts *spent* that much: the smallest of ``spec.time_limit``
        and what the ceilings leave at its resources, less the overrun. Not positive: the
        trial has nothing left for another attempt. ``None``: no limit."""
        return self.budget.trial.time_limit(
            spec.time_limit, spec.resources, self.price, self.overrun_s, spent
        )

    def worst(self, spec: JobSpec) -> Spend:
        """The most one attempt of *spec* can spend (see :meth:`worst_case`)."""
        return self.worst_case(spec.time_limit, spec.resources)

    def worst_case(self, time_limit: float | None, resources: Resources) -> Spend:
        """(*time_limit* + overrun) x *resources* on all their nodes, priced; with no time limit,
        nothing (only the trials and a cancelling wall-clock ceiling bound such attempts)."""
        if time_limit is None:
            return Spend()
        wall = time_limit + self.overrun_s
        return Spend(wall, wall * resources.total_cpus, wall * resources.total_gpus,
                     wall * resources.nodes,
                     wall * self.price.per_second(resources))

    # -- before an attempt starts ---------------------------------------------------------

    def affordable(
        self, want: int, now: float, environment: EnvironmentConfig
    ) -> tuple[int, str | None]:
        """How many of *want* new trials of *environment*'s resources and time limit could be
        reserved at *now* (nothing is reserved), and the refusal that stops the next one."""
        if not self.budget.limited:
            return want, None
        limit = self.budget.trial.time_limit(
            environment.time_limit, environment.resources, self.price, self.overrun_s
        )
        return self.ledger.affordable(self.worst_case(limit, environment.resources), now, want)

    def answers_from_record(self) -> bool:
        """Whether a run whose budget affords no new trial still pulls proposals, one at a
        time, for the record to answer (cache hits cost nothing): when the campaign's earlier
        runs spent it and this run has dispatched nothing yet. A rerun of a spent campaign
        then answers every configuration its agent proposes again, and ends at the first it
        would have to run (refused: ``budget_exhausted``, not dispatched)."""
        return bool(self.ledger.earlier.runs) and self.ledger.trials == 0

    def reserve(self, spec: JobSpec, now: float, *, new_trial: bool) -> Spend | str:
        """Reserve the worst case of an attempt of *spec* about to start at *now* (a
        *new_trial* also counts against the trials ceiling; a retry does not). Returns the
        reservation, to :meth:`settle` when the attempt ends, or why it does not fit (then
        nothing is reserved)."""
        worst = self.worst(spec)
        why = self.ledger.refusal(worst, now, new_trial=new_trial)
        if why is not None:
            return why
        self.ledger.reserve(worst, new_trial=new_trial)
        return worst

    def hold(self, spec: JobSpec) -> Spend:
        """Re-take the reservation of an attempt of *spec* that was already running when the
        run was resumed (it was admitted before; nothing is checked) and return it."""
        worst = self.worst(spec)
        self.ledger.reserve(worst, new_trial=False)
        return worst

    # -- after an attempt ends ------------------------------------------------------------

    def charge(self, spec: JobSpec, status: JobStatus, ended_at: float) -> Spend:
        """What an attempt of *spec* that ended at *ended_at* spent: its run time since
        ``status.started_at`` (none if it never started) at its resources, or what the
        backend's accounting (``status.usage``) charged, priced."""
        measured = status.elapsed_s
        if measured is not None and math.isfinite(measured):
            # The controller's own monotonic measure: neither a wall-clock step nor a stopped
            # process stamping its times (the local wrapper) moves it.
            elapsed = max(float(measured), 0.0)
        else:
            started = status.started_at
            elapsed = max(ended_at - started, 0.0) if started is not None else 0.0
        return self.price.charge(elapsed, spec.resources, status.usage)

    def settle(self, reserved: Spend | None, actual: Spend | None) -> Spend:
        """An attempt that held *reserved* ended: *actual* replaces the reservation as spent.
        ``None`` as *actual*: the backend never confirmed the end, so the attempt is charged
        its reservation. Returns what was charged."""
        reserved = reserved or Spend()
        actual = reserved if actual is None else actual
        self.ledger.settle(reserved, actual)
        return actual

    # -- the ledger, read-only ------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        """What the ``budget_exhausted`` event records: this run's spend and reservations,
        and what the campaign's earlier runs spent of the same ceilings (``earlier``, with
        the default scope: `dse run` then says so, and how to raise them)."""
        earlier = self.ledger.earlier
        out: dict[str, Any] = {"spent": self.spent.as_dict(), "reserved": self.reserved.as_dict()}
        if earlier.runs:
            out["earlier"] = {"runs": list(earlier.runs), "trials": earlier.trials,
                              "spent": earlier.spent.as_dict(), "run_s": earlier.run_s}
        return out

    @property
    def started_at(self) -> float:
        """When the run started, on the monotonic clock (the wall-clock ceiling counts from
        here)."""
        return self.ledger.started_at

    @started_at.setter
    def started_at(self, value: float) -> None:
        self.ledger.started_at = value

    @property
    def deadline(self) -> float | None:
        """When the wall-clock ceiling is reached, on the monotonic clock (``None``: no such
        ceiling)."""
        return self.ledger.deadline

    @property
    def spent(self) -> Spend:
        """What the run's settled attempts spent."""
        return self.ledger.spent

    @property
    def reserved(self) -> Spend:
        """What running (and admitted) attempts hold in reservations."""
        return self.ledger.reserved

    @property
    def trials(self) -> int:
        """Trials dispatched so far (against the trials ceiling)."""
        return self.ledger.trials
