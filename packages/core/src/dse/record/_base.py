"""The storage interface: what the engine and the readers use of a record, whatever keeps it.

:class:`Storage` is the record as a whole (writes, ids, claims, and three kinds of reads:
:class:`RecordReads`, :class:`RecordSummaries`, :class:`RecordStops`). The SQLite workspace
(:mod:`dse.record.sqlite`) implements it; ``dse.testing.StorageContract`` is the suite any
implementation passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:

    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from pathlib import Path

    from dse.model._spend import Earlier, Spend
    from dse.model._states import AttemptState, TrialStatus
    from dse.record._batch import Batch
    from dse.record._records import (
        AgentCall,
        AgentSnapshot,
        Attempt,
        AttemptSpend,
        CampaignRun,
        Claim,
        DecisionRow,
        Enqueued,
        EnvironmentRecord,
        Event,
        Invalidation,
        LineageRow,
        ProgressRow,
        RunCounts,
        Score,
        StopTally,
        Trial,
        TrialPage,
        TrialQuery,
        TrialRef,
        TrialSelection,
        VersionTally,
    )

    Orphan: TypeAlias = Callable[[str | None, Path, int], bool]
    """Whether an attempt (job id, trial directory, attempt number) a gone controller
    started still runs: :meth:`dse.Backend.still_running`."""


class RecordReads(Protocol):
    """The record's rows, as :mod:`dse.record._records` values: runs, trials, attempts, spend,
    events, progress, the agent's log, scores, environments, invalidations."""

    def campaigns(self) -> list[CampaignRun]:
        """Every run of the workspace, oldest first."""
        ...

    def campaign(self, campaign_id: int) -> CampaignRun | None:
        """Run *campaign_id*, or ``None`` when the record has none."""
        ...

    def find_campaign(self, name_or_id: str) -> CampaignRun | None:
        """The latest run of the campaign *name_or_id* (a name, or a numeric run id)."""
        ...

    def trials(self, campaign_id: int) -> list[Trial]:
        """The trials of run *campaign_id*, by number."""
        ...

    def find_trial(self, text: str) -> tuple[CampaignRun, Trial]:
        """The run and the trial *text* names: a trial id ``<campaign>-<run>-<number>``, or
        ``<campaign>:<number>`` (the latest run of the campaign) or ``<run>:<number>``.

        :raises ConfigError: when *text* has none of these forms or names nothing recorded.
        """
        ...

    def resume_rows(self, campaign_id: int, proposals: Iterable[int]) -> list[Trial]:
        """The trials of run *campaign_id* a resume rebuilds when its agent's snapshot stands
        for the rest: the unfinished (running, cancelled), the baseline runs, the cache hits
        still waiting, and those of *proposals*; by number (both found by index)."""
        ...

    def stale_trials(self, campaign_id: int, version: str) -> int:
        """Trials of run *campaign_id* whose result is about other data than *version* (the
        version they read, else the one they were dispatched against)."""
        ...

    def run_counts(self, campaign_id: int, *, lower_is_better: bool) -> RunCounts:
        """What a resumed run's counts are rebuilt from when every result is ranked (none
        invalidated, all about the current data): see :class:`RunCounts`. Every figure is
        a summary or an index lookup: the same cost at a million trials as at ten."""
        ...

    def trial_counts(self, campaign_id: int) -> dict[TrialStatus, int]:
        """How many trials of run *campaign_id* stand at each status (those with any)."""
        ...

    def trial_statuses(self, rows: Iterable[int]) -> dict[int, TrialStatus]:
        """The status of each trial row of *rows* the record has (of any run)."""
        ...

    def trial_refs(self, rows: Iterable[int]) -> dict[int, TrialRef]:
        """Where each trial row of *rows* the record has is (of any run)."""
        ...

    def trial_dependencies(self, rows: Iterable[int]) -> dict[int, str]:
        """The dependency digest each trial row of *rows* reported (rows without one are left
        out)."""
        ...

    def earlier_measurement(self, name: str, params_json: str, before: int) -> Trial | None:
        """The latest trial before row *before*, of a run of campaign *name*, that measured
        the params *params_json* (canonical JSON) itself — not a cache hit — and ended with a
        result about the design, whatever its identity (what ``dse show`` compares a trial
        that was not a cache hit with)."""
        ...

    def replacements(self, rows: Iterable[int]) -> dict[int, list[TrialRef]]:
        """The trials (of any run) that re-run each invalidated trial row of *rows*, oldest
        first; rows nothing replaces are left out."""
        ...

    def dispatched(self, campaign_id: int) -> int:
        """Trials of run *campaign_id* that ran on the backend (not cache hits): what a
        trials ceiling counts."""
        ...

    def attempts(self, campaign_id: int, *, trials: Iterable[int] | None = None
                 ) -> list[Attempt]:
        """The attempts of run *campaign_id* (only those of the trial rows *trials*, when
        given), by trial number then attempt."""
        ...

    def attempt_times(self, campaign_id: int) -> list[tuple[float, float, AttemptState, int]]:
        """(ended at, started at, state, trial row) of each attempt of run *campaign_id* that
        started and ended: what a resumed pool learns durations and usage from."""
        ...

    def attempt_durations(self, campaign_id: int, *, last: int) -> tuple[float, list[float]]:
        """Of the attempts of run *campaign_id* that started and ended: their seconds summed
        (a summary), and the seconds of the *last* that succeeded or failed, in the order
        they ended (walked back along an index of ends)."""
        ...

    def trial_params(self, campaign_id: int) -> dict[int, dict[str, Any]]:
        """The params of each trial of run *campaign_id*, by trial row."""
        ...

    def spends(self, campaign_id: int) -> list[AttemptSpend]:
        """The recorded spend of every attempt of run *campaign_id* that has one."""
        ...

    def spend_total(self, campaign_id: int) -> Spend:
        """The summed spend of every attempt of run *campaign_id* (kept by SQLite as each
        attempt's spend is recorded: a run of a million attempts reads one row)."""
        ...

    def trial_spends(self, rows: Iterable[int]) -> list[AttemptSpend]:
        """The recorded spend of every attempt of the trial rows *rows* (of any run) that
        has one, by trial row then attempt."""
        ...

    def events(self, campaign_id: int, kind: str | None = None) -> list[Event]:
        """The events of run *campaign_id* (only those of *kind*, when given), in order."""
        ...

    def progress(self, trial_row: int) -> list[ProgressRow]:
        """The learning curve of trial *trial_row*: its points by attempt and step."""
        ...

    def progress_tails(self, trial_rows: Iterable[int]) -> dict[int, tuple[int, ProgressRow]]:
        """For each of *trial_rows* with a learning curve: how many points it has, and its
        last (the highest step of the latest attempt)."""
        ...

    def rejections(self, campaign_id: int, *, down_to: float
                   ) -> tuple[int, dict[int, tuple[dict[str, Any], str]]]:
        """How many proposals of run *campaign_id* were rejected, and the params and reason of
        the newest rejections: those of proposals numbered *down_to* and up, and the last
        rejections in a row (walked back from the newest along the events' index: a resume
        reads what follows its agent's snapshot, never every rejection of the run)."""
        ...

    def agent_log(self, campaign_id: int, *, after: int = 0) -> list[AgentCall]:
        """The agent's calls of run *campaign_id* (those logged after row *after*), in the
        order they were made."""
        ...

    def agent_snapshot(self, campaign_id: int) -> AgentSnapshot | None:
        """Run *campaign_id*'s latest agent snapshot; ``None`` when it has none."""
        ...

    def enqueued(self, campaign: str) -> list[Enqueued]:
        """The configurations enqueued for campaign *campaign* that no run has taken yet,
        oldest first."""
        ...

    def scores(self, campaign_id: int) -> list[Score]:
        """Every score given to a trial of run *campaign_id*, oldest first."""
        ...

    def environments(self, digests: Iterable[str]) -> dict[str, EnvironmentRecord]:
        """The recorded environment of each digest of *digests* the record has."""
        ...

    def invalidations(self) -> list[Invalidation]:
        """Every ``dse invalidate`` of the workspace, oldest first."""
        ...

    def invalid_trials(self) -> list[Trial]:
        """Trials of the workspace whose result, or whose score, is flagged invalid;
        :attr:`Trial.invalidation` is ``None`` when only a score is."""
        ...

    def invalid_reasons(self, campaign_id: int) -> dict[int, str]:
        """Trial row → why it is flagged invalid (its result's invalidation, else its
        score's), for the flagged trials of run *campaign_id*."""
        ...

    def invalid_scores(self, campaign_id: int) -> set[int]:
        """The trial rows of run *campaign_id* with a score flagged invalid."""
        ...


