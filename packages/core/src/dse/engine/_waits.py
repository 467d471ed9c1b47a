"""Waiting on another controller: the cache hits of a run whose original is a trial another
controller of the workspace runs, resolved once per pass from what the record says."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.model._types import TrialStatus

if TYPE_CHECKING:
    from dse.engine._dispatch import Dispatcher
    from dse.engine._live import LiveTrial
    from dse.record._records import Trial


class Waits:
    """Ends the cache hits waiting on other controllers' trials with the result they reuse,
    has them wait on whoever runs their config now, or runs the config itself when the trial
    waited on ended without a result to reuse (cancelled, interrupted, its controller gone).
    It owns no state: the table holds the remote trials, :class:`dse.engine._claims.Claims` asks."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        self._parts = dispatcher.parts

    def check(self, now: float) -> None:
        """Ask the record about every remote trial waited on (one transaction) and act."""
        p = self._parts
        if not p.table.remote:
            return
        for digest, claim in p.claims.check(now).items():
            other = p.table.remote[digest]
            if claim.result is not None:
                self._reuse(other, claim.result, now)
            elif claim.mine:
                self._run(other, claim.row, now)
            elif claim.row != other.row_id:
                self._relink(other, claim.row)  # another controller runs it now

    def _relink(self, other: LiveTrial, row: int) -> None:
        other.row_id = row
        for waiter in other.waiters:
            self._parts.journal.batch.relink_trial(row=waiter.row_id, cache_of=row)

    def _reuse(self, other: LiveTrial, result: Trial, now: float) -> None:
        """The config has a reusable result now: the waiters end as cache hits of it."""
        p = self._parts
        p.table.unwait(other.config_hash)
        if result.id != other.row_id:
            self._relink(other, result.id)
        other.number, other.status, other.metrics = result.number, result.status, result.metrics
        other.score, other.failure, other.message = result.score, result.failure, result.message
        p.table.cache(other)
        p.results.end_waiters(other, now)

    def _run(self, other: LiveTrial, row: int, now: float) -> None:
        """The trial waited on ended without a reusable result, or its controller is gone:
        the first waiter (claimed as *row*) runs the config, the others wait on it."""
        p = self._parts
        p.table.unwait(other.config_hash)
        if not other.waiters:
            p.journal.batch.release_claim(row=row)  # a baseline's look: it claims again
            return
        first, *rest = other.waiters
        other.waiters.clear()
        p.journal.event(first.row_id, "runs_instead", {
            "trial": first.number, "waited_on": other.row_id,
        })
        first.status, first.original_status = TrialStatus.RUNNING, None
        self._dispatcher.launch(first, now)
        for waiter in rest:
            p.journal.batch.relink_trial(row=waiter.row_id, cache_of=first.row_id)
            first.waiters.append(waiter)
        if first.status is not TrialStatus.RUNNING:
            p.results.end_waiters(first, now)  # it could not start: they end with it

    def cancel(self, now: float) -> None:
        """The run stops: the cache hits still waiting on another controller end cancelled."""
        p = self._parts
        for digest in list(p.table.remote):
            other = p.table.unwait(digest)
            assert other is not None
            for waiter in other.waiters:
                waiter.status = TrialStatus.CANCELLED
                waiter.message = (f"cancelled while waiting for trial row {other.row_id}, which"
                                  " another controller runs")
                p.journal.batch.end_trial(row=waiter.row_id, status=TrialStatus.CANCELLED,
                                          ended_at=now, message=waiter.message)
                p.results.ended(waiter)
