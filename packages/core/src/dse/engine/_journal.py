"""What a run writes and tells as it goes: the changes of the current pass, the run's events,
and the listener's notices — one owner, so every part writes the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from dse.record._batch import Batch

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dse.model._clock import Clock
    from dse.model._outcome import Retry, TrialEnd

RUN_TIME_EVERY = 10.0
"""Seconds between two records of a run's time when its passes write nothing else: a
controller killed loses at most this much of what its wall-clock ceiling counted."""


class Notices(Protocol):
    """Where the journal's notices go: the run's listener, told which run they are about
    (:class:`dse.EngineListener`'s ``on_alert``, ``on_trial_ended``, ``on_retry``)."""

    def alert(self, message: str) -> None: ...

    def trial_ended(self, end: TrialEnd) -> None: ...

    def retried(self, retry: Retry) -> None: ...


class Journal:
    """The changes of the current pass (:attr:`batch`, committed once per pass) and the
    notices about the run (to *notices*).

    :param clock: stamps the events.
    """

    def __init__(self, notices: Notices, clock: Clock) -> None:
        self.batch = Batch()
        self.campaign_id = 0
        """The run the events belong to (set when the run is recorded)."""
        self._notices = notices
        self._clock = clock
        self._run_time_at = clock.monotonic()
        """When the run's time was last recorded (the monotonic clock)."""

    def now(self) -> float:
        """The wall clock: what the record stamps."""
        return self._clock.time()

    def monotonic(self) -> float:
        """The monotonic clock: what durations and deadlines are measured on (the budget's
        wall-clock ceiling, the interruption window); never recorded."""
        return self._clock.monotonic()

    def keep_run_time(self, started_at: float) -> None:
        """Record the run's time (since *started_at* on the monotonic clock, see
        :meth:`dse.engine._gate.BudgetGate.open`) with the pass's changes, or on its own once
        :data:`RUN_TIME_EVERY` seconds passed since it last was: what a resumed run's
        wall-clock ceiling counts on from."""
        now = self._clock.monotonic()
        if self.campaign_id and (self.batch or now - self._run_time_at >= RUN_TIME_EVERY):
            self._run_time_at = now
            self.batch.set_run_time(campaign=self.campaign_id, seconds=max(now - started_at, 0.0))

    def event(self, trial_row: int | None, kind: str, data: Mapping[str, Any]) -> None:
        """Record that *kind* happened (to trial *trial_row*, or to the run)."""
        self.batch.add_event(campaign=self.campaign_id, trial=trial_row,
                             at=self._clock.time(), kind=kind, data=data)

    def alert(self, message: str) -> None:
        """Tell the listener something systematic happened."""
        self._notices.alert(message)

    def trial_ended(self, end: TrialEnd) -> None:
        """Tell the listener a trial reached its outcome."""
        self._notices.trial_ended(end)

    def retried(self, trial_row: int, retry: Retry) -> None:
        """Record that a new attempt of trial *trial_row* is queued (a ``retry`` event), and
        tell the listener."""
        self.event(trial_row, "retry", {
            "trial": retry.number, "attempt": retry.attempt, "after": retry.after,
            "class": retry.cause, "node": retry.node, "resumed": retry.resumed,
        })
        self._notices.retried(retry)
