"""What a campaign run shows of itself: live counts, the best trial, how it ended, and the
listener that is told as it goes (the console implements it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse._pareto import dominates
from dse._types import CampaignStatus, EndReason, TrialStatus

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dse._engine import Engine
    from dse._types import Objective


@dataclass(frozen=True, slots=True)
class BestTrial:
    """The best completed trial so far (primary objective)."""

    number: int
    """Trial number."""
    params: Mapping[str, Any]
    """Its params."""
    score: float
    """Its primary objective value."""


@dataclass(slots=True)
class Stats:
    """Live counts, read by the console."""

    steps: int = 0
    proposals: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    cached: int = 0
    rejected: int = 0
    cancelled: int = 0
    interrupted: int = 0
    budget_exhausted: int = 0
    stopped: int = 0
    """Trials stopped early by the stopping rule (a promoted one leaves the count)."""
    promoted: int = 0
    """Stopped trials promoted (resumed from their checkpoint)."""
    running: int = 0
    passes: int = 0
    retries: int = 0
    paused: bool = False
    best: BestTrial | None = None
    front: dict[int, tuple[float, ...]] = field(default_factory=dict)
    """In a Pareto campaign, the trials on the front so far (number -> losses: each objective
    oriented so that lower is better), among those that may be ranked."""
    baseline: TrialStatus | None = None
    """How the baseline trial of this run ended (it is not one of the :attr:`steps`, nor
    counted with them), or ``None``."""

    def count(
        self, status: TrialStatus, number: int, params: Mapping[str, Any], score: float | None,
        objective: Objective, *, rank: bool = True, baseline: bool = False,
    ) -> None:
        """Count one trial that reached *status* (the baseline apart); keep the best completed
        one (among those that may be ranked: results about the current data)."""
        if status is TrialStatus.COMPLETED and rank and score is not None:
            self.rank(number, params, score, objective)
        if baseline:
            self.baseline = status
        else:
            self.tally(status)

    def tally(self, status: TrialStatus, n: int = 1) -> None:
        """Count *n* trials that reached *status* (no ranking, not the baseline)."""
        if status is TrialStatus.COMPLETED:
            self.completed += n
        elif status is TrialStatus.FAILED:
            self.failed += n
        elif status is TrialStatus.CANCELLED:
            self.cancelled += n
        elif status is TrialStatus.INTERRUPTED:
            self.interrupted += n
        elif status is TrialStatus.BUDGET_EXHAUSTED:
            self.budget_exhausted += n
        elif status is TrialStatus.STOPPED:
            self.stopped += n

    def forget_ranking(self) -> None:
        """No result ranks any more (the data changed): no best, an empty front."""
        self.best = None
        self.front = {}

    def join_front(self, number: int, losses: tuple[float, ...]) -> None:
        """Put trial *number* on the front unless a trial there is as good or better in every
        objective; those it dominates leave."""
        if any(v == losses or dominates(v, losses) for v in self.front.values()):
            return
        self.front = {n: v for n, v in self.front.items() if not dominates(losses, v)}
        self.front[number] = losses

    def rank(self, number: int, params: Mapping[str, Any], score: float,
             objective: Objective) -> None:
        """Keep trial *number* as the best so far if its *score* beats the best."""
        if self.best is None or objective.direction.better(score, self.best.score):
            self.best = BestTrial(number, params, score)


@dataclass(frozen=True, slots=True)
class CampaignResult:
    """How a campaign run ended."""

    campaign_id: int
    """Run id in the workspace record."""
    name: str
    """Campaign name."""
    status: CampaignStatus
    """How it ended: ``completed``, ``stopped``, ``cancelled``, ``budget_exhausted`` or
    ``failed`` (a :class:`CampaignStatus`, equal to its text)."""
    end_reason: EndReason
    """Why it ended (``agent_exhausted``, ``max_trials``, ``max_consecutive_rejections``...)."""
    stats: Stats
    """Final counts."""
    detail: str | None = None
    """For an ``error`` end: the type of the exception the controller raised."""

    @property
    def best(self) -> BestTrial | None:
        return self.stats.best


@dataclass(slots=True)
class RunEnd:
    """Why a run is ending, once something says so (one owner of it)."""

    done: EndReason | None = None
    """It ran out of work, or a rule or the budget ended it: what runs may finish."""
    stop: EndReason | None = None
    """Stop now: no new trials; what runs is cancelled and recorded."""

    def stopping(self) -> bool:
        # A method, not an attribute read: listeners and signal handlers set it mid-pass.
        return self.stop is not None

    def ending(self) -> bool:
        return self.done is not None or self.stop is not None

    def finish(self, reason: EndReason) -> bool:
        """Say the run is done for *reason* unless it already is; True if this said so."""
        if self.done is None:
            self.done = reason
            return True
        return False


class EngineListener:
    """Receives progress from the engine (the console implements it). Methods are no-ops."""

    def on_start(self, engine: Engine) -> None:
        """The campaign run was created in the record."""

    def on_trial_end(self, engine: Engine, number: int, status: TrialStatus) -> None:
        """A trial (or a cache hit) reached its outcome."""

    def on_pass(self, engine: Engine) -> None:
        """A polling pass was committed."""

    def on_alert(self, engine: Engine, message: str) -> None:
        """Something systematic happened (many interruptions, a failing node)."""

    def on_finish(self, engine: Engine, result: CampaignResult) -> None:
        """The campaign ended."""
