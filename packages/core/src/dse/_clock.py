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
    """The real clock."""

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
