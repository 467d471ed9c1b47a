"""TEMPORARY shim of the retry policy (replaced by the tested module on merge)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dse._classify import classify_end
from dse._types import AttemptState, FailureClass, JobState, JobStatus, TrialStatus

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(slots=True)
class AttemptHistory:
    interruptions: int = 0
    ambiguous_ends: list[tuple[int, JobState]] = field(default_factory=list)
    failed_nodes: set[str] = field(default_factory=set)

    @classmethod
    def rebuild(cls, attempts: Iterable[tuple[int, AttemptState, str | None]]) -> AttemptHistory:
        history = cls()
        for number, state, node in attempts:
            if state.is_unsuccessful_end() and state is not AttemptState.CANCELLED:
                history.interruptions += 1
            if state.is_ambiguous():
                history.ambiguous_ends.append((number, JobState(state.value)))
            if node and node != "localhost" and state.is_unsuccessful_end():
                history.failed_nodes.add(node)
        return history


@dataclass(frozen=True, slots=True)
class Decision:
    retry: bool
    status: TrialStatus
    message: str | None


class RetryPolicy:
    def __init__(self, max_interruptions: int) -> None:
        self.max_interruptions = max_interruptions

    def classify(
        self, status: JobStatus, *, cancel_requested: bool
    ) -> tuple[TrialStatus, FailureClass | None, str | None]:
        outcome, failure, message = classify_end(status)
        if status.state is JobState.CANCELLED and not cancel_requested:
            return (TrialStatus.INTERRUPTED, FailureClass.CANCELLED_OUTSIDE,
                    status.reason or "cancelled outside this campaign")
        return outcome, failure, message

    def decide(
        self, history: AttemptHistory, status: JobStatus, *, attempt: int,
        failure: FailureClass | None, message: str | None,
    ) -> Decision:
        if status.node and status.node != "localhost":
            history.failed_nodes.add(status.node)
        if status.ambiguous:
            earlier = [a for a, state in history.ambiguous_ends if state is status.state]
            history.ambiguous_ends.append((attempt, status.state))
            if earlier:
                return Decision(False, TrialStatus.FAILED, (
                    f"confirmed: attempts {earlier[-1]} and {attempt} both ended"
                    f" {status.state.value}" + (f" ({message})" if message else "")
                ))
        history.interruptions += 1
        if history.interruptions > self.max_interruptions:
            cause = message or (failure.value if failure else "interrupted")
            return Decision(False, TrialStatus.INTERRUPTED, (
                f"{cause}; interrupted {history.interruptions} times"
                f" (max_interruptions = {self.max_interruptions})"
            ))
        return Decision(True, TrialStatus.INTERRUPTED, message)


@dataclass(frozen=True, slots=True)
class Change:
    systematic: bool
    count: int
    paused: bool


class InterruptionWatch:
    def __init__(self, *, threshold: int, window: float, node_threshold: int,
                 pause: bool) -> None:
        self.threshold, self.window = threshold, window
        self.node_threshold, self.pause = node_threshold, pause
        self._window: deque[tuple[float, str | None]] = deque()
        self._node_trials: dict[str, set[int]] = {}
        self._avoid: set[str] = set()
        self.paused = False
        self.systematic = False

    @property
    def avoid(self) -> frozenset[str]:
        return frozenset(self._avoid)

    @property
    def oldest(self) -> float | None:
        return self._window[0][0] if self._window else None

    @property
    def count(self) -> int:
        return len(self._window)

    def node_trials(self, node: str) -> list[int]:
        return sorted(self._node_trials.get(node, ()))

    def note(self, now: float, node: str | None, trial_number: int) -> str | None:
        self._window.append((now, node))
        if node and node != "localhost":
            trials = self._node_trials.setdefault(node, set())
            trials.add(trial_number)
            if len(trials) == self.node_threshold and node not in self._avoid:
                self._avoid.add(node)
                return node
        return None

    def check(self, now: float) -> Change | None:
        window = self._window
        while window and window[0][0] < now - self.window:
            window.popleft()
        systematic = len(window) >= self.threshold
        paused = systematic and self.pause
        was_systematic, self.systematic = self.systematic, systematic
        was_paused, self.paused = self.paused, paused
        if systematic and not was_systematic:
            return Change(True, len(window), paused)
        if was_paused and not paused:
            return Change(False, len(window), False)
        return None
