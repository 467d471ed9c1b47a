"""What a pool drives: the per-pass API of one campaign run (:class:`Driven`; the engine is the
one dse has), and what the pool reads of its live trials (:class:`PoolTrial`). The pool names
no engine: the engine, above it, runs a pool of one for ``Engine.run()``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse.campaign._model import Campaign
    from dse.model._clock import Clock
    from dse.model._outcome import CampaignResult
    from dse.model._types import JobSpec
    from dse.plugins._protocols import Agent, Runner
    from dse.record._base import Storage


class PoolTrial(Protocol):
    """A live trial as the pool sees it: what it asks for, since when it waits, what it was
    expected to take."""

    @property
    def trial_id(self) -> str:
        """Its name (``<campaign>-<run>-<number>``)."""
        ...

    @property
    def params(self) -> Mapping[str, Any]:
        """Its params."""
        ...

    @property
    def spec(self) -> JobSpec | None:
        """Its current attempt's job (``None`` before it has one)."""
        ...

    @property
    def granted(self) -> bool:
        """The pool let its current attempt start."""
        ...

    @property
    def queued_at(self) -> float:
        """When its current attempt was queued."""
        ...

    @property
    def granted_at(self) -> float:
        """When the pool let its current attempt start."""
        ...

    @property
    def expected(self) -> float | None:
        """The run time the pool expected of its current attempt."""
        ...

    @property
    def attempt_started(self) -> float | None:
        """When its current attempt started, when known."""
        ...


class PoolTable(Protocol):
    """A run's live trials, as the pool reads them."""

    @property
    def running(self) -> Mapping[str, PoolTrial]:
        """The trials running (or submitted), by job id."""
        ...

    @property
    def queued(self) -> Sequence[PoolTrial]:
        """The trials waiting for the pool to let them start."""
        ...

    @property
    def retries(self) -> Sequence[PoolTrial]:
        """The trials waiting to be retried."""
        ...


class Alerts(Protocol):
    """Where a run says something systematic happened."""

    def alert(self, message: str) -> None:
        """Tell the run's listener."""
        ...


class PassListener(Protocol):
    """The run's listener, told of each pass."""

    def on_pass(self, engine: Any) -> None:
        """A polling pass was committed."""
        ...


class Driven(Protocol):
    """One campaign run driven pass by pass (:class:`dse.Engine`)."""

    pool: Any
    """The :class:`~dse.pool._pool.Pool` the run's trials wait for (it sets this when the
    run joins it; ``None`` before)."""

    @property
    def campaign(self) -> Campaign:
        """The campaign."""
        ...

    @property
    def campaign_id(self) -> int:
        """Its run's id in the record (0 before it is recorded)."""
        ...

    @property
    def store(self) -> Storage:
        """The record."""
        ...

    @property
    def table(self) -> PoolTable:
        """Its live trials."""
        ...

    @property
    def backend(self) -> Runner:
        """Where its trials run."""
        ...

    @property
    def agent(self) -> Agent:
        """Who proposes its trials."""
        ...

    @property
    def journal(self) -> Alerts:
        """Where it says what happened."""
        ...

    @property
    def listener(self) -> PassListener:
        """Who is told of its passes."""
        ...

    @property
    def clock(self) -> Clock:
        """Its clock."""
        ...

    @property
    def finished(self) -> CampaignResult | None:
        """How it ended, once it has."""
        ...

    def open(self, *, resume: int | None = None) -> None:
        """Record the run (or reopen *resume*), ready for the loop."""
        ...

    def use_runner(self, runner: Runner) -> None:
        """Run trials on *runner* from now on."""
        ...

    def grant(self, trial: Any, expected: float, now: float, *, record: bool) -> None:
        """Let *trial* (one of its :attr:`table`'s) start, expected to take *expected*."""
        ...

    def dispatch(self) -> None:
        """Pull proposals into free room."""
        ...

    def commit(self) -> None:
        """Write the pass's changes."""
        ...

    def poll_pass(self) -> bool:
        """One pass: poll, apply, dispatch, commit; ``False`` once the run ended."""
        ...

    def submit_granted(self) -> None:
        """Submit the attempts the pool granted."""
        ...

    def wait_plan(self) -> tuple[float, bool]:
        """How long to wait before the next pass, and whether the runner can wake it."""
        ...

    def is_live(self) -> bool:
        """Whether the run goes on."""
        ...

    def stop_requested(self) -> bool:
        """Whether the run was asked to stop."""
        ...

    def cancel_all(self) -> None:
        """Cancel what runs and record it."""
        ...

    def close(self, *, deliver: bool = True) -> None:
        """End the run."""
        ...

    def abandon(self) -> None:
        """End the run without waiting for its trials."""
        ...

    def crash(self, exc: BaseException) -> None:
        """Record that the controller failed with *exc*."""
        ...
