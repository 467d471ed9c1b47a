"""The record's rows as values: what :class:`dse.Store` reads return.

One frozen, slotted dataclass per kind of row (a campaign run, a trial, an attempt, an event,
an agent call, a score, an invalidation, an environment), with typed fields: states are the
enums of :mod:`dse.model._types`, JSON columns are decoded, booleans are ``bool``. Only the store
builds them (it holds the SQL); everything else reads attributes.

The JSON a record holds once per trial or attempt (params, metrics, usage, spend) is kept as
stored and decoded by a property on each access, so reading 100,000 trials for a report
that looks at a few of their params stays cheap; bind the value once when reading it often.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._spend import Spend

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse.model._states import AttemptState, CampaignStatus, FailureClass, TrialStatus

__all__ = [
    "AgentCall",
    "Attempt",
    "AttemptSpend",
    "CampaignRun",
    "Claim",
    "EnvironmentRecord",
    "Event",
    "Invalidation",
    "LineageRow",
    "Score",
    "Trial",
    "TrialRef",
]

_loads = json.JSONDecoder().decode




@dataclass(frozen=True, slots=True)
class CampaignRun:
    """One run of a campaign (a row of ``campaigns``)."""

    id: int
    """The run id (what ``dse status`` lists, and ``<run>:<n>`` names)."""
    name: str
    """The campaign's name."""
    source: str | None
    """The campaign file it was loaded from, ``None`` when built in Python."""
    spec: Mapping[str, Any]
    """The campaign as it was run (what a resumed run must match), decoded."""
    agent: str
    """The agent as ``<name>==<version>``."""
    backend: str
    """The backend as ``<name>==<version>``."""
    mode: str
    """``waves`` or ``rolling``."""
    max_parallelism: int
    """Trials run at once at most."""
    status: CampaignStatus
    """How the run stands."""
    end_reason: str | None
    """Why it ended (an :class:`~dse.model._types.EndReason`'s text, with a detail), ``None``
    while it runs."""
    created_at: float
    """When the run was recorded (its wall-clock budget counts from there)."""
    ended_at: float | None
    """When it ended, ``None`` while it runs."""


@dataclass(frozen=True, slots=True)
class Trial:
    """One evaluation of one config hash (a row of ``trials``)."""

    id: int
    """The row id: unique in the workspace (what cache hits, scores and links point at)."""
    campaign_id: int
    """The run it belongs to."""
    number: int
    """Its number in the run, from 1."""
    proposal: int
    """The agent's proposal it answers (0: the campaign's baseline run)."""
    wave: int
    """The batch it was dispatched in."""
    config_hash: str
    """The identity of its result."""
    params_json: str
    """The coerced params as stored (JSON, canonical key order); see :attr:`params`."""
    status: TrialStatus
    """Where it is in its life, or its outcome."""
    failure: FailureClass | None
    """Why it failed or was interrupted."""
    message: str | None
    """A one-line explanation of the failure (or of a missing score)."""
    metrics_json: str | None
    """The metrics of its result as stored (JSON); see :attr:`metrics`."""
    score: float | None
    """Its (latest) score."""
    cache_of: int | None
    """The trial row whose result a cache hit reuses."""
    trial_dir: str | None
    """Its output directory, as recorded (``None`` for a cache hit)."""
    data_version: str | None
    """The data version it was dispatched against."""
    data_version_read: str | None
    """The data version its result says it read."""
    dependencies: str | None
    """The digest of the environment it ran in (see :class:`EnvironmentRecord`)."""
    replaces: int | None
    """The invalidated trial row it re-runs."""
    invalidation: int | None
    """The invalidation that flags its result, ``None`` while valid."""
    created_at: float
    """When it was recorded."""
    ended_at: float | None
    """When it reached its outcome."""
    step: int | None = None
    """For a trial stopped early (or a cache hit of one): the step its metrics are from."""
    scores_json: str | None = None
    """In a Pareto campaign, its score of each objective as stored (JSON); see :attr:`scores`."""

    @property
    def scores(self) -> tuple[float, ...] | None:
        """In a Pareto campaign (``[campaign] objectives = "pareto"``), its (latest) score of
        each objective, in the campaign's order; ``None`` otherwise or without a score."""
        if not self.scores_json:
            return None
        return tuple(float(x) for x in _loads(self.scores_json))

    @property
    def params(self) -> dict[str, Any]:
        """The coerced params (canonical key order), decoded afresh on each access."""
        value: dict[str, Any] = _loads(self.params_json)
        return value

    @property
    def metrics(self) -> dict[str, Any] | None:
        """The metrics of its result, decoded afresh on each access; ``None`` without one."""
        return _loads(self.metrics_json) if self.metrics_json else None


