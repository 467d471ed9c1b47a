from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Where the engine reads the time and waits between polling passes."""

    def time(self) -> float:
        """Seconds since the epoch (or since the fake clock's start)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait *seconds* (a fake clock advances instead)."""
        ...


class SystemClock:
    """The real clock: :func:`time.time` and :func:`time.sleep`."""

    def time(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """Wait *seconds* (nothing for zero or less)."""
        if seconds > 0:
            time.sleep(seconds)
