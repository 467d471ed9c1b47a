from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from dse.model._types import Observation


class ScriptedAgent:
    """Proposes the params of *script* in order, up to *n* at a time.

    *script* may be endless (an iterator). With ``wait_for_feedback`` the agent proposes
    nothing while any of its proposals is in flight, like a strictly sequential optimizer.
    Every observation is kept in :attr:`observed`, and every call in :attr:`calls`.
    """

    name: ClassVar[str] = "scripted"
    version: ClassVar[str] = "1"

    def __init__(
        self,
        script: Iterable[Mapping[str, Any]],
        *,
        wait_for_feedback: bool = False,
        seed: int = 0,
    ) -> None:
        self._it: Iterator[Mapping[str, Any]] = iter(script)
        self._exhausted = False
        self.wait_for_feedback = wait_for_feedback
        self.pulled = 0
        """How many proposals were taken from the script."""
        self.observed: list[Observation] = []
        """Every observation told, in order."""
        self.observe_calls: list[list[Observation]] = []
        """The observations of each :meth:`observe` call."""
        self.calls: list[tuple[int, int]] = []
        """(n asked, number in flight) of each :meth:`propose` call."""

    @property
    def exhausted(self) -> bool:
        """``True`` once the script ran out."""
        return self._exhausted

    def propose(
        self, n: int, in_flight: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """The next *n* params of the script (fewer at its end; none while anything is in
        flight, with ``wait_for_feedback``)."""
        self.calls.append((n, len(in_flight)))
        if self.wait_for_feedback and in_flight:
            return []
        out: list[Mapping[str, Any]] = []
        while len(out) < n:
            try:
                out.append(next(self._it))
            except StopIteration:
                self._exhausted = True
                break
            self.pulled += 1
        return out

    def observe(self, observations: Sequence[Observation]) -> None:
        """Keep *observations* (:attr:`observed`, :attr:`observe_calls`); learn nothing."""
        self.observe_calls.append(list(observations))
        self.observed.extend(observations)


class FakeClock:
    """A clock for tests: :meth:`sleep` advances the time instead of waiting, and
    :meth:`step` moves its wall clock alone, as NTP or a suspended laptop moves a real one."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        """The wall-clock time it reads (seconds; set it, or :meth:`step` it, to jump)."""
        self.mono = 0.0
        """The monotonic time it reads (seconds): moved by :meth:`sleep` alone."""
        self.slept = 0.0
        """Seconds it was asked to sleep in all."""

    def time(self) -> float:
        """:attr:`now`."""
        return self.now

    def monotonic(self) -> float:
        """:attr:`mono`."""
        return self.mono

    def sleep(self, seconds: float) -> None:
        """Advance :attr:`now` and :attr:`mono` by *seconds* (nothing for zero or less), at
        once."""
        if seconds > 0:
            self.now += seconds
            self.mono += seconds
            self.slept += seconds

    def step(self, seconds: float) -> None:
        """Step the wall clock by *seconds* (forward, or back when negative) and nothing
        else: no time passes, so no duration and no deadline measured by dse may move."""
        self.now += seconds
