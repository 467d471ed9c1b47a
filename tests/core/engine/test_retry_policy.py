"""The retry policy and the interruption watch on their own: every end state against every
kind of attempt history, and the window of interruptions in virtual time. No engine, no store."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dse.engine._retry import (
    AttemptHistory,
    Change,
    Decision,
    InterruptionWatch,
    RetryPolicy,
    controller_lost,
)
from dse.model._types import AttemptState, FailureClass, JobState, JobStatus, TrialStatus

MAX = 3

END_STATES = [state for state in JobState if state.is_finished()]

AMBIGUOUS = {JobState.KILLED, JobState.LOST}
"""The ends backends report as ambiguous (a kill nobody here sent, a vanished job)."""

CLASSIFIED: dict[JobState, tuple[TrialStatus, FailureClass | None, str | None]] = {
    JobState.FAILED: (TrialStatus.FAILED, FailureClass.NONZERO_EXIT, "exit code 1"),
    JobState.OUT_OF_MEMORY: (TrialStatus.FAILED, FailureClass.OUT_OF_MEMORY, None),
    JobState.TIMEOUT: (TrialStatus.BUDGET_EXHAUSTED, FailureClass.TIME_LIMIT, None),
    JobState.KILLED: (TrialStatus.INTERRUPTED, FailureClass.KILLED, "killed by signal 9"),
    JobState.CANCELLED: (TrialStatus.CANCELLED, None, None),
    JobState.PREEMPTED: (TrialStatus.INTERRUPTED, FailureClass.PREEMPTED, None),
    JobState.NODE_FAIL: (TrialStatus.INTERRUPTED, FailureClass.NODE_FAILURE, None),
    JobState.BOOT_FAIL: (TrialStatus.INTERRUPTED, FailureClass.BOOT_FAILURE, None),
    JobState.LOST: (TrialStatus.INTERRUPTED, FailureClass.JOB_VANISHED, None),
    JobState.LAUNCH_ERROR: (TrialStatus.INTERRUPTED, FailureClass.LAUNCH_ERROR, None),
    JobState.INVALID: (TrialStatus.FAILED, FailureClass.INVALID_JOB, None),
}
"""What each unsuccessful end is, as :func:`status_of` reports it, when this campaign asked
for the cancellation."""

CANCELLED_OUTSIDE = (
    TrialStatus.INTERRUPTED, FailureClass.CANCELLED_OUTSIDE, "cancelled outside this campaign"
)


def status_of(state: JobState, node: str | None = "n2") -> JobStatus:
    """An end as a backend reports it: a failure exits 1, a kill is signal 9."""
    return JobStatus(
        "job-1", state,
        exit_code=1 if state is JobState.FAILED else None,
        signal=9 if state is JobState.KILLED else None,
        node=node, ambiguous=state in AMBIGUOUS,
    )


class Outcome(NamedTuple):
    retry: bool
    status: TrialStatus
    failure: FailureClass | None
    message: str | None
    history: AttemptHistory


class Case(NamedTuple):
    """An attempt history, the attempt that ends now and where, and what the end makes of
    the history when the trial was interrupted."""

    history: Callable[[], AttemptHistory]
    attempt: int
    node: str | None
    expect: Callable[
        [JobState, FailureClass | None, str | None], tuple[bool, TrialStatus, str | None]
    ]
    """(end state, its class, its message) -> (retried, status, message)."""
    after: Callable[[JobState], AttemptHistory]
    """The history after an interrupted end in this state."""


Expected = tuple[bool, TrialStatus, str | None]


def retried(state: JobState, failure: FailureClass | None, message: str | None) -> Expected:
    return True, TrialStatus.INTERRUPTED, message


def confirmed_if_same(
    state: JobState, failure: FailureClass | None, message: str | None
) -> Expected:
    if state is not JobState.KILLED:
        return True, TrialStatus.INTERRUPTED, message
    return (
        False, TrialStatus.FAILED,
        f"confirmed: attempts 1 and 2 both ended killed ({message})",
    )


def out_of_retries(
    state: JobState, failure: FailureClass | None, message: str | None
) -> Expected:
    assert failure is not None
    cause = message or failure.value
    return (
        False, TrialStatus.INTERRUPTED,
        f"{cause}; interrupted {MAX + 1} times (max_interruptions = {MAX})",
    )


def ambiguous(state: JobState, attempt: int) -> list[tuple[int, JobState]]:
    return [(attempt, state)] if state in AMBIGUOUS else []


CASES = {
    "fresh": Case(
        AttemptHistory, 1, "n2", retried,
        lambda s: AttemptHistory(1, ambiguous(s, 1), {"n2"}),
    ),
    "one earlier interruption": Case(
        lambda: AttemptHistory(1, [], {"n1"}), 2, "n1", retried,
        lambda s: AttemptHistory(2, ambiguous(s, 2), {"n1"}),
    ),
    "an earlier ambiguous end of the same kind": Case(
        lambda: AttemptHistory(1, [(1, JobState.KILLED)], set()), 2, None, confirmed_if_same,
        lambda s: AttemptHistory(
            1 if s is JobState.KILLED else 2, [(1, JobState.KILLED), *ambiguous(s, 2)], set()
        ),
    ),
    "an earlier ambiguous end of another kind": Case(
        lambda: AttemptHistory(1, [(1, JobState.PREEMPTED)], set()), 2, None, retried,
        lambda s: AttemptHistory(2, [(1, JobState.PREEMPTED), *ambiguous(s, 2)], set()),
    ),
    "at the max_interruptions limit": Case(
        lambda: AttemptHistory(MAX, [], set()), MAX + 1, None, out_of_retries,
        lambda s: AttemptHistory(MAX + 1, ambiguous(s, MAX + 1), set()),
    ),
    "failed nodes": Case(
        lambda: AttemptHistory(2, [], {"n1", "n3"}), 3, "n2", retried,
        lambda s: AttemptHistory(3, ambiguous(s, 3), {"n1", "n2", "n3"}),
    ),
    "localhost": Case(
        AttemptHistory, 1, "localhost", retried,
        lambda s: AttemptHistory(1, ambiguous(s, 1), set()),
    ),
}


def end(policy: RetryPolicy, case: Case, state: JobState, *, cancel_requested: bool) -> Outcome:
    """What the engine does with an end that is not a success: classify, and decide when
    the trial was interrupted."""
    history, status = case.history(), status_of(state, case.node)
    outcome, failure, message = policy.classify(status, cancel_requested=cancel_requested)
    if outcome is not TrialStatus.INTERRUPTED:
        return Outcome(False, outcome, failure, message, history)
    decision = policy.decide(
        history, status, attempt=case.attempt, failure=failure, message=message
    )
    return Outcome(decision.retry, decision.status, failure, decision.message, history)


@pytest.mark.parametrize("cancel_requested", [False, True], ids=["cancelled outside", "asked"])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("state", END_STATES, ids=[s.value for s in END_STATES])
def test_every_end_against_every_attempt_history(
    state: JobState, case: Case, cancel_requested: bool
) -> None:
    policy = RetryPolicy(MAX)
    if state is JobState.SUCCEEDED:
        # A success is the environment's to evaluate, never the policy's.
        with pytest.raises(ValueError, match="not succeeded"):
            end(policy, case, state, cancel_requested=cancel_requested)
        return
    got = end(policy, case, state, cancel_requested=cancel_requested)
    outcome, failure, message = CLASSIFIED[state]
    if state is JobState.CANCELLED and not cancel_requested:
        outcome, failure, message = CANCELLED_OUTSIDE
    if outcome is not TrialStatus.INTERRUPTED:
        # A result about the design (or the user's cancel): never retried, history untouched.
        assert got == Outcome(False, outcome, failure, message, case.history())
        return
    retry, status, message = case.expect(state, failure, message)
    assert got == Outcome(retry, status, failure, message, case.after(state))


def test_a_cancellation_outside_keeps_the_backends_reason() -> None:
    status = JobStatus("7", JobState.CANCELLED, reason="cancelled by an operator")
    assert RetryPolicy(MAX).classify(status, cancel_requested=False) == (
        TrialStatus.INTERRUPTED, FailureClass.CANCELLED_OUTSIDE, "cancelled by an operator"
    )


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.RUNNING])
def test_an_unfinished_state_is_not_classified(state: JobState) -> None:
    with pytest.raises(ValueError, match=state.value):
        RetryPolicy(MAX).classify(JobStatus("7", state), cancel_requested=False)


def test_an_ambiguous_launch_error_twice_is_confirmed_with_its_reason() -> None:
    policy, history = RetryPolicy(MAX), AttemptHistory()
    status = JobStatus("7", JobState.LAUNCH_ERROR, reason="pilot died", ambiguous=True)
    first = policy.decide(
        history, status, attempt=1, failure=FailureClass.LAUNCH_ERROR, message="pilot died"
    )
    second = policy.decide(
        history, status, attempt=2, failure=FailureClass.LAUNCH_ERROR, message="pilot died"
    )
    assert first == Decision(True, TrialStatus.INTERRUPTED, "pilot died")
    assert second == Decision(
        False, TrialStatus.FAILED,
        "confirmed: attempts 1 and 2 both ended launch_error (pilot died)",
    )


def test_out_of_retries_without_a_message_names_the_class_or_says_interrupted() -> None:
    policy = RetryPolicy(0)
    preempted = JobStatus("7", JobState.PREEMPTED)
    assert policy.decide(
        AttemptHistory(), preempted, attempt=1, failure=FailureClass.PREEMPTED, message=None
    ).message == "preempted; interrupted 1 times (max_interruptions = 0)"
    assert policy.decide(
        AttemptHistory(), preempted, attempt=1, failure=None, message=None
    ).message == "interrupted; interrupted 1 times (max_interruptions = 0)"


# -- a resumed trial's history --------------------------------------------------------------

A = AttemptState

REBUILT = {
    "nothing ended yet": (
        [(1, A.QUEUED, None)], AttemptHistory(),
    ),
    "submitted and running attempts count for nothing": (
        [(1, A.SUBMITTING, "n1"), (2, A.SUBMITTED, "n1"), (3, A.PENDING, "n1"),
         (4, A.RUNNING, "n1")],
        AttemptHistory(),
    ),
    "a success counts for nothing": ([(1, A.SUCCEEDED, "n1")], AttemptHistory()),
    "interruptions on nodes": (
        [(1, A.PREEMPTED, "n1"), (2, A.NODE_FAIL, "n2"), (3, A.RUNNING, "n3")],
        AttemptHistory(2, [], {"n1", "n2"}),
    ),
    "ambiguous ends": (
        [(1, A.KILLED, None), (2, A.LOST, "n1"), (3, A.QUEUED, None)],
        AttemptHistory(2, [(1, JobState.KILLED), (2, JobState.LOST)], {"n1"}),
    ),
    "a cancellation is no interruption but its node failed the trial": (
        [(1, A.CANCELLED, "n1"), (2, A.RUNNING, None)],
        AttemptHistory(0, [], {"n1"}),
    ),
    "an attempt the controller's death lost counts for nothing": (
        [(1, A.LOST, "n1", controller_lost(None)), (2, A.LOST, "n1", "job vanished")],
        AttemptHistory(1, [(2, JobState.LOST)], {"n1"}),
    ),
    "localhost is never a node": (
        [(1, A.PREEMPTED, "localhost"), (2, A.LAUNCH_ERROR, ""), (3, A.RUNNING, "localhost")],
        AttemptHistory(2, [], set()),
    ),
    "every unsuccessful end counts": (
        [(1, A.BOOT_FAIL, "n1"), (2, A.LAUNCH_ERROR, None), (3, A.FAILED, "n2"),
         (4, A.OUT_OF_MEMORY, None), (5, A.TIMEOUT, None), (6, A.INVALID, None)],
        AttemptHistory(6, [], {"n1", "n2"}),
    ),
}


@pytest.mark.parametrize(("attempts", "history"), REBUILT.values(), ids=REBUILT.keys())
def test_a_resumed_trials_history_is_rebuilt_from_its_attempts(
    attempts: list[tuple[Any, ...]], history: AttemptHistory
) -> None:
    recorded = [(*a, None)[:4] for a in attempts]  # (number, state, node, reason)
    assert AttemptHistory.rebuild(recorded) == history
    assert AttemptHistory.rebuild(iter(recorded)) == history


RETRIED_ENDS = st.sampled_from([
    JobState.KILLED, JobState.PREEMPTED, JobState.NODE_FAIL, JobState.BOOT_FAIL, JobState.LOST,
    JobState.LAUNCH_ERROR,
])


@given(st.lists(st.tuples(RETRIED_ENDS, st.sampled_from([None, "localhost", "n1", "n2"]),
                          st.booleans())))
def test_a_rebuilt_history_is_the_one_the_policy_kept_while_it_retried(
    ends: list[tuple[JobState, str | None, bool]],
) -> None:
    policy, live = RetryPolicy(len(ends)), AttemptHistory()
    recorded: list[tuple[int, AttemptState, str | None, str | None]] = []
    for attempt, (state, node, controller_died) in enumerate(ends, 1):
        status = status_of(state, node)
        if state is JobState.LOST and controller_died:  # lost to the controller's death
            status = dataclasses.replace(status, reason=controller_lost(None), ambiguous=False)
        _, failure, message = policy.classify(status, cancel_requested=False)
        decision = policy.decide(live, status, attempt=attempt, failure=failure, message=message)
        recorded.append((attempt, AttemptState.of(state), node, status.reason))
        if not decision.retry:
            return  # confirmed: the trial has ended, nothing is resumed
        assert AttemptHistory.rebuild(recorded) == live


# -- the interruption watch -----------------------------------------------------------------


def watch(*, threshold: int = 3, window: float = 60.0, node_threshold: int = 2,
          pause: bool = True) -> InterruptionWatch:
    return InterruptionWatch(
        threshold=threshold, window=window, node_threshold=node_threshold, pause=pause
    )


def interrupt(w: InterruptionWatch, now: float, node: str | None = None,
              trial: int = 1) -> Change | None:
    """One interruption, noted and checked as the engine does."""
    w.note(now, node, trial)
    return w.check(now)


def test_interruptions_become_systematic_at_the_threshold_and_pause_dispatch() -> None:
    w = watch()
    assert interrupt(w, 0.0) is None
    assert interrupt(w, 10.0) is None
    assert (w.count, w.systematic, w.paused) == (2, False, False)
    change = interrupt(w, 20.0)
    assert change == Change(systematic=True, count=3, paused=True, window=60.0)
    assert change.kind == "systematic_interruptions"
    assert change.data() == {"count": 3, "window_s": 60.0, "paused": True}
    assert change.message == "3 interruptions in the last 60s; dispatch paused"
    assert (w.systematic, w.paused) == (True, True)
    # Said once: more interruptions while systematic change nothing.
    assert interrupt(w, 30.0) is None
    assert w.count == 4


def test_without_pause_interruptions_are_systematic_but_dispatch_goes_on() -> None:
    w = watch(pause=False)
    for now in (0.0, 1.0):
        interrupt(w, now)
    change = interrupt(w, 2.0)
    assert change == Change(True, 3, False, 60.0)
    assert change.message == "3 interruptions in the last 60s"
    assert not w.paused
    # Nothing was paused, so nothing resumes when they leave the window.
    assert w.check(1000.0) is None
    assert (w.systematic, w.paused, w.count) == (False, False, 0)


def test_interruptions_leave_the_window_once_older_than_it() -> None:
    w = watch(threshold=10)
    for now in (0.0, 10.0, 20.0):
        interrupt(w, now)
    assert w.oldest == 0.0
    assert w.check(60.0) is None
    assert (w.count, w.oldest) == (3, 0.0)  # exactly the window's age: still in it
    w.check(60.5)
    assert (w.count, w.oldest) == (2, 10.0)
    w.check(81.0)
    assert w.count == 0
    assert w.oldest is None


def test_interruptions_subside_once_fewer_than_the_threshold_remain() -> None:
    w = watch(threshold=2, window=30.0)
    interrupt(w, 0.0)
    interrupt(w, 20.0)
    assert w.paused
    change = w.check(31.0)
    assert change == Change(False, 1, False, 30.0)
    assert change.kind == "dispatch_resumed"
    assert change.data() == {"count": 1}
    assert change.message == "interruptions subsided; dispatch resumed"
    assert w.check(32.0) is None  # said once
    assert (w.systematic, w.paused) == (False, False)
    # And they may pile up again.
    assert interrupt(w, 40.0) == Change(True, 2, True, 30.0)
    assert w.paused


def test_a_node_that_interrupts_enough_trials_becomes_suspect_once() -> None:
    w = watch(threshold=100, node_threshold=2)
    assert w.note(0.0, "n1", 1) == []
    assert w.note(1.0, "n1", 1) == []  # the same trial again: still one trial
    assert w.note(2.0, "n2", 2) == []
    assert w.avoid == frozenset()
    assert w.note(3.0, "n1", 2) == ["n1"]
    assert w.avoid == frozenset({"n1"})
    assert w.node_trials("n1") == [1, 2]
    assert w.suspect_message("n1") == "node n1 interrupted 2 trials; avoiding it from now on"
    assert w.note(4.0, "n1", 3) == []  # already suspect
    assert w.node_trials("n1") == [1, 2, 3]
    assert w.node_trials("n9") == []
    assert w.count == 5


def test_an_end_blaming_several_nodes_counts_against_each() -> None:
    """A trial that spanned nodes may end naming several (``"n2,n3"``): each node is counted
    (and avoided) by its own name, never the list as one name."""
    w = watch(threshold=100, node_threshold=2)
    assert w.note(0.0, "n2,n3", 1) == []
    assert w.note(1.0, "n3", 2) == ["n3"]
    assert w.note(2.0, "n1,n2", 3) == ["n2"]
    assert w.avoid == frozenset({"n2", "n3"})
    assert (w.node_trials("n2"), w.node_trials("n2,n3")) == ([1, 3], [])
    history = AttemptHistory.rebuild([(1, AttemptState.NODE_FAIL, "n2,n3", "node down")])
    assert history.failed_nodes == {"n2", "n3"}


def test_localhost_and_unknown_nodes_count_in_the_window_but_are_never_suspect() -> None:
    w = watch(threshold=100, node_threshold=1)
    assert w.note(0.0, "localhost", 1) == []
    assert w.note(0.0, None, 2) == []
    assert w.note(0.0, "", 3) == []
    assert (w.count, w.avoid, w.node_trials("localhost")) == (3, frozenset(), [])


def test_values_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Decision(True, TrialStatus.INTERRUPTED, None).retry = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Change(True, 1, True, 1.0).count = 2  # type: ignore[misc]


def test_an_attempt_the_controllers_death_lost_is_retried_and_remembered_nowhere() -> None:
    policy = RetryPolicy(max_interruptions=1)
    history = AttemptHistory(interruptions=1, ambiguous_ends=[(1, JobState.LOST)])
    reason = controller_lost("the job id was not recorded before the controller stopped")
    lost = dataclasses.replace(status_of(JobState.LOST), reason=reason, ambiguous=False)
    status, failure, message = policy.classify(lost, cancel_requested=False)
    assert (status, failure, message) == (
        TrialStatus.INTERRUPTED, FailureClass.CONTROLLER_RESTART, reason)
    for attempt in (2, 3, 4):  # lost to the controller again and again: never confirmed
        decision = policy.decide(history, lost, attempt=attempt, failure=failure,
                                 message=message)
        assert decision == Decision(True, TrialStatus.INTERRUPTED, reason)
    assert history == AttemptHistory(interruptions=1, ambiguous_ends=[(1, JobState.LOST)])
    # The same end with evidence of the job vanishing (no controller death) still counts.
    vanished = policy.decide(history, status_of(JobState.LOST), attempt=5,
                             failure=FailureClass.JOB_VANISHED, message=None)
    assert vanished.status is TrialStatus.FAILED


def test_the_interruptions_the_record_counts_are_the_states_classified_interrupted() -> None:
    """`dse report` and `dse export` count an attempt as interrupted by its raw state
    (dse.model._states.INTERRUPTIONS): exactly the states the classification retries as
    interruptions."""
    from dse.model._states import INTERRUPTIONS
    from dse.plugins._classify import classify_end

    interrupted = {state for state in JobState if state.is_finished()
                   and state is not JobState.SUCCEEDED
                   and classify_end(JobStatus("j", state))[0] is TrialStatus.INTERRUPTED}
    assert interrupted == set(INTERRUPTIONS)