@dataclass(frozen=True, slots=True)
class TrialRef:
    """Where a trial is: enough to name it (a cache hit's original, a link, a baseline)."""

    id: int
    """The trial row."""
    campaign_id: int
    """The run it belongs to."""
    campaign: str
    """The name of that run's campaign."""
    number: int
    """Its number in the run."""

    @property
    def trial_id(self) -> str:
        """``<campaign>-<run>-<number>``."""
        return f"{self.campaign}-{self.campaign_id}-{self.number}"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One submission of a trial to a backend (a row of ``attempts``)."""

    id: int
    """The row id."""
    trial_id: int
    """The trial row it belongs to."""
    attempt: int
    """Its number within the trial, from 1."""
    backend: str
    """The backend it was submitted to."""
    job_id: str | None
    """The backend's id of the job, once known."""
    state: AttemptState
    """Where it is, or how it ended (the backend's raw state)."""
    exit_code: int | None
    """The workload's exit status, when it exited."""
    signal: int | None
    """The signal that killed it, when one did."""
    node: str | None
    """Where it ran, when known."""
    reason: str | None
    """The backend's own words on why it ended this way."""
    peak_rss_kb: int | None
    """Largest resident set size, in KiB, when known."""
    resumed: bool
    """It resumed from a checkpoint of an earlier attempt."""
    work_lost_s: float | None
    """Seconds of work an interruption threw away (since the last checkpoint)."""
    usage_json: str | None
    """What the backend's accounting charged, as stored (JSON); see :attr:`usage`."""
    spend_json: str | None
    """What it cost, as stored (JSON); see :attr:`spend`."""
    expected_s: float | None
    """The run time the scheduler expected when it granted the attempt."""
    submitted_at: float
    """When it was recorded for submission."""
    started_at: float | None
    """When it started, when known."""
    ended_at: float | None
    """When it ended."""
    left_files_json: str | None = None
    """Where the files it made but its backend did not bring back are, as stored (JSON); see
    :attr:`left_files`."""

    @property
    def left_files(self) -> dict[str, Any] | None:
        """Where the files it made but its backend left where they were made are (``node``,
        ``dir``, ``files``: path → bytes), decoded on each access; ``None`` when every file
        is in the trial directory."""
        return _loads(self.left_files_json) if self.left_files_json else None

    @property
    def usage(self) -> dict[str, float] | None:
        """What the backend's accounting charged (``elapsed_s``, ``cpus``…), decoded on each
        access; ``None`` when it keeps no accounting."""
        return _loads(self.usage_json) if self.usage_json else None

    @property
    def spend(self) -> Spend | None:
        """What it cost, decoded on each access; ``None`` until it ended."""
        return Spend(**_loads(self.spend_json)) if self.spend_json else None


@dataclass(frozen=True, slots=True)
class AttemptSpend:
    """The recorded spend of one attempt."""

    trial_id: int
    """The trial row the attempt belongs to."""
    spend: Spend
    """What the attempt cost."""


@dataclass(frozen=True, slots=True)
class ProgressRow:
    """A point of a trial's learning curve (a row of ``progress``)."""

    attempt: int
    """The attempt that reported it."""
    step: int
    """The workload's measure of progress (an epoch, an iteration...)."""
    metrics: Mapping[str, float]
    """The metrics after that step, as reported."""
    at: float
    """When it was reported (or read, when the line named no time)."""


@dataclass(frozen=True, slots=True)
class DecisionRow:
    """A stopping rule's decision about a trial at a rung (a row of ``decisions``): values
    in the metric's own sign."""

    trial_row: int
    """The trial's row."""
    number: int
    """The trial's number in its run."""
    attempt: int
    """The attempt it was made in (for a promotion: the attempt it ended)."""
    rule: str
    rule_version: str
    verdict: str
    """``continue``, ``stop`` or ``promote``."""
    rung: int
    """The step of the rung compared at."""
    step: int
    """The step whose value was compared."""
    value: float | None
    """The trial's metric there (``None``: not a finite number, taken as the worst)."""
    cutoff: float | None
    """The value it had to match or beat (``None``: no peers yet)."""
    peers: int
    """How many other trials it was compared with."""
    compared: list[tuple[int, float | None]]
    """Those peers (at most 64, the best first) as ``(trial number, value)`` (``None``: a
    value that was not a finite number, the worst)."""
    reason: str
    bracket: int | None
    at: float