class RecordSummaries(Protocol):
    """Reads whose cost does not grow with what they print (``dse status``, ``report``,
    ``show``, ``export`` of a million-trial record)."""

    def run_time(self, campaign_id: int) -> float:
        """The time controllers drove run *campaign_id* (seconds, as last recorded; 0 for a
        run not recorded yet): what its wall-clock ceiling has counted."""
        ...

    def earlier_runs(self, name: str, before: int) -> Earlier:
        """What the runs of the campaign *name* before run *before* spent: their ids, the
        trials they dispatched, their attempts' spend and their run time (summaries: a few
        rows whatever their size)."""
        ...

    def failure_counts(self, campaign_id: int) -> dict[str, int]:
        """Failure class → trials of run *campaign_id* (not cache hits) that carry it."""
        ...

    def first_failures(self, campaign_id: int) -> dict[str, tuple[int, str | None]]:
        """Failure class → (number, message) of the first failed trial of run *campaign_id*
        that carries it (its lowest number, by the tallies, then one indexed lookup each)."""
        ...

    def outcome_counts(self, campaign_id: int) -> dict[str, int]:
        """Trial status → trials of run *campaign_id*, in the order each status first
        appeared."""
        ...

    def unstarted(self, campaign_id: int) -> dict[TrialStatus, int]:
        """Of run *campaign_id*'s ``running`` trials, how many have no attempt running now
        (submitted and not started yet, or waiting to be retried): queued; of its
        ``cancelled`` ones, how many never started. Read by the partial index of the open
        trials: its cost grows with what is unfinished, never with the run."""
        ...

    def cache_links(self, campaign_id: int) -> list[tuple[int, int]]:
        """(number, trial row it reuses) of each cache hit of run *campaign_id*, by number."""
        ...

    def mismatched_numbers(self, campaign_id: int) -> list[int]:
        """The trials (numbers) of run *campaign_id* that read another data version than
        they were dispatched against."""
        ...

    def version_tallies(self, campaign_id: int) -> list[VersionTally]:
        """The trials of run *campaign_id* grouped by the data version they are about, in
        the order each version first appeared."""
        ...

    def best_of_version(self, campaign_id: int, version: str | None, *,
                        maximize: bool) -> Trial | None:
        """The best valid scored trial (completed, or a cache hit of one) of run
        *campaign_id* about data *version*; the lowest number among equals (through the
        index of scores: the first rows it walks are the answer)."""
        ...

    def pareto_trials(self, campaign_id: int) -> list[Trial]:
        """The valid trials of run *campaign_id* scored on each objective of a Pareto campaign
        (completed, or a cache hit of one), in the order they ended: its fronts' material."""
        ...

    def trial_pages(self, campaign_id: int, size: int = 1000) -> Iterator[list[Trial]]:
        """The trials of run *campaign_id* by number, *size* at a time (each page one
        indexed query: memory holds one page, never the run)."""
        ...

    def trial_scores(self, rows: Iterable[int]) -> list[Score]:
        """Every score given to the trial rows *rows*, oldest first."""
        ...


