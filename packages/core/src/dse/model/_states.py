"""How trials, attempts and campaign runs stand: the states the record keeps, as enums (and
the failure classes, and which of them a later identical proposal reuses).

Apart from :mod:`dse.model._types` (which re-exports every name here), so that the commands reading
the record import these without the dataclasses of values crossing a plugin boundary.
"""

from __future__ import annotations

import enum

__all__ = [
    "RESOLVED_SCORER",
    "REUSED_FAILURES",
    "AttemptState",
    "CampaignStatus",
    "EndReason",
    "FailureClass",
    "JobState",
    "TrialStatus",
    "reusable",
]

RESOLVED_SCORER = "scorer_resolved"
"""Key of a run's stored spec naming the scorer that ran: name, version, direction (written
by :mod:`dse.engine._spec`, read by ``dse report`` and ``dse show``)."""


class JobState(enum.Enum):
    """Raw end or progress state of one attempt, as a backend reports it.

    Backends report these; the core classifies them into trial outcomes.
    """

    PENDING = "pending"
    """Accepted by the backend, not started yet."""
    RUNNING = "running"
    """Started and not finished."""
    SUCCEEDED = "succeeded"
    """The workload exited with status 0."""
    FAILED = "failed"
    """The workload exited with a non-zero status."""
    OUT_OF_MEMORY = "out_of_memory"
    """Killed for exceeding its memory limit."""
    TIMEOUT = "timeout"
    """Killed for exceeding its time limit."""
    KILLED = "killed"
    """Ended by a signal the backend did not send (ambiguous: the sender is unknown)."""
    CANCELLED = "cancelled"
    """Cancelled through :meth:`Backend.cancel`."""
    PREEMPTED = "preempted"
    """Preempted by the scheduler for higher-priority work."""
    NODE_FAIL = "node_fail"
    """The node running it failed."""
    BOOT_FAIL = "boot_fail"
    """The node could not be booted for it."""
    LOST = "lost"
    """The backend no longer knows the job (vanished)."""
    LAUNCH_ERROR = "launch_error"
    """The backend could not start it for a reason of its own (infrastructure)."""
    INVALID = "invalid"
    """The job cannot run as specified: its command does not exist, it asks for more than
    the backend has. Caused by the trial, so it would fail the same way again."""

    def is_finished(self) -> bool:
        """``True`` for every end state."""
        return self is not JobState.PENDING and self is not JobState.RUNNING


class TrialStatus(enum.Enum):
    """Where a trial is in its life; the last six are outcomes."""

    PENDING = "pending"
    """Recorded, not submitted yet."""
    RUNNING = "running"
    """Submitted to the backend."""
    CACHED = "cached"
    """Not run: it reuses the result of an identical trial (``cache_of``)."""
    COMPLETED = "completed"
    """Ran to the end and was scored."""
    FAILED = "failed"
    """A reproducible failure: a result about the design, with a failure class."""
    INTERRUPTED = "interrupted"
    """Stopped by the infrastructure."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """Hit its own ceiling."""
    CANCELLED = "cancelled"
    """Stopped by the user."""
    STOPPED = "stopped"
    """Stopped early by the campaign's stopping rule at a rung (``[stopping]``): a result at
    a lower fidelity (its last reported metrics), not a failure; never retried, and resumed
    from its checkpoint if the rule promotes it later."""

    def is_finished(self) -> bool:
        """``True`` once the trial has ended (anything but ``pending`` and ``running``)."""
        return self is not TrialStatus.PENDING and self is not TrialStatus.RUNNING

    def is_reusable(self) -> bool:
        """Whether a trial ending so may have a result a later identical proposal reuses
        (completed, stopped at a rung, or failed for a reason about the design: see
        :func:`reusable`)."""
        return self in (TrialStatus.COMPLETED, TrialStatus.FAILED, TrialStatus.STOPPED)


class AttemptState(enum.Enum):
    """Where one attempt is, as the record keeps it: the controller's own steps before a
    backend has the job (``queued``, ``submitting``, ``submitted``), then the backend's raw
    :class:`JobState`, whose values it shares."""

    QUEUED = "queued"
    """Recorded and waiting for the pool's resources; nothing was submitted."""
    SUBMITTING = "submitting"
    """Granted: about to be submitted (intent first, so a restart looks for the job)."""
    SUBMITTED = "submitted"
    """Submitted; the backend has not reported on it yet."""
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    OUT_OF_MEMORY = "out_of_memory"
    TIMEOUT = "timeout"
    KILLED = "killed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    NODE_FAIL = "node_fail"
    BOOT_FAIL = "boot_fail"
    LOST = "lost"
    LAUNCH_ERROR = "launch_error"
    INVALID = "invalid"

    @classmethod
    def of(cls, state: JobState) -> AttemptState:
        """The record's state for a backend's raw *state*."""
        return _OF_JOB_STATE[state]

    def is_finished(self) -> bool:
        """``True`` once the attempt has ended (every raw end state)."""
        return self not in _UNFINISHED_ATTEMPT

    def is_submitted(self) -> bool:
        """Whether a backend may have the job (submitting, submitted, pending, running)."""
        return self in _SUBMITTED_ATTEMPT

    def is_unsuccessful_end(self) -> bool:
        """An end other than success (what a trial's interruption count and the nodes it
        avoids are rebuilt from)."""
        return self.is_finished() and self is not AttemptState.SUCCEEDED

    def is_ambiguous(self) -> bool:
        """An end a backend calls ambiguous (a kill nobody here sent, a vanished job)."""
        return self is AttemptState.KILLED or self is AttemptState.LOST