@dataclass(frozen=True, slots=True)
class LineageRow:
    """A trial that started from a copy of another's checkpoint (a row of ``lineage``:
    population-based training)."""

    trial_row: int
    number: int
    """The trial's number in its run."""
    parent_row: int
    parent: int
    """The number of the trial whose checkpoint it started from."""
    parent_step: int
    """The last step the parent had reported when its checkpoint was copied (the copy holds
    that step at least: the workload saves a step before it reports it)."""
    member_row: int | None
    member: int | None
    """The number of the trial whose place in the population it took (it was exploited)."""
    at: float


@dataclass(frozen=True, slots=True)
class Event:
    """Something a run noted in its record (a row of ``events``): a retry, a rejection…"""

    id: int
    """The row id (events are read in this order)."""
    campaign_id: int
    """The run."""
    trial_id: int | None
    """The trial row it is about, if one."""
    at: float
    """When."""
    kind: str
    """What happened (``retry``, ``rejected``, ``budget_exhausted``…)."""
    data: Mapping[str, Any] | None
    """Its details, decoded, or ``None``."""


@dataclass(frozen=True, slots=True)
class AgentCall:
    """One ``propose`` or ``observe`` call of a run's agent (a row of ``agent_log``), replayed
    to rebuild the agent."""

    id: int
    """The row id (calls are replayed in this order)."""
    campaign_id: int
    """The run."""
    kind: str
    """``propose`` or ``observe``."""
    n: int | None
    """How many proposals a ``propose`` call asked for."""
    proposals: Sequence[int]
    """The proposal numbers it returned (``propose``) or told the results of (``observe``)."""
    in_flight: Sequence[int] | None
    """The proposals still in flight when ``propose`` was called."""
    stops: Mapping[int, int] | None = None
    """For ``observe``: the proposals told as stopped early, each with the step it was
    stopped at (a trial promoted since is replayed as it was told)."""


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A configuration enqueued for a campaign and not taken by a run yet (a row of
    ``enqueued``)."""

    id: int
    """The row id (taken in this order)."""
    params: dict[str, Any]
    """The params, as enqueued."""
    source: str
    """Who enqueued it: ``campaign file``, ``dse enqueue`` or ``python``."""
    added_at: float
    """When (epoch seconds)."""


@dataclass(frozen=True, slots=True)
class AgentSnapshot:
    """A run's latest agent snapshot (its row of ``agent_snapshots``)."""

    log_id: int
    """The last ``agent_log`` row it covers (the calls after it are replayed)."""
    state: str
    """The agent's state, as JSON."""
    unobserved: frozenset[int] | None
    """The proposals numbered by then and not yet told back to the agent (``None``: a
    snapshot recorded before the record kept them)."""


@dataclass(frozen=True, slots=True)
class Score:
    """One conclusion about a trial (a row of ``scores``)."""

    id: int
    """The row id (a trial's latest score has the largest)."""
    trial_id: int
    """The trial row scored."""
    scorer: str
    """The scorer's name."""
    scorer_version: str
    """The scorer's version."""
    score: float
    """The score."""
    baseline_trial: int | None
    """The trial row it was compared against, if any."""
    created_at: float
    """When it was given."""
    invalidation: int | None
    """The invalidation that flags it, ``None`` while valid."""
    scores_json: str | None = None
    """In a Pareto campaign, the score of each objective (JSON); see :attr:`scores`."""

    @property
    def scores(self) -> tuple[float, ...] | None:
        """In a Pareto campaign, the score it gave each objective, in the campaign's order."""
        if not self.scores_json:
            return None
        return tuple(float(x) for x in _loads(self.scores_json))