class RecordStops(Protocol):
    """What a campaign's stopping rule decided, and the learning curves it read."""

    def decisions(self, trial_row: int) -> list[DecisionRow]:
        """The decisions about trial *trial_row*, in the order they were made."""
        ...

    def run_decisions(self, campaign_id: int, verdicts: Sequence[str] = ("stop", "promote")
                      ) -> list[DecisionRow]:
        """The decisions of run *campaign_id* with one of *verdicts*, in the order made."""
        ...

    def decision_counts(self, campaign_id: int) -> dict[tuple[str, int], int]:
        """How many trials of run *campaign_id* were stopped, exploited or promoted at each rung:
        ``(verdict, rung) -> count`` (read from ``stop_totals``, which SQLite keeps as
        decisions are written: a few rows at a million trials as at ten)."""
        ...

    def run_progress(self, campaign_id: int) -> Iterator[tuple[int, int, int, str]]:
        """Every point of run *campaign_id*'s learning curves as ``(trial number, proposal,
        step, metrics JSON)``, in the order they were reported."""
        ...

    def trial_by_row(self, row: int) -> Trial | None:
        """Trial row *row*, or ``None``."""
        ...

    def lineage(self, campaign_id: int) -> list[LineageRow]:
        """The trials of run *campaign_id* that started from a copy of another trial's
        checkpoint (population-based training), by number."""
        ...

    def stopped_trials(self, campaign_id: int) -> list[Trial]:
        """The trials of run *campaign_id* that ended stopped by its rule (not cache hits)."""
        ...

    def trial_decisions(self, trial_rows: Iterable[int]) -> list[DecisionRow]:
        """The decisions about each of *trial_rows*, in the order they were made."""
        ...

    def first_steps(self, trial_rows: Iterable[int]) -> dict[tuple[int, int], int]:
        """``(trial row, attempt) -> the first step that attempt reported``, for each attempt
        of *trial_rows* with a learning curve (where a promoted trial resumed)."""
        ...

    def trial_progress(self, trial_rows: Iterable[int]) -> dict[int, list[ProgressRow]]:
        """The learning curves of *trial_rows* (each by attempt and step)."""
        ...

    def stop_tallies(self, campaign_id: int) -> list[StopTally]:
        """The trials of run *campaign_id* that ended stopped, by the rung and step of the
        decision that last stopped each, with what their attempts spent (read from
        ``stop_totals``)."""
        ...

    def completed_spend(self, campaign_id: int) -> tuple[int, Spend]:
        """How many trials of run *campaign_id* ran to their end (completed) and what their
        attempts spent: from ``stop_totals`` once the run has a decision, else summed from
        its rows."""
        ...

    def stopping_rule(self, campaign_id: int) -> tuple[str, str] | None:
        """The rule and version of run *campaign_id*'s latest decision of one verdict (stop,
        else promote, else continue: each one probe of the index ``decisions_run``), or
        ``None``."""
        ...


