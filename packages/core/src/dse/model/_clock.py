from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Where the engine reads the time and waits between polling passes.

    Two readings: :meth:`time`, the wall clock, for what the record stamps (when a trial
    started, when a run ended: for people to read), and :meth:`monotonic`, for every duration
    and deadline the controller measures (a wall-clock budget, a time limit, a charge, a
    wait), which a step of the wall clock (NTP, a suspended laptop, an operator's ``date
    -s``) must not move. A monotonic reading means something only beside another of the same
    process: what a run spent in an earlier process comes from the record.
    """

    def time(self) -> float:
        """Seconds since the epoch (or since the fake clock's start)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never steps (any origin; within one process)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait *seconds* (a fake clock advances instead)."""
        ...


class SystemClock:
    """The real clock: :func:`time.time`, :func:`time.monotonic` and :func:`time.sleep`."""

    def time(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def monotonic(self) -> float:
        """:func:`time.monotonic`: never steps with the wall clock."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """Wait *seconds* (nothing for zero or less)."""
        if seconds > 0:
            time.sleep(seconds)
