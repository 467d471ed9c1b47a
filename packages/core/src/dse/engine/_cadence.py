"""The wait between polling passes: back-off while nothing changes, and the plan of each wait."""

from __future__ import annotations

__all__ = ["Cadence"]


class Cadence:
    """Owns the wait between a campaign's polling passes: *first* after a pass with news,
    doubled after each pass without, up to *largest* (STYLE.md 8: the engine owns the cadence,
    through this part)."""

    def __init__(self, first: float, largest: float) -> None:
        self._first, self._largest = first, largest
        self.wait = first
        """The wait before the next pass, as the back-off has it now."""

    def passed(self, changed: bool) -> None:
        """A pass ended: with news (*changed*) the wait starts again from the first."""
        self.wait = self._first if changed else min(self.wait * 2, self._largest)

    def plan(self, now: float, *, deadline: float | None, pause_until: float | None,
             exhausted: bool) -> tuple[float, bool]:
        """How long to wait before the next pass, and whether to ask the runner (which may
        return sooner, when a job changed).

        :param deadline: the wall-clock ceiling's end, if the campaign has one.
        :param pause_until: when dispatch, paused with nothing running, may resume: the wait
            is a sleep until then (the runner has nothing to say).
        :param exhausted: the budget already ended the run: the deadline no longer bounds it.
        """
        if pause_until is not None:
            left = max(pause_until - now, self.wait, 1e-3)
            if deadline is not None and now < deadline:
                left = min(left, deadline - now)
            return left, False
        wait = self.wait
        if deadline is not None and not exhausted:
            wait = max(min(wait, deadline - now), 0.0)
        return wait, True
