"""One run's spend and the three numbers (DESIGN.md, "The numbers that matter"), read from
the record's summaries: what ``dse status`` prints of each run. ``dse report`` adds the rest
(:mod:`dse.report._report`, which re-exports these names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse.model._errors import DseError
from dse.model._states import RESOLVED_SCORER, TrialStatus

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dse.model._outcome import Stats
    from dse.model._spend import Spend
    from dse.record._base import Storage
    from dse.record._records import CampaignRun

__all__ = ["Numbers", "PerResult", "RunSummary", "campaign_run", "invalid_trials",
           "live_counts", "numbers", "primary_objective", "summarize", "tally_text"]

_FINISHED = (TrialStatus.COMPLETED, TrialStatus.STOPPED, TrialStatus.FAILED,
             TrialStatus.BUDGET_EXHAUSTED, TrialStatus.INTERRUPTED)
_USABLE = (TrialStatus.COMPLETED, TrialStatus.STOPPED)
"""A result at its end or at the rung the stopping rule stopped it (a low-fidelity result the
agent learns from and a proposal may reuse): what the effective rate counts."""


class PerResult:
    """Cost per effective result, for anything that has ``spent`` and ``effective``; the
    rates, for anything that also has ``finished`` and ``wall_s``."""

    __slots__ = ()
    spent: Spend
    effective: int
    finished: int
    wall_s: float

    @property
    def throughput_per_h(self) -> float:
        """Finished trials per hour of wall clock."""
        return self.finished * 3600.0 / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def effective_per_h(self) -> float:
        """Usable results per hour of wall clock."""
        return self.effective * 3600.0 / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cost_per_effective(self) -> float | None:
        """Money per usable result (``None`` before the first one)."""
        return self.spent.money / self.effective if self.effective else None

    def compute_per_effective_h(self, unit: str) -> float | None:
        """*unit*-hours (``cpu``, ``gpu``, ``node``) per usable result."""
        if not self.effective:
            return None
        return self.spent.compute_s(unit) / 3600.0 / self.effective


@dataclass(frozen=True, slots=True)
class RunSummary(PerResult):
    """One run's spend and the three numbers."""

    campaign_id: int
    name: str
    status: str
    wall_s: float
    """From the run's creation to its end (or to *now* while it runs)."""
    finished: int
    effective: int
    cached: int
    spent: Spend
    currency: str
    budget: dict[str, Any]
    serves: tuple[str, ...]
    failures: dict[str, int] = field(default_factory=dict)
    """Failure class → trials."""
    queued: int = 0
    """Of the ``running`` trials, those with no attempt running now: submitted and not
    started yet (queued in the backend), or waiting to be retried."""
    cancelled_unstarted: int = 0
    """Of the ``cancelled`` trials, those cancelled before any attempt of theirs started."""


@dataclass(frozen=True, slots=True)
class Numbers(PerResult):
    """The three numbers of a run from its counts, its wall clock and its spend: one
    definition for the live view, the line ``dse run`` ends with, ``dse status`` and ``dse
    report`` (:func:`numbers`)."""

    finished: int
    """Trials that reached an outcome, stopped ones included (not cache hits, not
    cancelled)."""
    effective: int
    """Trials with a usable result (completed, or stopped at a rung), not flagged invalid."""
    wall_s: float
    spent: Spend


def numbers(counts: Mapping[TrialStatus, int], *, wall_s: float, spent: Spend,
            invalid_usable: int = 0) -> Numbers:
    """The :class:`Numbers` of a run whose trials stand at *counts* (status → trials), of
    which *invalid_usable* usable ones are flagged invalid."""
    return Numbers(finished=sum(counts.get(s, 0) for s in _FINISHED),
                   effective=sum(counts.get(s, 0) for s in _USABLE) - invalid_usable,
                   wall_s=wall_s, spent=spent)


def live_counts(stats: Stats) -> dict[TrialStatus, int]:
    """Status → trials of a running campaign's live *stats* (what :func:`numbers` and
    :func:`tally_text` read of it)."""
    return {TrialStatus.COMPLETED: stats.completed, TrialStatus.STOPPED: stats.stopped,
            TrialStatus.FAILED: stats.failed,
            TrialStatus.BUDGET_EXHAUSTED: stats.budget_exhausted,
            TrialStatus.INTERRUPTED: stats.interrupted, TrialStatus.CACHED: stats.cached,
            TrialStatus.CANCELLED: stats.cancelled}


