"""What a campaign run shows of itself: live counts, the best trial, how it ended, a trial's
end and a retry as the listener is told of them (:class:`dse.EngineListener`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse.model._pareto import dominates
from dse.model._types import CampaignStatus, EndReason, FailureClass, TrialStatus

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from dse.model._types import Objective


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
    """Live counts of a run, read by the console and returned in
    :attr:`CampaignResult.stats`. The counts of trials leave the baseline trial out; a resumed
    run restores them from the record, except :attr:`passes` and :attr:`retries`, which count
    this controller's."""

    steps: int = 0
    """Proposals that became trials, cache hits included (what ``max_trials`` counts)."""
    proposals: int = 0
    """Proposals the engine took and numbered, rejected ones included."""
    started: int = 0
    """Trials dispatched to run (cache hits are not)."""
    completed: int = 0
    """Trials that ended ``completed``."""
    failed: int = 0
    """Trials that ended ``failed``."""
    cached: int = 0
    """Cache hits that ended with the result they reuse."""
    rejected: int = 0
    """Proposals rejected (outside the space, or a constraint)."""
    cancelled: int = 0
    """Trials that ended ``cancelled``."""
    interrupted: int = 0
    """Trials that ended ``interrupted`` (out of retries)."""
    budget_exhausted: int = 0
    """Trials that ended ``budget_exhausted`` (their own ceiling, or refused by the budget)."""
    stopped: int = 0
    """Trials stopped early by the stopping rule (a promoted one leaves the count)."""
    promoted: int = 0
    """Stopped trials promoted (resumed from their checkpoint)."""
    running: int = 0
    """Trials holding or waiting for a slot, as of the last commit."""
    passes: int = 0
    """Polling passes made."""
    retries: int = 0
    """Retries: new attempts of trials whose last attempt was interrupted."""
    paused: bool = False
    """Dispatch is paused: interruptions reached the campaign's threshold in its window."""
    best: BestTrial | None = None
    """The best completed trial so far, among the results about the current data."""
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
    message: str | None = None
    """For a ``max_consecutive_failures`` end: the line that said why (the failure class,
    the first trial of the streak, its message and its log directory)."""

    @property
    def best(self) -> BestTrial | None:
        """The best completed trial of the run (:attr:`Stats.best`), or ``None``."""
        return self.stats.best

    @property
    def no_result(self) -> bool:
        """The run has no result: no trial completed (nor was stopped early with one) and
        none reused a completed result (what ``dse run`` exits 4 for)."""
        s = self.stats
        return s.completed == 0 and s.stopped == 0 and s.best is None and not s.front


@dataclass(slots=True)
class RunEnd:
    """Why a run is ending, once something says so (one owner of it)."""

    done: EndReason | None = None
    """It ran out of work, or a rule or the budget ended it: what runs may finish."""
    stop: EndReason | None = None
    """Stop now: no new trials; what runs is cancelled and recorded."""
    why: str | None = None
    """The line that said why a rule stopped the run (:attr:`CampaignResult.message`)."""

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


@dataclass(frozen=True, slots=True)
class TrialEnd:
    """How a trial (or a cache hit) ended, as :meth:`EngineListener.on_trial_ended` is told."""

    number: int
    """The trial's number in the run."""
    status: TrialStatus
    """Its outcome."""
    failure: FailureClass | None = None
    """The failure class of an outcome that is not a success (``None`` otherwise)."""
    message: str | None = None
    """The record's words on how it ended (an exit code, the backend's reason)."""
    attempts: int = 0
    """Attempts it ran (0 for a cache hit)."""
    node: str | None = None
    """Where its last attempt ran, when the backend said."""
    log: Path | None = None
    """The last attempt's directory in the trial directory (``attempt-N/``, where the local
    and Slurm backends put ``stdout.log`` and ``stderr.log``; it may not exist: a backend
    that never started the attempt made none), ``None`` for a trial without a directory."""
    wall_s: float = 0.0
    """Wall-clock seconds its attempts took, summed."""


@dataclass(slots=True)
class FailureStreak:
    """Trials in a row that failed the same way while no trial of the run has a result
    (``[campaign] max_consecutive_failures``): a broken setup, heard about at once, not after
    the whole campaign. Interruptions (the retry policy's), cancels, time limits and the
    baseline neither count nor break the streak; a failure of another class starts a new one.
    """

    limit: int
    """Failures in a row that end the run; 0: never."""
    count: int = 0
    """Failures in the current streak."""
    first: TrialEnd | None = None
    """The first trial of the streak (the lowest-numbered)."""
    first_id: str = ""
    """Its name as ``dse show`` takes it (``<campaign>-<run>-<number>``)."""

    def note(self, end: TrialEnd, trial_id: str, *, has_result: bool) -> bool:
        """Count *end* (of trial *trial_id*); True when it makes the streak reach the limit
        (said once). *has_result*: a trial of the run completed (or was reused completed)."""
        if has_result or end.status in (TrialStatus.COMPLETED, TrialStatus.STOPPED):
            self.count, self.first = 0, None
            return False
        if end.status is not TrialStatus.FAILED or end.failure is None or self.limit <= 0:
            return False
        if self.first is None or self.first.failure is not end.failure:
            self.count, self.first, self.first_id = 0, end, trial_id
        elif end.number < self.first.number:  # ended in the same pass, or overtaken
            self.first, self.first_id = end, trial_id
        self.count += 1
        return self.count == self.limit

    def line(self, shown: str | None) -> str:
        """What the run says when the streak ends it; *shown*: the first trial's log
        directory as the user reads it (``None``: it has none)."""
        first = self.first
        assert first is not None
        assert first.failure is not None
        why = f": {first.message}" if first.message else ""
        log = f"; log {shown}" if shown else ""
        return (f"stopping: {self.count} trials in a row failed ({first.failure.value}) and"
                f" none completed (max_consecutive_failures = {self.limit}); the first,"
                f" {self.first_id}{why}{log}")


@dataclass(frozen=True, slots=True)
class Retry:
    """A new attempt of a trial, as :meth:`EngineListener.on_retry` is told."""

    number: int
    """The trial's number in the run."""
    attempt: int
    """The new attempt's number (2 for the first retry)."""
    after: str
    """How the attempt before it ended (its raw state: ``preempted``, ``node_fail``...)."""
    cause: str
    """Its failure class (``preempted``, ``node_failure``, ``killed``...), or ``cancelled``
    for a cancelled trial a later run resumes."""
    node: str | None
    """Where the attempt before it ran, when known."""
    resumed: bool
    """The new attempt resumes from the trial's checkpoint (else it starts over)."""
    message: str | None = None
    """The record's words on how the attempt before it ended (``killed by signal 9``)."""


