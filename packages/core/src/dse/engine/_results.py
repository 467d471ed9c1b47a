"""How trials end: a finished attempt's result read and scored, the outcome recorded, cache
hits waiting on it ended with it, the count kept and the agent's feedback queued."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.campaign._deps import environment_digest
from dse.engine._invalidation import Flag
from dse.engine._retry import controller_lost
from dse.model._outcome import BestTrial, FailureStreak, TrialEnd
from dse.model._spend import spend_metrics
from dse.model._types import (
    Direction,
    EndReason,
    Evaluation,
    FailureClass,
    JobState,
    TrialStatus,
    reusable,
)
from dse.plugins._scoring import ScoringError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dse.engine._baseline import Baselines
    from dse.engine._feedback import Feedback
    from dse.engine._invalidation import InvalidationView
    from dse.engine._journal import Journal
    from dse.engine._live import CurrentData, LiveTrial, TrialTable
    from dse.engine._retry import RetryPolicy
    from dse.model._outcome import RunEnd, Stats
    from dse.model._types import JobStatus, Objective
    from dse.plugins._protocols import Environment
    from dse.record._base import Storage


class Results:
    """Concludes and records trial ends (the environments seen are its own state); every
    other part it writes through is passed in.

    :param ranking: the primary objective as the scorer ranks it.
    :param end: stopped (``max_consecutive_failures``) when *max_failures* trials in a row
        fail the same way before any has a result (:class:`FailureStreak`); 0: never.
    """

    def __init__(
        self, *, journal: Journal, table: TrialTable, feedback: Feedback, stats: Stats,
        baselines: Baselines, invalid: InvalidationView, data: CurrentData,
        environment: Environment, policy: RetryPolicy, ranking: Objective,
        with_spend: bool = False, end: RunEnd | None = None, max_failures: int = 0,
    ) -> None:
        self._journal = journal
        self._table = table
        self._feedback = feedback
        self._stats = stats
        self._baselines = baselines
        self._invalid = invalid
        self._data = data
        self._environment = environment
        self._policy = policy
        self.ranking = ranking
        self._with_spend = with_spend
        """An objective is the trial's spend: its metrics get :data:`SPEND_METRICS`."""
        self._environments: set[str] = set()
        self.cancel_requested: set[str] = set()
        """Job ids this campaign asked the backend to cancel."""
        self.cancelled_before: set[str] = set()
        """Job ids an earlier controller of this run asked to cancel, then left without
        waiting for their ends (Ctrl+C twice): ended cancelled, they are run again."""
        self._end = end
        self._streak = FailureStreak(max_failures if end is not None else 0)

    def rankable(self, trial: LiveTrial) -> bool:
        """Whether *trial* may count for "best so far": a valid result about current data."""
        return self._data.current(trial) and not self._invalid.row_flagged(trial.row_id)

    # -- concluding an attempt --------------------------------------------------------------

    def conclude(self, trial: LiveTrial, status: JobStatus) -> None:
        """What *trial*'s ended attempt means: scored when it succeeded with a complete result,
        else classified by the retry policy."""
        if status.state is JobState.CANCELLED and status.job_id in self.cancelled_before:
            # dse's own cancel, not someone else's: the resumed run measures the config
            # again, and no interruption is counted against the trial or its node.
            status = replace(status, state=JobState.LOST, reason=controller_lost(
                "cancelled by an earlier controller of this run, which left before it ended"))
        if status.state is not JobState.SUCCEEDED:
            trial.status, trial.failure, trial.message = self._policy.classify(
                status, cancel_requested=status.job_id in self.cancel_requested
            )
            return
        assert trial.spec is not None
        try:
            evaluation = self._environment.evaluate(trial.spec, status)
        except Exception as exc:  # noqa: BLE001 - a broken result never crashes the loop
            evaluation = Evaluation(
                failure=FailureClass.INCOMPLETE_OUTPUT,
                message=f"evaluating the result raised {type(exc).__name__}: {exc}",
            )
        metrics = dict(evaluation.metrics)
        if self._with_spend:  # what its attempts were charged (this one's included)
            metrics.update(spend_metrics(trial.spent))
        trial.metrics = metrics
        self._note_data_read(trial, evaluation.data_version)
        if evaluation.environment is not None:
            self._note_environment(trial, evaluation.environment)
        if not evaluation.ok:
            trial.status, trial.failure = TrialStatus.FAILED, evaluation.failure
            trial.message = evaluation.message
            return
        try:
            trial.score, trial.scores, trial.baseline_row = self._baselines.score(
                trial, trial.metrics)
            trial.status = TrialStatus.COMPLETED
        except ScoringError as exc:
            trial.status, trial.failure = TrialStatus.FAILED, FailureClass.SCORER_ERROR
            trial.message = str(exc)

    def _note_data_read(self, trial: LiveTrial, read: str | None) -> None:
        if read is None:
            return
        trial.data_read = read
        self._journal.batch.set_trial_data(row=trial.row_id, read=read)
        if trial.data_version is not None and read != trial.data_version:
            self._journal.event(trial.row_id, "data_version_mismatch", {
                "trial": trial.number, "expected": trial.data_version, "read": read,
            })
            self._journal.alert(
                f"trial {trial.number} read data version {read}, expected {trial.data_version}"
            )

    def _note_environment(self, trial: LiveTrial, environment: Mapping[str, Any]) -> None:
        """Stamp *trial* with the digest of the environment it ran in (stored once)."""
        digest = environment_digest(environment)
        if digest not in self._environments:
            self._environments.add(digest)
            self._journal.batch.add_environment(
                digest=digest, python=environment.get("python"),
                distributions=environment.get("distributions", {}),
            )
        self._journal.batch.link_trial(row=trial.row_id, dependencies=digest)

    def take_in_invalidations(self, store: Storage, table: TrialTable) -> bool:
        """Take in results invalidated since the last look (``dse invalidate``, possibly from
        another process): never reuse them, never feed them to the agent, never rank them.
        True when the agent was told one of them (it must be rebuilt to forget it)."""
        last = store.last_invalidation()
        if self._invalid.seen(last):
            return False
        refreshed = self._invalid.refresh(last, (
            Flag(row.id, row.campaign_id, row.number, row.config_hash,
                 row.invalidation is not None, row.cache_of)
            for row in store.reads.invalid_trials()
        ))
        for digest, row_id in refreshed.results:
            table.uncache(digest, row_id)
        newly = refreshed.numbers
        if not newly:
            return False
        # Those still running (or waiting on a running trial), or ended but not yet told, the
        # agent never heard of; any other it was told, and must forget.
        untold = self._feedback.untold()
        for trial in table.unfinished():
            untold.add(trial.number)
            untold.update(waiter.number for waiter in trial.waiters)
        stale = any(number not in untold for number in newly)
        self._feedback.drop(
            {n for n in self._feedback.untold() if self._invalid.number_flagged(n)})
        best = self._stats.best
        if (best is not None and self._invalid.number_flagged(best.number)) or any(
                self._invalid.number_flagged(n) for n in self._stats.front):
            self.rerank(store)
        self._journal.event(None, "invalidated", {"trials": sorted(newly)})
        self._journal.alert(
            f"{len(newly)} result(s) of this run were invalidated; never fed to the agent from"
            " now on"
        )
        return stale

    def rerank(self, store: Storage) -> None:
        """Read "best so far" (and a Pareto campaign's front) back from the record: the valid
        completed trials (or cache hits of one) of this run about the current data."""
        best: BestTrial | None = None
        self._stats.front = {}
        direction = self.ranking.direction
        version = self._data.version
        for row in store.reads.trials(self._journal.campaign_id):
            score = row.score
            if (
                row.status not in (TrialStatus.COMPLETED, TrialStatus.CACHED) or score is None
                or self._invalid.row_flagged(row.id)
                or (version is not None
                    and (row.data_version_read or row.data_version) not in (None, version))
            ):
                continue
            if best is None or direction.better(score, best.score):
                best = BestTrial(row.number, row.params, float(score))
            if row.scores is not None:
                self._stats.join_front(row.number, self._losses(row.scores))
        self._stats.best = best

    def _losses(self, scores: tuple[float, ...]) -> tuple[float, ...]:
        """A Pareto campaign's *scores* oriented so that lower is better in each."""
        vector = self._baselines.vector
        assert vector is not None
        return tuple(-x if o.direction is Direction.MAXIMIZE else x
                     for x, o in zip(scores, vector.objectives, strict=True))

    def _join_front(self, trial: LiveTrial, status: TrialStatus) -> None:
        if (trial.scores is not None and self._baselines.vector is not None
                and status in (TrialStatus.COMPLETED, TrialStatus.CACHED)
                and self.rankable(trial)):
            self._stats.join_front(trial.number, self._losses(trial.scores))

    # -- recording an end -------------------------------------------------------------------

    def record_end(self, trial: LiveTrial, now: float) -> None:
        """Record *trial*'s outcome, and end the cache hits that waited on it."""
        batch = self._journal.batch
        if trial.status is TrialStatus.COMPLETED and trial.score is not None:
            self._record_score(trial, now)
        batch.end_trial(row=trial.row_id, status=trial.status, failure=trial.failure,
                        message=trial.message, metrics=trial.metrics, score=trial.score,
                        ended_at=now, step=trial.step, scores=trial.scores)
        if reusable(trial.status, trial.failure) and not self._invalid.row_flagged(trial.row_id):
            self._table.cache(trial)
        self.ended(trial)
        self.end_waiters(trial, now)

    def end_waiters(self, trial: LiveTrial, now: float) -> None:
        """End the cache hits that waited on *trial*, which ended (here, or as another
        controller recorded it): with its result when it is reusable, else as it ended."""
        batch = self._journal.batch
        for waiter in trial.waiters:
            if trial.status.is_reusable():
                self._baselines.rescore(waiter, trial)
                batch.end_trial(row=waiter.row_id, status=TrialStatus.CACHED,
                                failure=trial.failure, message=waiter.message or trial.message,
                                metrics=trial.metrics, score=waiter.score, ended_at=now,
                                step=trial.step, scores=waiter.scores)
                self.cached_end(waiter, trial)
            else:
                waiter.status = trial.status
                batch.end_trial(
                    row=waiter.row_id, status=trial.status, ended_at=now,
                    message=f"reused trial {trial.number}, which ended {trial.status.value}",
                )
                self.ended(waiter, reported=trial.status)
        trial.waiters.clear()

    def _record_score(self, trial: LiveTrial, now: float) -> None:
        assert trial.score is not None
        scorer = self._baselines.scorer
        self._journal.batch.add_score(trial=trial.row_id, scorer=scorer.name,
                                      version=scorer.version, score=trial.score,
                                      baseline=trial.baseline_row, at=now,
                                      scores=trial.scores)

    def cached_end(self, trial: LiveTrial, original: LiveTrial) -> None:
        """A cache hit reached its end: scored (by :meth:`Baselines.rescore`) and told to the
        agent."""
        trial.metrics = original.metrics
        trial.failure = original.failure
        trial.step = original.step
        if trial.score is not None:
            self._record_score(trial, self._journal.now())
        self._stats.cached += 1
        if trial.proposal == 0:
            self._stats.baseline = TrialStatus.CACHED
        if trial.score is not None and self.rankable(trial):
            self._stats.rank(trial.number, trial.params, trial.score, self.ranking)
        self._join_front(trial, TrialStatus.CACHED)
        if (
            trial.proposal > 0 and not self._invalid.number_flagged(trial.number)
            and not self._invalid.result_flagged(original.row_id)
        ):
            # A reuse of a result flagged while it ran is flagged with it: never fed.
            self._feedback.tell(trial.proposal, self._feedback.observation(
                trial, status=original.status))
        self._journal.trial_ended(TrialEnd(trial.number, TrialStatus.CACHED))

    def ended(self, trial: LiveTrial, reported: TrialStatus | None = None) -> None:
        """Count *trial*'s end (as *reported*, default its own status), and queue what the
        agent is told of it."""
        status = reported or trial.status
        self._stats.count(status, trial.number, trial.params, trial.score, self.ranking,
                          rank=self.rankable(trial), baseline=trial.proposal == 0)
        self._join_front(trial, status)
        if (
            status is not TrialStatus.CANCELLED and trial.proposal > 0
            and not self._invalid.number_flagged(trial.number)
        ):
            # A result about other data than the current is never fed to the agent.
            self._feedback.tell(trial.proposal, self._feedback.observation(
                trial, status=status, current=self._data.current(trial)))
        end = TrialEnd(
            trial.number, status, failure=trial.failure, message=trial.message,
            attempts=trial.attempt, node=trial.node, log=trial.log_dir,
            wall_s=trial.spent.wall_s)
        self._journal.trial_ended(end)
        if trial.proposal > 0 and reported is None:  # a trial's own end, not a reuse's
            self._note_streak(trial, end)

    def _note_streak(self, trial: LiveTrial, end: TrialEnd) -> None:
        """Count *trial*'s end in the streak of failures; stop the run when it is long enough
        (one event, one line)."""
        s = self._stats
        has_result = bool(s.completed or s.stopped or s.best is not None or s.front)
        if not self._streak.note(end, trial.trial_id, has_result=has_result):
            return
        assert self._end is not None
        first = self._streak.first
        assert first is not None
        assert first.failure is not None
        log = first.log if first.log is not None and first.log.is_dir() else None
        line = self._streak.line(None if log is None else f"{_shown(log)}{os.sep}")
        self._journal.event(None, "stopped", {
            "reason": EndReason.MAX_CONSECUTIVE_FAILURES.value, "count": self._streak.count,
            "class": first.failure.value, "trial": first.number,
            "trial_id": self._streak.first_id, "message": first.message,
            "log": None if log is None else str(log),
        })
        self._end.why = self._end.why or line
        if self._end.stop is None:
            self._end.stop = EndReason.MAX_CONSECUTIVE_FAILURES
        self._journal.alert(line)


def _shown(path: Path) -> str:
    """*path* relative to the working directory when it is under it (shorter to read)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