@dataclass(frozen=True, slots=True)
class Invalidation:
    """One ``dse invalidate`` (a row of ``invalidations``)."""

    id: int
    """The invalidation id."""
    at: float
    """When."""
    kind: str
    """``trial``, ``data_version`` or ``scorer_version``."""
    target: str
    """What was named (a trial, a data version, a scorer version)."""
    reason: str
    """Why, in the user's words."""
    trials: int
    """Trials it flagged."""
    scores: int
    """Scores it flagged."""


@dataclass(frozen=True, slots=True)
class EnvironmentRecord:
    """An environment trials ran in, stored once by digest (a row of ``environments``)."""

    digest: str
    """Its digest (what :attr:`Trial.dependencies` names)."""
    python: str | None
    """The Python version, when reported."""
    distributions: Mapping[str, str]
    """Installed distributions and their versions, decoded."""


@dataclass(frozen=True, slots=True)
class Claim:
    """What the record says of a configuration a controller is about to run
    (:meth:`dse.Store.claim`)."""

    row: int
    """The trial row that runs it: the claimant's own (:attr:`mine`), the trial another live
    controller runs (wait on it), or the finished trial whose :attr:`result` is reusable."""
    mine: bool
    """The claim is the claimant's: it runs the configuration."""
    result: Trial | None = None
    """A finished, reusable trial of the configuration (nothing is claimed then)."""


@dataclass(frozen=True, slots=True)
class RunCounts:
    """A run's counts as the record holds them (:meth:`Store.run_counts`)."""

    steps: int
    """Trials made of the agent's proposals."""
    proposal: int
    """The largest proposal number a trial answers."""
    number: int
    """The largest trial number."""
    wave: int
    """The largest dispatch batch."""
    dispatched: int
    """Trials given a directory (not cache hits)."""
    statuses: dict[TrialStatus, int]
    """Trials (not cache hits) by status."""
    cached: int
    """Cache hits that ended."""
    best: tuple[int, dict[str, Any], float] | None
    """(number, params, score) of the best completed trial."""


@dataclass(frozen=True, slots=True)
class VersionTally:
    """The trials of a run about one data version (the version read, else the expected),
    counted by the record (:meth:`Store.version_tallies`)."""

    version: str | None
    trials: int
    completed: int
    """Completed and scored trials whose result and score are valid."""
    mismatched: int
    """Trials that read another version than the one they were dispatched against."""


@dataclass(frozen=True, slots=True)
class StopTally:
    """The trials of a run that ended stopped at one rung and step, and their spend."""

    rung: int
    step: int
    """The step the stopping decision compared (the trial's metrics are from it)."""
    trials: int
    spend: Spend
    """What every attempt of those trials spent."""


@dataclass(frozen=True, slots=True)
class TrialSelection:
    """Which trials ``dse invalidate`` flags by selector; every set field must hold."""

    failed: str | None = None
    """``""``: every failed trial; a failure class: those that failed so; ``None``: any."""
    run: int | None = None
    """Only the trials of this run."""
    campaign: str | None = None
    """Only the trials of the runs of this campaign."""

    def describe(self) -> str:
        """How the record names it: ``failed=out_of_memory run=3``."""
        parts = []
        if self.failed is not None:
            parts.append(f"failed={self.failed or 'any'}")
        if self.run is not None:
            parts.append(f"run={self.run}")
        if self.campaign is not None:
            parts.append(f"campaign={self.campaign}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class TrialQuery:
    """One page of a run's trials, sorted and filtered (the dashboard's trial table): every
    set filter must hold."""

    sort: str = "number"
    """``number``, ``status``, ``score``, ``created_at``, ``ended_at``, ``data_version``, or
    ``param:NAME`` / ``metric:NAME`` (a number of the params or metrics, by its name)."""
    descending: bool = False
    offset: int = 0
    limit: int = 50
    statuses: tuple[str, ...] = ()
    """Only trials in one of these states (:class:`~dse.model._states.TrialStatus` values)."""
    failures: tuple[str, ...] = ()
    """Only trials that failed in one of these classes."""
    data_version: str | None = None
    """Only trials that read this data version."""
    ranges: tuple[tuple[str, float | None, float | None], ...] = ()
    """Only trials whose param NAME lies in ``[low, high]`` (``None``: unbounded)."""


@dataclass(frozen=True, slots=True)
class TrialPage:
    """A page of trials (:class:`TrialQuery`) and how many trials the filters kept."""

    total: int
    trials: list[Trial]
