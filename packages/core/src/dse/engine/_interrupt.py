"""Interruptions: the retry policy applied to an interrupted attempt, and the watch over how
many interruptions the run sees (suspect nodes, a pause of dispatch), with their events and
alerts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.engine._retry import InterruptionWatch
from dse.model._types import FailureClass, TrialStatus
from dse.plugins._protocols import TrialInfo

if TYPE_CHECKING:
    from dse.campaign._model import Campaign
    from dse.engine._dispatch import Dispatcher
    from dse.engine._live import LiveTrial
    from dse.engine._retry import RetryPolicy
    from dse.model._types import JobStatus


def watch_for(campaign: Campaign) -> InterruptionWatch:
    """The interruption watch *campaign*'s settings ask for."""
    return InterruptionWatch(
        threshold=campaign.interruption_threshold, window=campaign.interruption_window,
        node_threshold=campaign.node_interruption_threshold,
        pause=campaign.pause_on_interruptions,
    )


class Interruptions:
    """Applies the retry policy to interrupted attempts and tells what the interruption watch
    sees (both own their state; this adds the new attempt, the events and the alerts)."""

    def __init__(self, dispatcher: Dispatcher, policy: RetryPolicy) -> None:
        self.policy = policy
        self.watch = dispatcher.parts.watch
        self._dispatcher = dispatcher

    @property
    def paused(self) -> bool:
        return self.watch.paused

    def retry(self, trial: LiveTrial, status: JobStatus, now: float) -> bool:
        """Start a new attempt of an interrupted trial if the policy allows; True if so. (An
        attempt the controller's death lost is no interruption of the infrastructure: the
        watch never sees it.)"""
        if trial.failure is not FailureClass.CONTROLLER_RESTART:
            self._note(trial, status)
        decision = self.policy.decide(trial.history, status, attempt=trial.attempt,
                                      failure=trial.failure, message=trial.message)
        if not decision.retry:
            trial.status, trial.message = decision.status, decision.message
            return False
        assert trial.spec is not None
        assert trial.trial_dir is not None
        parts = self._dispatcher.parts
        try:
            spec = parts.environment.prepare(TrialInfo(
                trial.trial_id, trial.number, trial.attempt + 1, trial.params, trial.trial_dir,
                parts.data.version,
            ))
        except Exception as exc:  # noqa: BLE001 - a trial that cannot be prepared fails alone
            trial.status, trial.failure = TrialStatus.FAILED, FailureClass.PREPARE_ERROR
            trial.message = f"{type(exc).__name__}: {exc}"
            return False
        limit = self._dispatcher.avoiding(spec, trial).time_limit
        if limit is not None and limit <= 0:
            trial.status = TrialStatus.BUDGET_EXHAUSTED
            trial.message = (
                f"{trial.message or status.state.value}; its per-trial ceiling is spent"
                f" after {trial.attempt} attempts"
            )
            return False
        cause = trial.failure.value if trial.failure else status.state.value
        self._dispatcher.next_attempt(trial, spec, now, after=status.state.value, cause=cause,
                                      node=status.node)
        parts.stats.retries += 1
        return True

    def _note(self, trial: LiveTrial, status: JobStatus) -> None:
        journal = self._dispatcher.parts.journal
        for node in self.watch.note(journal.monotonic(), status.node, trial.number):
            journal.event(None, "suspect_node", {"node": node,
                                                 "trials": self.watch.node_trials(node)})
            journal.alert(self.watch.suspect_message(node))
        self.check_pause()

    def check_pause(self) -> None:
        """Pause dispatch while interruptions in the window reach the threshold (the window
        slides on the monotonic clock: a step of the wall clock neither empties nor holds
        it)."""
        change = self.watch.check(self._dispatcher.parts.journal.monotonic())
        parts = self._dispatcher.parts
        parts.stats.paused = self.watch.paused
        if change is None:
            return
        parts.journal.event(None, change.kind, change.data())
        parts.journal.alert(change.message)
