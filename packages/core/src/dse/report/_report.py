"""The numbers that matter, read back from the record (DESIGN.md, "The numbers that matter").

* **throughput** — trials that reached an outcome (completed, stopped at a rung by the
  stopping rule, failed, hit their ceiling or were interrupted for good; not cache hits, not
  cancelled) per hour of the run's wall clock;
* **effective rate** — trials with a usable result (completed, or stopped at a rung: a
  low-fidelity result the agent learns from; not flagged invalid) per wall-clock hour;
* **cost per effective result** — everything the run spent (every attempt of every trial,
  failures included) divided by the number of usable results, in money and in compute.

Spend is attributed per attempt and rolled up to trial, run, and objective label (the
``serves`` labels of the campaign); a cache hit costs nothing and names the trial whose spend
it reuses.

:class:`RunSummary` and :func:`summarize` (what ``dse status`` prints, which needs nothing
else from here) are :mod:`dse.report._summary`'s, re-exported.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from dse.model._spend import Spend
from dse.model._states import RESOLVED_SCORER, TrialStatus
from dse.report._front import Front, pareto_fronts
from dse.report._stopreport import StoppingDetail, stopping_detail
from dse.report._summary import (
    PerResult,
    RunSummary,
    campaign_run,
    invalid_trials,
    primary_objective,
    summarize,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dse.record._base import Storage

__all__ = [
    "BestResult",
    "CacheHit",
    "Interruptions",
    "ObjectiveRollup",
    "RunDetail",
    "RunSummary",
    "invalid_trials",
    "rollup_by_objective",
    "run_detail",
    "summarize",
]

_SPEND_FIELDS = tuple(f.name for f in fields(Spend))
_SPEND_OF = attrgetter(*_SPEND_FIELDS)


def _total(spends: Iterable[Spend]) -> Spend:
    """The sum of *spends*, added in order as ``Spend() + a + b…`` would (the same floats),
    without building a :class:`Spend` per addition: a report sums 100,000 of them."""
    total = [0.0] * len(_SPEND_FIELDS)
    for spend in spends:
        total = [a + b for a, b in zip(total, _SPEND_OF(spend), strict=True)]
    return Spend(*total)


# -- what `dse report` shows beyond the three numbers ----------------------------------------

@dataclass(frozen=True, slots=True)
class BestResult:
    """The best completed trial of a run by its primary objective."""

    trial: int
    metric: str
    direction: str
    """``minimize`` or ``maximize``."""
    score: float
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CacheHit:
    """A trial answered from the record: it cost nothing and reuses another trial's spend."""

    trial: int
    reuses_run: int
    reuses_trial: int
    reuses_spend: Spend
    """What the reused trial cost when it ran."""


@dataclass(frozen=True, slots=True)
class RunDetail:
    """One run as `dse report` shows it: its :class:`RunSummary` and how it ended."""

    summary: RunSummary
    end_reason: str | None
    budget_reason: str | None
    """Why the budget ended the run (the ledger's refusal), if it did."""
    outcomes: dict[str, int]
    """Trial status → trials (cache hits included, as ``cached``)."""
    dispatched: int
    """Trials that ran on the backend (not cache hits): what a trials ceiling counts."""
    best: BestResult | None
    """The best completed trial, or cache hit of one, about the current (latest) data
    version."""
    cache_hits: tuple[CacheHit, ...]
    data_versions: tuple[VersionGroup, ...] = ()
    """Trials grouped by the data version they are about, oldest first; no ranking crosses
    groups. Empty when the campaign declares no data."""
    mismatched: tuple[int, ...] = ()
    """Trials (numbers) that read another data version than they were dispatched against."""
    invalid: tuple[tuple[int, str], ...] = ()
    """Trials (number, reason) whose result or score is flagged invalid: never ranked."""
    scorer: str = "default"
    """The scorer that scored the run (``name version``)."""
    stopping: StoppingDetail | None = None
    """The run's early stopping, when it has a stopping rule (:mod:`dse.report._stopreport`)."""
    fronts: tuple[Front, ...] = ()
    """A Pareto run's fronts, one per data version (the last: the latest); empty for a run
    that optimises one objective (:mod:`dse.report._front`)."""
    interruptions: Interruptions | None = None
    """The attempts an interruption ended and that were retried (``None``: none were)."""
    overrides: tuple[str, ...] = ()
    """The ``dse run --set KEY=VALUE`` overrides the run was started with."""
    first_failures: tuple[tuple[str, int, str | None], ...] = ()
    """(failure class, trial number, message) of the first failed trial of each class."""
    budget_earlier: dict[str, Any] | None = None
    """What the campaign's earlier runs had spent of the ceilings that ended the run (the
    ``budget_exhausted`` event's ``earlier``: ``runs``, ``trials``, ``spent``, ``run_s``),
    when they counted (``[budget] scope = "campaign"``)."""


@dataclass(frozen=True, slots=True)
class Interruptions:
    """The interruptions of one run that were retried (killed by an unknown sender,
    preempted, node or boot failure, vanished, launch error), from its ``retry`` events: the
    count grows with the retries, never with the trials."""

    retried: int
    """Attempts an interruption ended, each followed by a new attempt of the same trial."""
    by_class: dict[str, int]
    """Failure class -> retried attempts, in the order they first happened."""
    resumed: int
    """Retries that resumed from the trial's checkpoint (the rest started over)."""
    nodes: dict[str, int]
    """Node -> interruptions there, where the backend named the node."""
    trials: int
    """Distinct trials retried."""


@dataclass(frozen=True, slots=True)
class VersionGroup:
    """The trials of a run about one data version (the version read, else the expected)."""

    version: str
    trials: int
    completed: int
    mismatched: int
    """Trials that read another version than the one they were dispatched against."""
    best: BestResult | None


