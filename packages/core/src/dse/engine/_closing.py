"""Closing a run its controller left running: reopened only to end it.

When a campaign is run again changed (or with ``--fresh``) after its controller died, the run
it left ``running`` is not continued (:attr:`dse.engine._spec.RunChoice.supersede`), and is not left
behind either: its trials may still run, and would run beside the new run's, their results
lost. A :class:`ClosingEngine` reopens it first: its submitted attempts are reattached and
waited for, their ends recorded in it; what waited to start or to be retried never starts
(recorded cancelled); the agent is neither rebuilt nor told; the run ends ``stopped
(superseded)``. Then the new run starts, and reuses what the closed run measured.
"""

from __future__ import annotations

from dse.engine._engine import Engine
from dse.engine._resume import Resume
from dse.model._types import EndReason

NOT_STARTED = "not started: the run was superseded"
"""The message of an attempt of a closed run that waited to start (or to be retried)."""


class ClosingEngine(Engine):
    """An :class:`Engine` that reopens a run only to close it (see the module):
    ``engine.run(resume=RUN)``."""

    def open(self, *, resume: int | None = None) -> None:
        super().open(resume=resume)
        self.end.finish(EndReason.SUPERSEDED)  # nothing new is pulled

    def _restore(self) -> None:
        reattach = Resume(self.dispatcher, self.interruptions).reattach_only(
            self.backend, self.clock.time())
        self.backend.reattach(reattach)

    def dispatch(self) -> None:
        now = self.clock.time()
        self.waits.check(now)  # cache hits of the run waiting on another controller's trial
        self.collector.cancel_unsubmitted(now, NOT_STARTED)

    def close(self, *, deliver: bool = True) -> None:
        super().close(deliver=False)  # its agent was never told the run: it tells nothing
