"""The changes of one polling pass, buffered as rows and committed together by a storage in
one transaction (:meth:`dse.record.sqlite.Store.commit`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from dse.model._states import AttemptState, CampaignStatus, FailureClass, TrialStatus


dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


"""Compact JSON for record columns (one encoder, built once: this is on the hot path)."""


def vector(scores: Sequence[float] | None) -> str | None:
    """A score vector as stored (a JSON list), or ``None``."""
    return None if scores is None else dumps([float(x) for x in scores])


WRITES = ("trials", "reruns", "relinks", "attempts", "attempt_updates", "attempt_ends",
          "attempt_usage", "attempt_left", "trial_data", "attempt_spend", "attempt_expected",
          "trial_ends", "environments", "trial_links", "scores", "events", "progress", "decisions",
          "agent_log", "campaign_updates", "run_times", "enqueue_takes", "lineage")
"""The kinds of change a commit writes, in its order (an attempt after its trial, a trial's
end after its attempts', an agent call's snapshot before the call)."""


@dataclass(frozen=True, slots=True)
class Touched:
    """The rows a batch writes that the record's summaries count (:meth:`Batch.touched`)."""

    trials_new: list[int]
    """The trials it makes."""
    trial_runs: set[int]
    """The runs of the trials it makes."""
    trials_changed: list[int]
    """The trials it changes (status, failure, score, data versions, directory, reuse)."""
    attempts_new: list[int]
    """The attempts it makes."""
    attempt_trials: list[int]
    """The trials of the attempts it makes."""
    attempts_changed: list[int]
    """The attempts it changes (start, end, spend)."""
    decided: list[tuple[int, int, tuple[str, int]]]
    """The stopping decisions it records: (run, trial, (verdict, rung))."""


