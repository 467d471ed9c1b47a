"""The retry policy and the interruption watch (README, "When things go wrong").

:class:`RetryPolicy` says what an attempt's end means for its trial: a failure (a result
about the design, never retried), an interruption (the same trial gets a new attempt, up to
``max_interruptions``) or an ambiguous end (retried once; the same end twice is a confirmed
failure). What it remembers of one trial is an :class:`AttemptHistory`, which the trial holds
and which a resumed run rebuilds from the recorded attempts.

:class:`InterruptionWatch` sees every interruption of the campaign: too many within the window
is systematic (dispatch may pause until they leave it), and a node that interrupted
``node_threshold`` trials is avoided from then on.

Neither emits anything: the engine records events and raises alerts from what they return,
with the texts their public helpers build.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse.model._types import AttemptState, FailureClass, JobState, TrialStatus
from dse.plugins._classify import classify_end

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dse.model._types import JobStatus

CONTROLLER_LOST = "controller stopped: "
"""How the recorded reason of an attempt the controller's own death lost begins (see
:func:`controller_lost`)."""


def controller_lost(reason: str | None) -> str:
    """The recorded reason of an attempt lost to the controller's death, not the trial's: the
    backend has no evidence of its end (it never launched, or a restarted controller could not
    find it)."""
    return CONTROLLER_LOST + (reason or "the restarted controller could not find the job")


def is_controller_lost(reason: str | None) -> bool:
    """Whether a recorded attempt's *reason* says the controller's death lost it."""
    return reason is not None and reason.startswith(CONTROLLER_LOST)


LOCAL_NODE = "localhost"
"""The node every local attempt reports: one machine, so never suspect or avoided."""


def nodes_of(node: str | None) -> list[str]:
    """The nodes an end names: *node* is one name or, for an attempt that spanned nodes,
    several separated by commas (``"n1,n3"``); the local machine's is none."""
    return [n for n in (node or "").split(",") if n and n != LOCAL_NODE]


@dataclass(slots=True)
class AttemptHistory:
    """What the retry policy remembers of one trial (the trial's record holds one)."""

    interruptions: int = 0
    """Interrupted attempts so far (what ``max_interruptions`` limits)."""
    ambiguous_ends: list[tuple[int, JobState]] = field(default_factory=list)
    """(attempt number, state) of each end a backend called ambiguous."""
    failed_nodes: set[str] = field(default_factory=set)
    """Nodes an attempt of this trial ended on without success (its next attempts avoid
    them)."""

    @classmethod
    def rebuild(
        cls, attempts: Iterable[tuple[int, AttemptState, str | None, str | None]]
    ) -> AttemptHistory:
        """The history of a resumed trial from its recorded attempts, each (attempt number,
        recorded state, node, reason): every unsuccessful end but a cancellation is an
        interruption, a kill nobody here sent and a vanished job are ambiguous ends, and the
        node of every unsuccessful end (a cancellation too) has failed it. An attempt the
        controller's death lost (:func:`is_controller_lost`) is left out, as :meth:`decide`
        left it out."""
        history = cls()
        for number, state, node, reason in attempts:
            if not state.is_unsuccessful_end() or (
                state is AttemptState.LOST and is_controller_lost(reason)
            ):
                continue
            if state is not AttemptState.CANCELLED:
                history.interruptions += 1
            if state.is_ambiguous():
                history.ambiguous_ends.append((number, JobState(state.value)))
            history.failed_nodes.update(nodes_of(node))
        return history


@dataclass(frozen=True, slots=True)
class Decision:
    """What an interrupted attempt's end means for its trial."""

    retry: bool
    """Whether the trial gets a new attempt."""
    status: TrialStatus
    """``INTERRUPTED`` when retried or out of retries, ``FAILED`` when an ambiguous end is
    confirmed."""
    message: str | None
    """The trial's message from now on (unchanged when retried)."""


class RetryPolicy:
    """Classifies unsuccessful ends and decides which interrupted attempts are retried."""

    def __init__(self, max_interruptions: int) -> None:
        self.max_interruptions = max_interruptions

    def classify(
        self, status: JobStatus, *, cancel_requested: bool
    ) -> tuple[TrialStatus, FailureClass | None, str | None]:
        """Outcome, failure class and message of an end that is not ``SUCCEEDED``.

        A cancellation this campaign did not request (an operator, ``scancel``, a previous
        controller interrupted twice) is an interruption: the trial did nothing wrong. An
        attempt the controller's death lost (:func:`is_controller_lost`) is a
        ``controller_restart``: no evidence about the trial at all.
        """
        if not status.state.is_finished() or status.state is JobState.SUCCEEDED:
            msg = f"classify() takes an unsuccessful end, not {status.state.value}"
            raise ValueError(msg)
        if status.state is JobState.LOST and is_controller_lost(status.reason):
            return TrialStatus.INTERRUPTED, FailureClass.CONTROLLER_RESTART, status.reason
        if status.state is JobState.CANCELLED and not cancel_requested:
            return (
                TrialStatus.INTERRUPTED,
                FailureClass.CANCELLED_OUTSIDE,
                status.reason or "cancelled outside this campaign",
            )
        return classify_end(status)

    def decide(
        self, history: AttemptHistory, status: JobStatus, *, attempt: int,
        failure: FailureClass | None, message: str | None,
    ) -> Decision:
        """Whether attempt number *attempt*, which ended interrupted with *status*
        (classified *failure* and *message*), is retried; records the end in *history*. An
        attempt the controller's death lost is retried and recorded nowhere: it says nothing
        about the trial, its node or the infrastructure."""
        if failure is FailureClass.CONTROLLER_RESTART:
            return Decision(True, TrialStatus.INTERRUPTED, message)
        history.failed_nodes.update(nodes_of(status.node))
        if status.ambiguous:
            earlier = [a for a, state in history.ambiguous_ends if state is status.state]
            history.ambiguous_ends.append((attempt, status.state))
            if earlier:
                # The same configuration died the same way twice: a measurement, not a flake.
                return Decision(
                    False, TrialStatus.FAILED,
                    self.confirmed_message(earlier[-1], attempt, status.state, message),
                )
        history.interruptions += 1
        if history.interruptions > self.max_interruptions:
            return Decision(
                False, TrialStatus.INTERRUPTED,
                self.exhausted_message(history.interruptions, failure, message),
            )
        return Decision(True, TrialStatus.INTERRUPTED, message)

    @staticmethod
    def confirmed_message(
        earlier: int, attempt: int, state: JobState, message: str | None
    ) -> str:
        """The message of an ambiguous end confirmed by attempt *earlier* ending the same."""
        return (
            f"confirmed: attempts {earlier} and {attempt} both ended {state.value}"
            + (f" ({message})" if message else "")
        )

    def exhausted_message(
        self, interruptions: int, failure: FailureClass | None, message: str | None
    ) -> str:
        """The message of a trial interrupted more than ``max_interruptions`` times."""
        cause = message or (failure.value if failure else "interrupted")
        return (
            f"{cause}; interrupted {interruptions} times"
            f" (max_interruptions = {self.max_interruptions})"
        )


