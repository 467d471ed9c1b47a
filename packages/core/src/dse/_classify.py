"""From a backend's raw end state to a trial outcome (DESIGN.md, "Outcome")."""

from __future__ import annotations

from dse._types import FailureClass, JobState, JobStatus, TrialStatus

_RAW: dict[JobState, tuple[TrialStatus, FailureClass | None]] = {
    JobState.FAILED: (TrialStatus.FAILED, FailureClass.NONZERO_EXIT),
    JobState.OUT_OF_MEMORY: (TrialStatus.FAILED, FailureClass.OUT_OF_MEMORY),
    JobState.TIMEOUT: (TrialStatus.BUDGET_EXHAUSTED, FailureClass.TIME_LIMIT),
    JobState.KILLED: (TrialStatus.INTERRUPTED, FailureClass.KILLED),
    JobState.CANCELLED: (TrialStatus.CANCELLED, None),
    JobState.PREEMPTED: (TrialStatus.INTERRUPTED, FailureClass.PREEMPTED),
    JobState.NODE_FAIL: (TrialStatus.INTERRUPTED, FailureClass.NODE_FAILURE),
    JobState.BOOT_FAIL: (TrialStatus.INTERRUPTED, FailureClass.BOOT_FAILURE),
    JobState.LOST: (TrialStatus.INTERRUPTED, FailureClass.JOB_VANISHED),
    JobState.LAUNCH_ERROR: (TrialStatus.INTERRUPTED, FailureClass.LAUNCH_ERROR),
    JobState.INVALID: (TrialStatus.FAILED, FailureClass.INVALID_JOB),
}


def classify_end(status: JobStatus) -> tuple[TrialStatus, FailureClass | None, str | None]:
    """Outcome of an attempt that did **not** succeed, with its class and a message.

    A successful exit is not classified here: the environment evaluates its result.
    """
    outcome, failure = _RAW[status.state]
    message = status.reason
    if status.state is JobState.FAILED and message is None:
        message = f"exit code {status.exit_code}"
    elif status.state is JobState.KILLED and message is None and status.signal is not None:
        message = f"killed by signal {status.signal}"
    return outcome, failure, message