def run_detail(store: Storage, campaign_id: int, *, now: float | None = None) -> RunDetail:
    """The :class:`RunDetail` of run *campaign_id* as the record has it, read through SQL
    aggregates and indexed lookups (its cost grows with what it lists — cache hits, flagged
    and mismatched trials, data versions — never with the number of trials)."""
    invalid = invalid_trials(store, campaign_id)
    summary = summarize(store, campaign_id, now=now, invalid=invalid)
    run = campaign_run(store, campaign_id)
    spec = run.spec
    resolved = spec.get(RESOLVED_SCORER) or {}
    metric, direction = primary_objective(spec)

    def best_of(version: str | None) -> BestResult | None:
        row = store.summaries.best_of_version(campaign_id, version,
                                              maximize=direction == "maximize")
        if row is None or row.score is None:
            return None
        return BestResult(row.number, metric, direction, float(row.score), row.params)

    tallies = store.summaries.version_tallies(campaign_id)
    # The last group (by first appearance) is the current (latest) data version.
    best = best_of(tallies[-1].version) if tallies else None
    versions = tuple(
        VersionGroup(g.version, g.trials, g.completed, g.mismatched,
                     best if g is tallies[-1] else best_of(g.version))
        for g in tallies if g.version is not None
    )
    numbers = {row: ref.number for row, ref in store.reads.trial_refs(invalid).items()}
    flagged = sorted((numbers[row], why) for row, why in invalid.items() if row in numbers)
    reused = store.summaries.cache_links(campaign_id)
    originals = store.reads.trial_refs(original for _, original in reused)
    by_original: dict[int, list[Spend]] = {}
    for attempt in store.reads.trial_spends(originals):
        by_original.setdefault(attempt.trial_id, []).append(attempt.spend)
    paid = {row: _total(spends) for row, spends in by_original.items()}
    hits = [
        CacheHit(number, originals[original].campaign_id, originals[original].number,
                 paid.get(original, Spend()))
        for number, original in reused
    ]
    budget_reason = budget_earlier = None
    for event in store.reads.events(campaign_id, "budget_exhausted"):
        budget_reason = (event.data or {}).get("reason")
        budget_earlier = (event.data or {}).get("earlier")
    return RunDetail(
        summary=summary, end_reason=run.end_reason, budget_reason=budget_reason,
        outcomes=_split_queued(store.summaries.outcome_counts(campaign_id), summary.queued),
        dispatched=store.reads.dispatched(campaign_id),
        best=best, cache_hits=tuple(hits), data_versions=versions,
        mismatched=tuple(store.summaries.mismatched_numbers(campaign_id)), invalid=tuple(flagged),
        scorer=f"{resolved.get('name', 'default')} {resolved.get('version', '')}".strip(),
        stopping=stopping_detail(store, run),
        fronts=tuple(pareto_fronts(store, campaign_id, spec)),
        interruptions=_interruptions(store, campaign_id),
        overrides=tuple(spec.get("overrides") or ()),
        first_failures=tuple((cls, n, message) for cls, (n, message)
                             in store.summaries.first_failures(campaign_id).items()),
        budget_earlier=budget_earlier if isinstance(budget_earlier, dict) else None,
    )


def _split_queued(outcomes: dict[str, int], queued: int) -> dict[str, int]:
    """*outcomes* with the ``queued`` of its ``running`` trials apart (submitted, not
    started), right after them: ``running`` counts only those an attempt runs now."""
    if not queued:
        return outcomes
    out: dict[str, int] = {}
    for status, n in outcomes.items():
        if status == TrialStatus.RUNNING.value:
            if n > queued:
                out[status] = n - queued
            out["queued"] = queued
        else:
            out[status] = n
    return out


def _interruptions(store: Storage, campaign_id: int) -> Interruptions | None:
    """The run's retried interruptions (a cancelled trial resumed by a later run is not one)."""
    retries = [e.data for e in store.reads.events(campaign_id, "retry")
               if e.data and e.data.get("after") != "cancelled"]
    if not retries:
        return None
    by_class: dict[str, int] = {}
    nodes: dict[str, int] = {}
    for data in retries:
        cause = str(data.get("class") or data.get("after"))
        by_class[cause] = by_class.get(cause, 0) + 1
        if data.get("node"):
            nodes[str(data["node"])] = nodes.get(str(data["node"]), 0) + 1
    return Interruptions(
        retried=len(retries), by_class=by_class,
        resumed=sum(1 for data in retries if data.get("resumed")), nodes=nodes,
        trials=len({data.get("trial") for data in retries}))


@dataclass(frozen=True, slots=True)
class ObjectiveRollup(PerResult):
    """Spend and usable results of every run that serves one objective label (in one
    currency)."""

    label: str
    currency: str
    runs: tuple[int, ...]
    spent: Spend
    effective: int
    finished: int
    cached: int


def rollup_by_objective(summaries: Iterable[RunSummary]) -> list[ObjectiveRollup]:
    """Roll the runs up to the objective labels they serve; a run serving two labels counts
    fully towards each. Sorted by label, then currency (money in two currencies is never
    summed)."""
    groups: dict[tuple[str, str], list[RunSummary]] = {}
    for s in summaries:
        for label in dict.fromkeys(s.serves):
            groups.setdefault((label, s.currency), []).append(s)
    out = []
    for (label, currency), runs in sorted(groups.items()):
        spent = Spend()
        for s in runs:
            spent = spent + s.spent
        out.append(ObjectiveRollup(
            label=label, currency=currency, runs=tuple(s.campaign_id for s in runs),
            spent=spent, effective=sum(s.effective for s in runs),
            finished=sum(s.finished for s in runs), cached=sum(s.cached for s in runs),
        ))
    return out