@dataclass(frozen=True, slots=True)
class Change:
    """Interruptions just became systematic, or just subsided (dispatch resumes)."""

    systematic: bool
    """``True``: the window just reached the threshold; ``False``: a pause just ended."""
    count: int
    """Interruptions in the window."""
    paused: bool
    """Whether dispatch is paused from now on."""
    window: float
    """The window's length in seconds."""

    @property
    def kind(self) -> str:
        """The kind of the event the engine records."""
        return "systematic_interruptions" if self.systematic else "dispatch_resumed"

    def data(self) -> dict[str, Any]:
        """The data of the event the engine records."""
        if self.systematic:
            return {"count": self.count, "window_s": self.window, "paused": self.paused}
        return {"count": self.count}

    @property
    def message(self) -> str:
        """The alert the console shows."""
        if self.systematic:
            return (
                f"{self.count} interruptions in the last {self.window:g}s"
                + ("; dispatch paused" if self.paused else "")
            )
        return "interruptions subsided; dispatch resumed"


class InterruptionWatch:
    """The campaign's interruptions within a sliding window, and the nodes behind them.

    :param threshold: interruptions within the window that make them systematic.
    :param window: the window's length in seconds.
    :param node_threshold: trials one node interrupts before it is suspect (avoided).
    :param pause: whether dispatch pauses while interruptions are systematic.
    """

    def __init__(self, *, threshold: int, window: float, node_threshold: int, pause: bool) -> None:
        self.threshold = threshold
        self.window = window
        self.node_threshold = node_threshold
        self.pause = pause
        self._times: deque[float] = deque()
        self._node_trials: dict[str, set[int]] = {}
        self._avoid: set[str] = set()
        self._paused = False
        self._systematic = False

    @property
    def paused(self) -> bool:
        """Whether dispatch is paused (as of the last :meth:`check`)."""
        return self._paused

    @property
    def systematic(self) -> bool:
        """Whether the window held ``threshold`` interruptions at the last :meth:`check`."""
        return self._systematic

    @property
    def avoid(self) -> frozenset[str]:
        """The suspect nodes: every attempt avoids them."""
        return frozenset(self._avoid)

    @property
    def oldest(self) -> float | None:
        """When the oldest interruption still in the window happened (``None``: none)."""
        return self._times[0] if self._times else None

    @property
    def count(self) -> int:
        """Interruptions in the window (as of the last :meth:`check` or :meth:`note`)."""
        return len(self._times)

    def node_trials(self, node: str) -> list[int]:
        """The numbers of the trials *node* interrupted, sorted."""
        return sorted(self._node_trials.get(node, ()))

    def note(self, now: float, node: str | None, trial_number: int) -> list[str]:
        """Record one interruption of trial *trial_number* on *node* (or the nodes it names,
        :func:`nodes_of`) at *now*; return the nodes that have just become suspect. Call
        :meth:`check` after."""
        self._times.append(now)
        suspect = []
        for name in nodes_of(node):
            trials = self._node_trials.setdefault(name, set())
            trials.add(trial_number)
            if len(trials) == self.node_threshold and name not in self._avoid:
                self._avoid.add(name)
                suspect.append(name)
        return suspect

    def suspect_message(self, node: str) -> str:
        """The alert for a node that has just become suspect."""
        return (
            f"node {node} interrupted {len(self._node_trials.get(node, ()))} trials;"
            " avoiding it from now on"
        )

    def check(self, now: float) -> Change | None:
        """Let interruptions older than the window leave it; return the change when they
        have just become systematic, or when a pause has just ended."""
        times = self._times
        while times and times[0] < now - self.window:
            times.popleft()
        systematic = len(times) >= self.threshold
        paused = systematic and self.pause
        was_systematic, was_paused = self._systematic, self._paused
        self._systematic, self._paused = systematic, paused
        if systematic and not was_systematic:
            return Change(True, len(times), paused, self.window)
        if was_paused and not paused:
            return Change(False, len(times), paused, self.window)
        return None