class Batch:
    """The changes of one polling pass, committed together by :meth:`Store.commit`.

    Each method records one change, by keyword; the columns they fill are this module's
    business. Changes are kept as plain tuples in the order :meth:`Store.commit` writes
    them: a frozen dataclass per change cost about a fifth of the engine's time per trial
    (measured with ``benchmarks/engine_overhead.py``), for nothing a caller could see.
    """

    __slots__ = (  # noqa: RUF023 - in the order Store.commit writes them
        "_trials", "_trial_ends", "_attempts", "_attempt_updates", "_attempt_ends",
        "_attempt_usage", "_attempt_left", "_trial_data", "_attempt_spend",
        "_attempt_expected", "_scores", "_environments", "_trial_links", "_events",
        "_campaign_updates", "_agent_log", "_agent_snapshots", "_reruns", "_relinks",
        "_releases", "_progress", "_decisions", "_run_times", "_enqueue_takes", "_lineage",
    )

    def __init__(self) -> None:
        self._trials: list[tuple[Any, ...]] = []
        self._trial_ends: list[tuple[Any, ...]] = []
        self._attempts: list[tuple[Any, ...]] = []
        self._attempt_updates: list[tuple[Any, ...]] = []
        self._attempt_ends: list[tuple[Any, ...]] = []
        self._attempt_usage: list[tuple[Any, ...]] = []
        self._attempt_left: list[tuple[Any, ...]] = []
        self._trial_data: list[tuple[Any, ...]] = []
        self._attempt_spend: list[tuple[Any, ...]] = []
        self._attempt_expected: list[tuple[Any, ...]] = []
        self._scores: list[tuple[Any, ...]] = []
        self._environments: list[tuple[Any, ...]] = []
        self._trial_links: list[tuple[Any, ...]] = []
        self._events: list[tuple[Any, ...]] = []
        self._campaign_updates: list[tuple[Any, ...]] = []
        self._agent_log: list[tuple[Any, ...]] = []
        self._agent_snapshots: dict[int, tuple[int, str, str]] = {}
        self._reruns: list[tuple[Any, ...]] = []
        self._relinks: list[tuple[Any, ...]] = []
        self._releases: list[tuple[Any, ...]] = []
        self._progress: list[tuple[Any, ...]] = []
        self._decisions: list[tuple[Any, ...]] = []
        self._run_times: list[tuple[Any, ...]] = []
        self._enqueue_takes: list[tuple[Any, ...]] = []
        self._lineage: list[tuple[Any, ...]] = []

    def changes(self) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
        """Each kind of change (:data:`WRITES`) with its rows, in the order a commit writes
        them; a storage maps each kind to its statement."""
        for kind in WRITES:
            yield kind, getattr(self, f"_{kind}")

    def snapshots(self) -> dict[int, tuple[int, str, str]]:
        """The agent snapshots of the batch: run id -> (index of the last agent call of the
        batch it covers, state, unobserved trial numbers)."""
        return self._agent_snapshots

    def released(self) -> Iterator[tuple[int]]:
        """The trial rows whose claims a commit of the batch releases: those it ends (or
        records ended as they are made), and those released outright."""
        yield from self._releases
        for change in self._trial_ends:
            if change[5] is not None:
                yield (change[-1],)  # the row id ends the statement's parameters
        for change in self._trials:
            if change[15] is not None:
                yield (change[0],)
        for change in self._reruns:
            if change[4] is not None:
                yield (change[5],)

    def touched(self) -> Touched:
        """The rows the batch writes that the summaries count (a storage keeps them from
        these)."""
        # The row id ends each update's parameters.
        return Touched(
            trials_new=[c[0] for c in self._trials],
            trial_runs={c[1] for c in self._trials},
            trials_changed=[c[-1] for kind in (self._reruns, self._relinks, self._trial_data,
                                               self._trial_ends) for c in kind],
            attempts_new=[c[0] for c in self._attempts],
            attempt_trials=[c[1] for c in self._attempts],
            attempts_changed=[c[-1] for kind in (self._attempt_updates, self._attempt_ends,
                                                 self._attempt_spend) for c in kind],
            decided=[(c[0], c[1], (c[5], c[6])) for c in self._decisions],
        )

    def __bool__(self) -> bool:
        return any(getattr(self, name) for name in self.__slots__)

    def clear(self) -> None:
        """Forget every change (they were committed)."""
        for name in self.__slots__:
            getattr(self, name).clear()

    # -- trials ---------------------------------------------------------------------------

    def add_trial(
        self, *, row: int, campaign: int, number: int, proposal: int, wave: int,
        config_hash: str, params_json: str, status: TrialStatus, created_at: float,
        failure: FailureClass | None = None, message: str | None = None,
        metrics: Mapping[str, float] | None = None, score: float | None = None,
        cache_of: int | None = None, trial_dir: str | None = None,
        ended_at: float | None = None, data_version: str | None = None,
        step: int | None = None, scores: Sequence[float] | None = None,
    ) -> None:
        """A new trial (or cache hit: *cache_of* is the trial it reuses; *step*: the step of
        the stopped trial it reuses), with the data version it is dispatched against (as
        :meth:`set_trial_data` would record it)."""
        self._trials.append((
            row, campaign, number, proposal, wave, config_hash, params_json, status.value,
            failure.value if failure is not None else None, message,
            dumps(metrics) if metrics is not None else None, score, cache_of, trial_dir,
            created_at, ended_at, data_version, step, vector(scores),
        ))

    def run_cache_hit(
        self, *, row: int, status: TrialStatus, trial_dir: str, ended_at: float | None = None,
        failure: FailureClass | None = None, message: str | None = None,
    ) -> None:
        """A cache hit that waited on another controller's trial runs the config itself
        (that trial ended without a result to reuse): it becomes a trial of its own."""
        self._reruns.append((status.value, failure.value if failure is not None else None,
                             message, trial_dir, ended_at, row))

    def relink_trial(self, *, row: int, cache_of: int) -> None:
        """A cache hit waits on, or reuses, trial *cache_of* instead of the one it named."""
        self._relinks.append((cache_of, row))

    def release_claim(self, *, row: int) -> None:
        """Trial *row* will not run after all: its claim on its config goes (a trial's claim
        also goes, by itself, in the transaction that records its end)."""
        self._releases.append((row,))

    def end_trial(
        self, *, row: int, status: TrialStatus, ended_at: float | None,
        failure: FailureClass | None = None, message: str | None = None,
        metrics: Mapping[str, float] | None = None, score: float | None = None,
        step: int | None = None, scores: Sequence[float] | None = None,
    ) -> None:
        """A trial's outcome (``running`` with no end again: a cancelled trial resumed, a
        stopped one promoted); *step*: the step a stopped trial's *metrics* are from."""
        self._trial_ends.append((
            status.value, failure.value if failure is not None else None, message,
            dumps(metrics) if metrics is not None else None, score, ended_at, step,
            vector(scores), row,
        ))

    def set_trial_data(
        self, *, row: int, expected: str | None = None, read: str | None = None
    ) -> None:
        """The data version a trial was dispatched against (*expected*) or says it *read*."""
        self._trial_data.append((expected, read, row))

    def link_trial(
        self, *, row: int, dependencies: str | None = None, replaces: int | None = None
    ) -> None:
        """What a trial ran with (its dependency digest) or the invalidated trial it re-runs."""
        self._trial_links.append((dependencies, replaces, row))

    def add_lineage(self, *, row: int, campaign: int, parent: int, step: int,
                    member: int | None, at: float) -> None:
        """Trial *row* started from a copy of trial *parent*'s checkpoint, the parent having
        reported *step*, in the place of trial *member* (population-based training)."""
        self._lineage.append((row, campaign, parent, step, member, at))

    def add_score(
        self, *, trial: int, scorer: str, version: str, score: float, baseline: int | None,
        at: float, scores: Sequence[float] | None = None,
    ) -> None:
        """One conclusion: *scorer* gave *trial* *score* (and, in a Pareto campaign, *scores*:
        one per objective), compared against *baseline*."""
        self._scores.append((trial, scorer, version, score, baseline, at, vector(scores)))

    def add_environment(
        self, *, digest: str, python: str | None, distributions: Mapping[str, Any]
    ) -> None:
        """An environment trials ran in (stored once per digest)."""
        self._environments.append((digest, python, dumps(dict(distributions))))

    # -- attempts -------------------------------------------------------------------------

    def add_attempt(
        self, *, row: int, trial: int, attempt: int, backend: str, state: AttemptState,
        submitted_at: float, resumed: bool = False,
    ) -> None:
        """A new attempt of *trial*, recorded before it is submitted (intent first)."""
        self._attempts.append(
            (row, trial, attempt, backend, None, state.value, submitted_at, int(resumed))
        )

    def update_attempt(
        self, *, row: int, state: AttemptState, job_id: str | None = None,
        started_at: float | None = None,
    ) -> None:
        """An attempt moved on (granted, submitted, started); *job_id* ``None`` clears it."""
        self._attempt_updates.append((job_id, state.value, started_at, row))

    def end_attempt(
        self, *, row: int, state: AttemptState, ended_at: float, job_id: str | None = None,
        exit_code: int | None = None, signal: int | None = None, node: str | None = None,
        reason: str | None = None, peak_rss_kb: int | None = None,
        started_at: float | None = None, work_lost_s: float | None = None,
        spend: Mapping[str, float] | None = None,
    ) -> None:
        """How an attempt ended (and what it cost, as :meth:`set_attempt_spend` records it)."""
        self._attempt_ends.append((
            job_id, state.value, exit_code, signal, node, reason, peak_rss_kb, started_at,
            ended_at, work_lost_s, None if spend is None else dumps(spend), row,
        ))

    def set_attempt_usage(self, *, row: int, usage: Mapping[str, float]) -> None:
        """What the backend's accounting charged an attempt."""
        self._attempt_usage.append((dumps(dict(usage)), row))

    def set_attempt_left_files(self, *, row: int, left: Mapping[str, Any]) -> None:
        """Where the files an attempt made but its backend did not bring back are
        (:attr:`dse.JobStatus.left_files`)."""
        self._attempt_left.append((dumps(dict(left)), row))

    def set_attempt_spend(self, *, row: int, spend: Mapping[str, float]) -> None:
        """What an attempt cost (wall, compute seconds, money)."""
        self._attempt_spend.append((dumps(spend), row))

    def set_attempt_expected(self, *, row: int, seconds: float) -> None:
        """The run time the scheduler expected when it started an attempt."""
        self._attempt_expected.append((seconds, row))

    # -- campaigns, events, the agent -----------------------------------------------------

    def add_progress(
        self, *, row: int, attempt: int, step: int, metrics: str, at: float
    ) -> None:
        """A point of trial *row*'s learning curve (*metrics*: its JSON object)."""
        self._progress.append((row, attempt, step, metrics, at))

    def add_decision(
        self, *, campaign: int, row: int, attempt: int, rule: str, version: str,
        verdict: str, rung: int, step: int, value: float | None, cutoff: float | None,
        peers: int,
        compared: str, reason: str, bracket: int | None, at: float,
    ) -> None:
        """A stopping rule's decision about trial *row* (*compared*: its peers, as JSON)."""
        self._decisions.append((campaign, row, attempt, rule, version, verdict, rung, step,
                                value, cutoff, peers, compared, reason, bracket, at))

    def add_event(
        self, *, campaign: int, trial: int | None, at: float, kind: str,
        data: Mapping[str, Any],
    ) -> None:
        """Something that happened in a run (a retry, an alert, a pass's commands)."""
        self._events.append((campaign, trial, at, kind, dumps(data)))

    def end_campaign(
        self, *, campaign: int, status: CampaignStatus, reason: str, ended_at: float
    ) -> None:
        """A run ended with *status*, for *reason* (:meth:`EndReason.text`)."""
        self._campaign_updates.append((status.value, reason, ended_at, campaign))

    def set_run_time(self, *, campaign: int, seconds: float) -> None:
        """Run *campaign* has been driven *seconds* in all (its controllers' time, measured on
        each one's monotonic clock): what its wall-clock ceiling counts after a resume."""
        self._run_times.append((seconds, campaign))

    def add_agent_call(
        self, *, campaign: int, kind: str, proposals: Sequence[int], n: int | None = None,
        in_flight: Sequence[int] | None = None, slot: int | None = None,
        stops: Mapping[int, int] | None = None,
    ) -> int:
        """One ``propose`` (asked for *n*, with the proposals *in_flight*) or ``observe``
        call of the agent, replayed to rebuild it after a crash; returns its slot. A call
        given the *slot* of :meth:`reserve_agent_call` fills it in, keeping its place in order."""
        entry = (campaign, kind, n, dumps(list(proposals)),
                 None if in_flight is None else dumps(list(in_flight)),
                 dumps(dict(stops)) if stops else None)
        if slot is not None:
            self._agent_log[slot] = entry
            return slot
        self._agent_log.append(entry)
        return len(self._agent_log) - 1

    def take_enqueued(self, *, row: int, run: int, proposal: int) -> None:
        """Run *run* took the enqueued configuration *row* as its proposal *proposal*."""
        self._enqueue_takes.append((run, proposal, row))

    def set_agent_snapshot(self, *, campaign: int, state: str, unobserved: Iterable[int]) -> None:
        """The agent's state (JSON) after every agent call logged so far, the run's latest,
        with the proposals numbered by then and not yet told back (*unobserved*)."""
        self._agent_snapshots[campaign] = (len(self._agent_log), state,
                                           dumps(sorted(unobserved)))

    def reserve_agent_call(self) -> int:
        """Hold the place of an agent call that :meth:`add_agent_call` fills in later (a
        ``propose`` whose numbers are known once its proposals were taken, after the calls
        made while taking them)."""
        self._agent_log.append(())
        return len(self._agent_log) - 1