def tally_text(stats: Stats, *, unstarted: int | None = None) -> str:
    """``4 completed, 1 failed, 1 budget_exhausted (a time limit or ceiling), 0 cached, 2
    rejected, 8 cancelled (6 never started)``: every end a trial of *stats* can have (the
    rarer ones, budget_exhausted, interrupted and stopped, when there are some) and the
    rejections, as the live view and the line ``dse run`` ends with both print them;
    *unstarted*: of the cancelled, those that never started, when known."""
    never = f" ({unstarted} never started)" if unstarted and stats.cancelled else ""
    return (f"{stats.completed} completed, {stats.failed} failed"
            + (f", {stats.budget_exhausted} budget_exhausted (a time limit or ceiling)"
               if stats.budget_exhausted else "")
            + (f", {stats.interrupted} interrupted" if stats.interrupted else "")
            + f", {stats.cached} cached, {stats.rejected} rejected, {stats.cancelled}"
            f" cancelled{never}"
            + (f", {stats.stopped} stopped early ({stats.promoted} promoted)"
               if stats.stopped or stats.promoted else "")
            + ("" if stats.baseline is None else f"; baseline {stats.baseline.value}"))


def summarize(
    store: Storage, campaign_id: int, *, now: float | None = None,
    invalid: dict[int, str] | None = None,
) -> RunSummary:
    """The :class:`RunSummary` of run *campaign_id* as the record has it (*invalid*: its
    :func:`invalid_trials`, when the caller has them). Read through SQL aggregates: its cost
    does not grow with the number of trials."""
    run = campaign_run(store, campaign_id)
    spec = run.spec
    end = run.ended_at if run.ended_at is not None else now
    if end is None:
        end = run.created_at
    counts = store.reads.trial_counts(campaign_id)
    if invalid is None:
        invalid = invalid_trials(store, campaign_id)
    invalid_usable = sum(1 for status in store.reads.trial_statuses(invalid).values()
                         if status in _USABLE)
    budget = spec.get("budget") or {}
    three = numbers(counts, wall_s=max(float(end) - float(run.created_at), 0.0),
                    spent=store.reads.spend_total(campaign_id), invalid_usable=invalid_usable)
    unstarted = store.summaries.unstarted(campaign_id) if (
        counts.get(TrialStatus.RUNNING) or counts.get(TrialStatus.CANCELLED)) else {}
    return RunSummary(
        campaign_id=campaign_id,
        name=run.name,
        status=run.status.value,
        wall_s=three.wall_s,
        finished=three.finished,
        effective=three.effective,
        cached=counts.get(TrialStatus.CACHED, 0),
        spent=three.spent,
        currency=spec.get("currency") or budget.get("currency") or "USD",
        budget=budget,
        serves=tuple(spec.get("serves") or (run.name,)),
        failures=store.summaries.failure_counts(campaign_id),
        queued=unstarted.get(TrialStatus.RUNNING, 0),
        cancelled_unstarted=unstarted.get(TrialStatus.CANCELLED, 0),
    )


def campaign_run(store: Storage, campaign_id: int) -> CampaignRun:
    """Run *campaign_id* of *store*, or :class:`DseError` when it has none so numbered."""
    run = store.reads.campaign(campaign_id)
    if run is None:
        raise DseError(f"{store.where}: no campaign run {campaign_id}")
    return run


def invalid_trials(store: Storage, campaign_id: int) -> dict[int, str]:
    """Trial row → why it is flagged invalid (its result's invalidation, else its score's),
    for the trials of run *campaign_id*."""
    return store.reads.invalid_reasons(campaign_id)


def primary_objective(spec: Mapping[str, Any]) -> tuple[str, str]:
    """(metric, direction) a run's best trial is ranked by, from its recorded *spec*: its
    first objective's, or its scorer's (``score (NAME)``) when that is not the default."""
    objectives = spec.get("objectives") or [{}]
    resolved = spec.get(RESOLVED_SCORER) or {}
    metric = str(objectives[0].get("metric", "score"))
    if resolved.get("name", "default") != "default":
        metric = f"score ({resolved['name']})"
    return metric, str(resolved.get("direction") or objectives[0].get("direction", "minimize"))


def run_best(store: Storage, run: CampaignRun) -> tuple[int, str, float] | None:
    """The best trial of *run* about its latest data version: (number, metric, score)."""
    if run.spec.get("pareto"):
        return None  # a front, not one best (dse report lists it)
    tallies = store.summaries.version_tallies(run.id)
    if not tallies:
        return None
    metric, direction = primary_objective(run.spec)
    row = store.summaries.best_of_version(run.id, tallies[-1].version,
                                          maximize=direction == "maximize")
    if row is None or row.score is None:
        return None
    return row.number, metric, float(row.score)
