"""The parts of a run the dispatcher works with (:class:`Parts`, each the owner of its own
state), and what the stopping rule's promotion needs of the dispatcher (:class:`Starter`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

from dse.engine._seeding import EnqueuedQueue

if TYPE_CHECKING:
    from dse.campaign._model import Campaign
    from dse.engine._baseline import Baselines
    from dse.engine._claims import Claims
    from dse.engine._feedback import Feedback
    from dse.engine._gate import BudgetGate
    from dse.engine._invalidation import InvalidationView
    from dse.engine._journal import Journal
    from dse.engine._live import CurrentData, LiveTrial, TrialTable
    from dse.engine._results import Results
    from dse.engine._retry import InterruptionWatch
    from dse.model._outcome import RunEnd, Stats
    from dse.model._types import AttemptState, JobSpec
    from dse.plugins._protocols import Environment
    from dse.record._base import Storage


Hashed = tuple[dict[str, Any], str, str]
"""Coerced params, their canonical JSON and their config hash."""


@dataclasses.dataclass(slots=True)
class Parts:
    """The parts of a run the dispatcher works with (each the owner of its own state)."""

    campaign: Campaign
    store: Storage
    journal: Journal
    table: TrialTable
    gate: BudgetGate
    feedback: Feedback
    stats: Stats
    results: Results
    baselines: Baselines
    invalid: InvalidationView
    data: CurrentData
    environment: Environment
    watch: InterruptionWatch
    end: RunEnd
    claims: Claims
    backend: str
    """The backend's name, recorded with each attempt."""
    queue: EnqueuedQueue = dataclasses.field(default_factory=EnqueuedQueue)
    """The configurations enqueued for the campaign that the run has not taken yet."""
    stopping: Promoter | None = None
    """Promotes stopped trials into free room before retries are admitted and new
    proposals pulled (``[stopping]``: :class:`dse.engine._stopping.EarlyStopping`)."""


class Starter(Protocol):
    """What starts another attempt of a trial within the run's parts (the dispatcher)."""

    @property
    def parts(self) -> Parts:
        """The run's parts."""
        ...

    @property
    def first_state(self) -> AttemptState:
        """What a new attempt is recorded as (``queued`` or ``submitting``)."""
        ...

    def avoiding(self, spec: JobSpec, trial: LiveTrial) -> JobSpec:
        """*spec* told to avoid the nodes to avoid, within the per-trial ceilings."""
        ...


class Spawner(Starter, Protocol):
    """What makes a new trial of params the agent did not propose (the dispatcher): an
    exploit's, in population-based training."""

    def number_spawned(self) -> int:
        """Number a proposal the agent did not make (logged as an ``exploit`` call, which a
        replay skips); its number."""
        ...

    def new_trial(self, params: dict[str, Any], proposal: int,
                  hashed: Hashed | None = None) -> LiveTrial:
        """Make *params* a trial (or a cache hit) of proposal *proposal*."""
        ...


class Promoter(Protocol):
    """What promotes stopped trials into free room, and makes the trials of exploits (a
    run's early stopping)."""

    def promote(self, starter: Spawner, slots: int, now: float) -> int:
        """Make the pending exploits trials, then resume up to *slots* stopped trials; how
        many were resumed."""
        ...

    def members_left(self, steps: int) -> int | None:
        """How many more trials the agent may be asked for, *steps* taken (``None``: no
        population to fill)."""
        ...


def reusable(parts: Parts, digest: str) -> LiveTrial | None:
    """The trial of the run's table whose result a proposal of config *digest* may reuse (it
    runs, or ended in this pass), unless that result was invalidated: the one reuse check."""
    known = parts.table.reusable(digest)
    if known is None or parts.invalid.result_flagged(known.row_id):
        return None
    return known