class RecordPages(Protocol):
    """Reads for a live view of the record (``dse dashboard``): a page of a run's trials, and
    a stamp that changes whenever a trial, an attempt or a run does."""

    def trial_page(self, campaign_id: int, query: TrialQuery) -> TrialPage:
        """The page *query* asks of run *campaign_id*'s trials; a sort or filter on a name no
        trial could have (not a plain identifier) is a :class:`~dse.ConfigError`."""
        ...

    def stamp(self) -> tuple[Any, ...]:
        """A value that changes whenever the record's trials, attempts or runs change (cheap:
        a few index lookups, whatever the record's size)."""
        ...

    def sample(self, campaign_id: int, limit: int, *, best: int = 100,
               maximize: bool = False) -> list[Trial]:
        """About *limit* trials of run *campaign_id*, in number order: its *best* by score
        (highest with *maximize*) and every k-th by number, k spreading the rest over the
        run (the figures of a run too large to read whole)."""
        ...


class Storage(Protocol):
    """A record of campaigns: what the engine writes and every reader reads. The SQLite
    workspace (:class:`dse.record.sqlite.Store`) is the one dse ships;
    :class:`dse.testing.StorageContract` checks any other.

    Writes: a pass's changes are buffered in a :class:`~dse.record._batch.Batch` and
    committed in one transaction (:meth:`commit`); row ids come from blocks the record
    reserves (:meth:`new_trial_id`), so several controllers share one record; a config about
    to run is claimed (:meth:`claim`) so two controllers never run it at once.
    """

    path: Path
    """Where the record is: its file, for SQLite; the workspace, for a database server."""
    where: str
    """The record as messages name it: its file, or its URL without a password."""
    workspace: Path
    """Where this controller's trial directories and campaign lock files are."""
    read_only: bool
    """Opened to read only: every write is refused."""

    @property
    def reads(self) -> RecordReads:
        """The record's rows."""
        ...

    @property
    def summaries(self) -> RecordSummaries:
        """Aggregates whose cost does not grow with the record."""
        ...

    @property
    def stops(self) -> RecordStops:
        """The stopping rule's decisions."""
        ...

    @property
    def pages(self) -> RecordPages:
        """Pages of trials and the record's change stamp, for a live view."""
        ...

    def connect(self) -> None:
        """Open the record, creating the file and its schema if need be (read only: as it
        is); a damaged one is a :class:`DamagedRecordError`, before anything is written."""
        ...

    def close(self) -> None:
        """Give up the leases this store holds and close the database connection; the store
        is not to be used after."""
        ...

    def new_trial_id(self) -> int:
        """A trial row id no other Store of this record hands out."""
        ...

    def new_attempt_id(self) -> int:
        """An attempt row id no other Store of this record hands out."""
        ...

    def create_campaign(
        self,
        *,
        name: str,
        source: str | None,
        spec: dict[str, Any],
        agent: str,
        backend: str,
        mode: str,
        max_parallelism: int,
        now: float,
    ) -> int:
        """Record a new run (status ``running``, created at *now*) in its own transaction;
        return its id. *agent* and *backend* are ``"name==version"``; *spec* is the campaign
        as the record keeps it."""
        ...

    def commit(self, batch: Batch) -> None:
        """Write every change of *batch* in one transaction, then clear it."""
        ...

    def last_invalidation(self) -> int:
        """The id of the latest invalidation (0: none); cheap enough to ask every pass."""
        ...

    def enqueue(self, campaign: str, configs: Sequence[Mapping[str, Any]], source: str,
                now: float) -> list[int]:
        """Enqueue *configs* (coerced params) for campaign *campaign*, in one transaction;
        their row ids. The campaign's next pass takes them (a run takes each once)."""
        ...

    def invalidate(
        self, kind: str, target: str, reason: str, now: float, *, trial_row: int | None = None,
        select: TrialSelection | None = None, dry_run: bool = False,
    ) -> tuple[int, int, int] | None:
        """Flag results invalid, and every comparison that used them; delete nothing.

        *kind* ``trial`` (*target*: the trial as the user named it, *trial_row*: its row)
        flags that trial and the cache hits that reuse it; ``data_version`` flags every trial
        that ran against, or read, version *target*; ``scorer_version`` flags the scores given
        by that scorer version (*target*: ``<version>`` or ``<scorer>==<version>``);
        ``trials`` flags the trials *select* picks (*target* says which, for the record) and
        the cache hits that reuse them. The scores of flagged trials, and the scores compared
        against a flagged trial as their baseline, are flagged too. Something already flagged
        keeps its first reason. With *dry_run* the counts are the same and nothing is kept.

        Returns (invalidation id, trials newly flagged, scores newly flagged), or ``None``
        when nothing in the record matches *target* (nothing is written then).
        """
        ...

    def run_controllers(self, name: str) -> list[tuple[int, dict[str, Any]]]:
        """The runs of campaign *name* left ``running``, each with the controller the record
        says drives it (the latest ``controller`` event: host, pid, its start): a run's
        ownership that a deleted lock file does not erase."""
        ...

    def reopen_campaign(self, campaign_id: int) -> None:
        """Mark a run as running again (it is being resumed)."""
        ...

    def claim(self, wanted: Mapping[str, int], campaign: str, now: float, *,
              reuse: bool = True, run: int | None = None,
              orphan: Orphan | None = None) -> dict[str, Claim]:
        """Claim each config hash of *wanted* for the trial row it maps to, on behalf of
        *campaign*, in one short transaction; what the record says of each.

        A config with a reusable finished result (:data:`REUSABLE_ROW`; when not *reuse*, only
        a result of run *run*, the claimant's own) is not claimed: its :class:`Claim` names
        that result. A config claimed by the trial of a
        live controller of another campaign (its lock is held, see
        :func:`dse.record._lock.lock_held`)
        names that trial, to wait on. Otherwise the claim is this one's — taken over from a
        controller that is gone, from a trial whose result has been invalidated, or from a trial
        of *campaign* itself (whose own table knows better: that trial has ended) — until the
        transaction that records the trial's end (or :meth:`Batch.release_claim`). A claim of
        a controller that is gone is still waited on while *orphan* says its trial's last
        attempt runs on (``orphan(job_id, trial_dir, attempt)``:
        :meth:`dse.Backend.still_running`).
        """
        ...

    def alive(self, campaign: str) -> bool:
        """Whether a live controller drives *campaign*: it holds the campaign's lease,
        renewed (or, in a SQLite workspace, its lock file on this host)."""
        ...

    def lease_state(self, campaign: str) -> bool | None:
        """Whether *campaign*'s lease is fresh (``True``: renewed within its TTL by a
        controller not known to be gone), expired (``False``), or missing (``None``)."""
        ...

    def take_lease(self, campaign: str, holder: Mapping[str, Any], ttl_s: float) -> None:
        """Take *campaign*'s lease for this store's controller (*holder*: its host, pid and
        start, as messages name it): the record's word that it drives the campaign, on any
        host. A lease renewed within its TTL by another controller is a
        :class:`~dse.model._errors.LockedError` naming it; an expired one is taken over.
        From then each :meth:`commit` renews it when a quarter of *ttl_s* has passed, in
        the same transaction, and fails whole (:class:`~dse.model._errors.LeaseLostError`)
        once another controller took it: a controller stalled past its lease writes nothing
        more. Claims of a campaign whose lease expired are taken over like those of a
        controller that is gone."""
        ...

    def release_lease(self, campaign: str) -> None:
        """Give up *campaign*'s lease (the run ended); one this store does not hold is left
        as it is."""
        ...

    def reset_claims(self, campaign: str, live: Mapping[str, int], now: float) -> None:
        """Drop every claim of *campaign* (its controller, this one, holds its lock: they are
        left by a run that is gone) and claim again, where nobody else has, the configs of
        its *live* trials (config hash → trial row)."""
        ...
