"""What a pass brings back: the statuses a runner reports applied to the live trials — each
ended attempt concluded, charged, recorded, then retried or its trial's end recorded — and
the cancels of a stopping run."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from dse.engine._retry import controller_lost, is_controller_lost
from dse.model._budget import Spend
from dse.model._types import AttemptState, JobState, TrialStatus

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dse.engine._gate import BudgetGate
    from dse.engine._interrupt import Interruptions
    from dse.engine._journal import Journal
    from dse.engine._live import LiveTrial, TrialTable
    from dse.engine._progress import ProgressReader
    from dse.engine._results import Results
    from dse.engine._stopping import EarlyStopping
    from dse.model._clock import Clock
    from dse.model._outcome import RunEnd
    from dse.model._types import JobStatus
    from dse.plugins._protocols import Runner


class Collector:
    """Applies what the runner reports (it owns no state of its own: every change goes to
    the part that owns it).

    :param on_attempt_end: told of each ended attempt (the pool learns durations from it).
    """

    def __init__(
        self, *, table: TrialTable, gate: BudgetGate, results: Results,
        interruptions: Interruptions, journal: Journal, end: RunEnd, clock: Clock,
        runner: Runner, stopping: EarlyStopping | None = None,
        on_attempt_end: Callable[[LiveTrial, JobStatus, float], None] | None = None,
    ) -> None:
        self._table = table
        self._gate = gate
        self._results = results
        self._interruptions = interruptions
        self._journal = journal
        self._end = end
        self._clock = clock
        self._runner = runner
        self._on_attempt_end = on_attempt_end
        self.progress: ProgressReader | None = None
        """Reads the running trials' learning curves each pass (when they have directories)."""
        self.stopping = stopping
        """Stops and promotes trials by the campaign's rule (with a ``[stopping]`` table)."""

    def use_runner(self, runner: Runner) -> None:
        """Poll and cancel through *runner* from now on (a pool's share of its backend)."""
        self._runner = runner

    def apply(self, statuses: Sequence[JobStatus]) -> bool:
        changed = False
        if self.progress is not None:  # before the ends: an ended trial's last points too
            new = self.progress.read(self._table.running.values(), self._journal)
            if self.stopping is not None:
                stops = self.stopping.review(new, self._journal, self._table.running)
                if stops:
                    self._runner.cancel(stops)
        now = self._clock.time()
        for status in statuses:
            trial = self._table.running.get(status.job_id)
            if trial is None:
                continue
            changed = True
            assert trial.attempt_row is not None
            if not status.state.is_finished():
                trial.node = status.node or trial.node
                if status.state is JobState.RUNNING:  # not PENDING: the console's running list
                    trial.running_since = status.started_at or trial.running_since or now
                trial.job_id_recorded = True
                self._journal.batch.update_attempt(
                    row=trial.attempt_row, job_id=status.job_id,
                    state=AttemptState.of(status.state), started_at=status.started_at,
                )
                continue
            self._table.ended(status.job_id)
            self._attempt_ended(trial, status, now)
        return changed

    def _attempt_ended(self, trial: LiveTrial, status: JobStatus, now: float) -> None:
        """Conclude, charge and record an ended attempt; retry it or record the trial's end."""
        assert trial.attempt_row is not None
        assert trial.spec is not None
        if trial.adopted and status.state is JobState.LOST and not is_controller_lost(
            status.reason
        ):
            # Begun under a controller that died, and the backend has no trace of its end:
            # lost to the controller's death, not by the trial (recorded so: a resumed run
            # knows it too).
            status = dataclasses.replace(status, reason=controller_lost(status.reason),
                                         ambiguous=False)
        ended_at = status.ended_at or now
        trial.node = status.node or trial.node
        # Charged before it is concluded: an objective may be what the trial cost.
        charged = self._charge(trial, self._gate.charge(trial.spec, status, ended_at))
        if self.stopping is None or not self.stopping.ended(trial, status, self._journal):
            self._results.conclude(trial, status)
        if self._on_attempt_end is not None:
            self._on_attempt_end(trial, status, ended_at)
        batch = self._journal.batch
        batch.end_attempt(
            row=trial.attempt_row, job_id=status.job_id, state=AttemptState.of(status.state),
            exit_code=status.exit_code, signal=status.signal, node=status.node,
            reason=status.reason, peak_rss_kb=status.peak_rss_kb, started_at=status.started_at,
            ended_at=ended_at, work_lost_s=self._work_lost(trial, status, ended_at),
            spend=charged.as_dict(),
        )
        if status.usage:
            batch.set_attempt_usage(row=trial.attempt_row, usage=status.usage)
        if status.left_files:
            batch.set_attempt_left_files(row=trial.attempt_row, left=status.left_files)
        if trial.status is TrialStatus.INTERRUPTED and self._end.stopping():
            # Not retried while the campaign stops; a resumed run will run it again.
            trial.message = f"{status.state.value} while the campaign was stopping"
            trial.status, trial.failure = TrialStatus.CANCELLED, None
        elif trial.status is TrialStatus.INTERRUPTED and self._interruptions.retry(
            trial, status, now
        ):
            return
        self._table.forget(trial)
        self._results.record_end(trial, now)

    def _settle(self, trial: LiveTrial, actual: Spend | None) -> None:
        """Replace *trial*'s reservation with what its attempt actually spent, and record it;
        ``None``: the runner never confirmed the end, so it is charged its reservation."""
        charged = self._charge(trial, actual)
        assert trial.attempt_row is not None
        self._journal.batch.set_attempt_spend(row=trial.attempt_row, spend=charged.as_dict())

    def _charge(self, trial: LiveTrial, actual: Spend | None) -> Spend:
        """:meth:`_settle` but for the record: what is charged (recorded by the caller)."""
        reserved, trial.reserved = trial.reserved, None
        charged = self._gate.settle(reserved, actual)
        trial.spent = trial.spent + charged
        return charged

    def _work_lost(self, trial: LiveTrial, status: JobStatus, ended_at: float) -> float | None:
        """Seconds of work an unsuccessful attempt lost since its last checkpoint."""
        if trial.status is TrialStatus.COMPLETED:
            return None
        checkpoint = trial.checkpoint_mark
        if checkpoint is None:
            return None
        started = status.started_at or trial.attempt_started
        if started is None:
            return None
        try:
            mark = checkpoint.stat().st_mtime
        except OSError:
            mark = None
        since = max(started, mark) if mark is not None else started
        return max(ended_at - since, 0.0)

    def never_retried(self, trial: LiveTrial, why: str, now: float) -> None:
        """A waiting attempt the budget will never admit: the trial ends interrupted."""
        trial.status = TrialStatus.INTERRUPTED
        trial.message = f"not retried: {why}"
        self._end_cancelled(trial, now)
        self._table.forget(trial)
        self._results.record_end(trial, now)

    def _end_cancelled(self, trial: LiveTrial, now: float, job_id: str | None = None) -> None:
        """Record *trial*'s attempt as ended ``cancelled`` by this campaign, with its message."""
        assert trial.attempt_row is not None
        self._journal.batch.end_attempt(row=trial.attempt_row, job_id=job_id,
                                       state=AttemptState.CANCELLED, reason=trial.message,
                                       ended_at=now)

    def cancel_unsubmitted(self, now: float, why: str) -> None:
        """Record every attempt not submitted (queued, waiting to be retried) as cancelled,
        saying *why*: it never runs."""
        for trial in self._table.take_unsubmitted():
            trial.status = TrialStatus.CANCELLED
            trial.message = why
            self._end_cancelled(trial, now)
            self._settle(trial, Spend())  # never submitted: nothing spent
            self._results.record_end(trial, now)

    def ask_cancel(self) -> None:
        """Ask the backend to cancel every running attempt; what was asked is recorded (a
        ``cancel`` event naming the jobs), so a run resumed after its controller left
        without waiting knows their cancelled ends are its own."""
        asked = [job for job in self._table.running if job not in self._results.cancel_requested]
        if asked:
            self._journal.event(None, "cancel", {"running": len(asked), "jobs": asked})
        self._results.cancel_requested.update(asked)
        self._runner.cancel(list(self._table.running))

    def cancel_all(self, grace: float = 30.0) -> None:
        """Cancel what runs, collect final states for a while, record the rest as cancelled."""
        now = self._clock.time()
        self.cancel_unsubmitted(now, "cancelled before submission")
        if self._table.running:
            self.ask_cancel()
            deadline = self._clock.monotonic() + grace
            wait = 0.0
            while self._table.running and self._clock.monotonic() < deadline:
                self.apply(self._runner.poll())
                if self._table.running:
                    wait = min(max(wait * 2, 0.01), 0.5)
                    self._clock.sleep(wait)
            now = self._clock.time()
            for job_id, trial in self._table.take_running():
                trial.status = TrialStatus.CANCELLED
                trial.message = "cancel requested; the backend did not confirm the end"
                self._end_cancelled(trial, now, job_id)
                self._settle(trial, None)
                self._results.record_end(trial, now)