_OF_JOB_STATE = {state: AttemptState(state.value) for state in JobState}
"""Built once: an enum looked up by value on every attempt costs more than the lookup."""

_UNFINISHED_ATTEMPT = frozenset({
    AttemptState.QUEUED, AttemptState.SUBMITTING, AttemptState.SUBMITTED,
    AttemptState.PENDING, AttemptState.RUNNING,
})
_SUBMITTED_ATTEMPT = frozenset({
    AttemptState.SUBMITTING, AttemptState.SUBMITTED, AttemptState.PENDING,
    AttemptState.RUNNING,
})


class CampaignStatus(enum.StrEnum):
    """How a campaign run stands (``campaigns.status``); a ``str``, so it compares equal to
    the text the record and ``--json`` output carry."""

    RUNNING = "running"
    """Not ended (or its controller died: ``dse run`` continues it)."""
    COMPLETED = "completed"
    """Ended normally: the agent was exhausted, or ``max_trials`` was reached."""
    STOPPED = "stopped"
    """Ended early by a rule: too many rejections in a row, a failed baseline."""
    CANCELLED = "cancelled"
    """Stopped by the user (Ctrl+C, SIGTERM); ``dse run`` continues it."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """A ceiling of ``[budget]`` was reached: a normal end."""
    FAILED = "failed"
    """The controller hit an internal error."""

    def is_finished(self) -> bool:
        """``True`` once the run has ended (anything but ``running``)."""
        return self is not CampaignStatus.RUNNING


class EndReason(enum.StrEnum):
    """Why a campaign run ended (``campaigns.end_reason``); each implies a status."""

    AGENT_EXHAUSTED = "agent_exhausted"
    """The agent had nothing more to propose."""
    MAX_TRIALS = "max_trials"
    """``max_trials`` steps were taken."""
    POPULATION = "population"
    """Population-based training (``rule = "pbt"``): the agent gave the whole population and
    every lineage ran to its end."""
    AGENT_STALLED = "agent_stalled"
    """The agent proposed nothing while nothing ran and nothing was left to tell it."""
    MAX_CONSECUTIVE_REJECTIONS = "max_consecutive_rejections"
    """That many proposals in a row were rejected."""
    MAX_CONSECUTIVE_FAILURES = "max_consecutive_failures"
    """That many trials in a row failed the same way while none had completed
    (``[campaign] max_consecutive_failures``): the setup, not the design, is at fault."""
    CANCELLED = "cancelled"
    """The user stopped it."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """Nothing more fits a ceiling of ``[budget]``."""
    BASELINE_FAILED = "baseline_failed"
    """The baseline run ended without a result: nothing can be compared against it."""
    SUPERSEDED = "superseded"
    """Its controller died, and the campaign was run again changed (or with ``--fresh``): the
    new run closed it first — its running trials finished and were recorded in it, nothing
    new started — then began."""
    ERROR = "error"
    """The controller raised (the record says ``error: <exception type>``)."""

    @property
    def status(self) -> CampaignStatus:
        """The campaign status this reason ends a run with."""
        return _END_STATUS[self]

    def text(self, detail: str | None = None) -> str:
        """What the record keeps: the reason, with its *detail* (an error's type)."""
        return f"{self.value}: {detail}" if detail else self.value


_END_STATUS = {
    EndReason.AGENT_EXHAUSTED: CampaignStatus.COMPLETED,
    EndReason.MAX_TRIALS: CampaignStatus.COMPLETED,
    EndReason.POPULATION: CampaignStatus.COMPLETED,
    EndReason.AGENT_STALLED: CampaignStatus.COMPLETED,
    EndReason.MAX_CONSECUTIVE_REJECTIONS: CampaignStatus.STOPPED,
    EndReason.MAX_CONSECUTIVE_FAILURES: CampaignStatus.STOPPED,
    EndReason.CANCELLED: CampaignStatus.CANCELLED,
    EndReason.BUDGET_EXHAUSTED: CampaignStatus.BUDGET_EXHAUSTED,
    EndReason.BASELINE_FAILED: CampaignStatus.STOPPED,
    EndReason.SUPERSEDED: CampaignStatus.STOPPED,
    EndReason.ERROR: CampaignStatus.FAILED,
}


class FailureClass(enum.Enum):
    """Why a trial failed (reproducibly) or was interrupted."""

    NONZERO_EXIT = "nonzero_exit"
    OUT_OF_MEMORY = "out_of_memory"
    TIME_LIMIT = "time_limit"
    KILLED = "killed"
    NO_RESULT = "no_result"
    """The attempt exited 0 but wrote no result file."""
    MALFORMED_RESULT = "malformed_result"
    """The result file is truncated, not JSON, or not a JSON object."""
    RESULT_SYMLINK = "result_symlink"
    """The result file (or the trial directory) is a symlink: dse follows none, so a trial
    cannot hand in a file from outside its directory (another trial's result, say)."""
    RESULT_NOT_REGULAR = "result_not_regular"
    """The result file is not a regular file (a FIFO, a device, a socket, a directory):
    dse refuses it without reading, so nothing a trial leaves can block the controller."""
    RESULT_TOO_LARGE = "result_too_large"
    """The result file is larger than dse reads (16 MiB, ``MAX_TRIAL_FILE_BYTES``)."""
    STALE_RESULT = "stale_result"
    """The result file was last written before its attempt started (beyond a few seconds of
    clock skew): an earlier attempt or run left it, so it is never scored. Not a measurement
    of the design (the attempt wrote none): a later identical proposal runs again."""
    INCOMPLETE_OUTPUT = "incomplete_output"
    """The result is not marked complete."""
    MISSING_METRIC = "missing_metric"
    INVALID_METRIC = "invalid_metric"
    SCORER_ERROR = "scorer_error"
    """The scorer could not score the complete run (it raised, or gave no finite number)."""
    PREPARE_ERROR = "prepare_error"
    INVALID_JOB = "invalid_job"
    """The backend refused the job as specified (a launch error caused by the trial)."""
    LAUNCH_ERROR = "launch_error"
    """The backend failed to start the job (a launch error caused by the infrastructure)."""
    PREEMPTED = "preempted"
    NODE_FAILURE = "node_failure"
    BOOT_FAILURE = "boot_failure"
    JOB_VANISHED = "job_vanished"
    CONTROLLER_RESTART = "controller_restart"
    CANCELLED_OUTSIDE = "cancelled_outside"
    """Cancelled by someone other than this campaign (an operator, ``scancel``)."""


INTERRUPTIONS: frozenset[JobState] = frozenset({
    JobState.KILLED, JobState.PREEMPTED, JobState.NODE_FAIL, JobState.BOOT_FAIL, JobState.LOST,
    JobState.LAUNCH_ERROR,
})
"""The raw end states that interrupt an attempt rather than say anything about the design
(killed by an unknown sender, preempted, node failure, boot failure, vanished, launch error):
the trial is retried, from its checkpoint when it has one (``dse.plugins._classify`` maps each to
the
outcome ``interrupted``)."""


REUSED_FAILURES: frozenset[FailureClass] = frozenset({
    FailureClass.NONZERO_EXIT, FailureClass.OUT_OF_MEMORY, FailureClass.NO_RESULT,
    FailureClass.MALFORMED_RESULT, FailureClass.INCOMPLETE_OUTPUT, FailureClass.MISSING_METRIC,
    FailureClass.INVALID_METRIC, FailureClass.RESULT_SYMLINK, FailureClass.RESULT_NOT_REGULAR,
    FailureClass.RESULT_TOO_LARGE,
})
"""The failures that are measurements of the design under its identity (params, code, data,
command, environment, resources, backend and placement): the same trial would fail the same
way, so a later identical proposal reuses them. Every other class is about the setup or the
infrastructure (unsatisfiable resources, a launch or a scorer error, a lost, vanished,
preempted or killed job, a cancellation, a time limit the campaign chose) and is run again.
``docs/record.md`` has the table."""


def reusable(status: TrialStatus, failure: FailureClass | None) -> bool:
    """Whether a trial that ended *status* with *failure* has a result a later identical
    proposal may reuse: completed, stopped by the stopping rule (its result at its rung: the
    reuse is told to the agent as that low-fidelity observation), or failed for a reason in
    :data:`REUSED_FAILURES`."""
    if status is TrialStatus.COMPLETED or status is TrialStatus.STOPPED:
        return True
    return status is TrialStatus.FAILED and failure in REUSED_FAILURES
