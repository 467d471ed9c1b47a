"""Values that cross a boundary between dse and its plugins: frozen, slotted, documented."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

RESOLVED_SCORER = "scorer_resolved"
"""Key of a run's stored spec naming the scorer that ran: name, version, direction (written
by :mod:`dse._spec`, read by ``dse report`` and ``dse show``)."""


class Direction(enum.Enum):
    """Whether an objective metric is better low or high."""

    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"

    def better(self, a: float, b: float) -> bool:
        """``True`` when *a* is strictly better than *b*."""
        return a < b if self is Direction.MINIMIZE else a > b


@dataclass(frozen=True, slots=True)
class Objective:
    """One metric the campaign optimises."""

    metric: str
    """Name of the metric in the trial's result."""
    direction: Direction = Direction.MINIMIZE
    """Which way is better."""


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


@dataclass(frozen=True, slots=True)
class Resources:
    """What one attempt needs: *nodes* nodes, each running *tasks_per_node* tasks of *cpus*
    CPU cores, with *gpus* GPUs and *memory_mb* MiB per node. The default is one task on one
    node; a backend that runs one task (the local one) refuses more (:meth:`Backend.refuse`).
    """

    cpus: int = 1
    """CPU cores per task (``cpus_per_task`` in the campaign file)."""
    gpus: int = 0
    """GPUs per node, handed out exclusively (``gpus_per_node`` in the campaign file)."""
    memory_mb: int | None = None
    """Memory limit per node in MiB, or ``None`` for the backend's default."""
    nodes: int = 1
    """Nodes the attempt spans."""
    tasks_per_node: int = 1
    """Tasks (processes, ranks) on each node."""

    @property
    def tasks(self) -> int:
        """Tasks of the attempt in all (its world size)."""
        return self.nodes * self.tasks_per_node

    @property
    def total_cpus(self) -> int:
        """CPU cores the attempt holds on all its nodes."""
        return self.tasks * self.cpus

    @property
    def total_gpus(self) -> int:
        """GPUs the attempt holds on all its nodes."""
        return self.nodes * self.gpus

    def describe(self) -> str:
        """``"2 CPUs and 0 GPUs"``, or for several tasks ``"3 nodes x 2 tasks x 2 CPUs and
        1 GPU per node"``."""
        if self.tasks == 1:
            return f"{self.cpus} CPUs and {self.gpus} GPUs"
        return (f"{self.nodes} nodes x {self.tasks_per_node} tasks x {self.cpus} CPUs and"
                f" {self.gpus} GPUs per node")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """Everything a backend needs to start one attempt of one trial."""

    trial_id: str
    """Stable id of the trial (``<campaign>-<run>-<number>``); also names the job."""
    attempt: int
    """Attempt number, from 1."""
    params: Mapping[str, Any]
    """The coerced params of the trial."""
    trial_dir: Path
    """The trial's own output directory (exists before submission)."""
    argv: tuple[str, ...] = ()
    """Command to run, one argv item per element (empty for backends that run no command)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables, including the trial contract ``DSE_*`` variables."""
    resources: Resources = field(default_factory=Resources)
    """What the attempt needs."""
    time_limit: float | None = None
    """Wall-clock ceiling in seconds, or ``None`` for none."""
    shell: bool = False
    """Run ``argv[0]`` through ``/bin/sh -c`` (only when the campaign asks for it)."""
    cwd: Path | None = None
    """Working directory of the command (``None``: the trial directory)."""
    avoid_nodes: tuple[str, ...] = ()
    """Nodes not to run on (they interrupted this trial or many others), where possible."""

    @property
    def checkpoint_dir(self) -> Path:
        """Directory kept across attempts of this trial."""
        return self.trial_dir / "checkpoint"


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One attempt's state as seen by one polling pass."""

    job_id: str
    """The backend's id of the attempt."""
    state: JobState
    """Raw state."""
    exit_code: int | None = None
    """Exit status when the workload exited."""
    signal: int | None = None
    """Signal number when the workload was killed by a signal."""
    node: str | None = None
    """Where it ran, when known."""
    started_at: float | None = None
    """Start time (seconds since the epoch, or the fake clock), when known."""
    ended_at: float | None = None
    """End time, when finished."""
    reason: str | None = None
    """Backend's own words on why it ended this way."""
    ambiguous: bool = False
    """The backend cannot tell an infrastructure cause from a workload cause."""
    result: Mapping[str, Any] | None = None
    """A result document delivered in-band (the probe); ``None`` means read ``result.json``."""
    peak_rss_kb: int | None = None
    """Largest resident set size of the attempt's processes, in KiB, when known."""
    usage: Mapping[str, float] | None = None
    """What the backend's accounting charged the attempt, when it keeps one: ``elapsed_s``,
    ``cpus``, ``gpus``, ``nodes``, ``mem_mb``, ``billing`` (Slurm's AllocTRES and ElapsedRaw).
    Recorded with the attempt as the input of the budget ledger."""


class TrialStatus(enum.Enum):
    """Where a trial is in its life; the last five are outcomes."""

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

    def is_finished(self) -> bool:
        return self is not TrialStatus.PENDING and self is not TrialStatus.RUNNING

    def is_reusable(self) -> bool:
        """Whether a trial ending so may have a result a later identical proposal reuses
        (completed, or failed for a reason about the design: see :func:`reusable`)."""
        return self in (TrialStatus.COMPLETED, TrialStatus.FAILED)


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
        return self is not CampaignStatus.RUNNING


class EndReason(enum.StrEnum):
    """Why a campaign run ended (``campaigns.end_reason``); each implies a status."""

    AGENT_EXHAUSTED = "agent_exhausted"
    """The agent had nothing more to propose."""
    MAX_TRIALS = "max_trials"
    """``max_trials`` steps were taken."""
    AGENT_STALLED = "agent_stalled"
    """The agent proposed nothing while nothing ran and nothing was left to tell it."""
    MAX_CONSECUTIVE_REJECTIONS = "max_consecutive_rejections"
    """That many proposals in a row were rejected."""
    CANCELLED = "cancelled"
    """The user stopped it."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """Nothing more fits a ceiling of ``[budget]``."""
    BASELINE_FAILED = "baseline_failed"
    """The baseline run ended without a result: nothing can be compared against it."""
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
    EndReason.AGENT_STALLED: CampaignStatus.COMPLETED,
    EndReason.MAX_CONSECUTIVE_REJECTIONS: CampaignStatus.STOPPED,
    EndReason.CANCELLED: CampaignStatus.CANCELLED,
    EndReason.BUDGET_EXHAUSTED: CampaignStatus.BUDGET_EXHAUSTED,
    EndReason.BASELINE_FAILED: CampaignStatus.STOPPED,
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
    proposal may reuse: completed, or failed for a reason in :data:`REUSED_FAILURES`."""
    if status is TrialStatus.COMPLETED:
        return True
    return status is TrialStatus.FAILED and failure in REUSED_FAILURES


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What an environment concluded from one finished attempt."""

    metrics: Mapping[str, float] = field(default_factory=dict)
    """Metrics read from the result (may be empty for a failure)."""
    failure: FailureClass | None = None
    """Set when the attempt did not produce a usable result."""
    message: str | None = None
    """A one-line explanation of the failure."""
    data_version: str | None = None
    """The data version the result says the trial actually read, if it says one."""
    environment: Mapping[str, Any] | None = None
    """The environment the result says the trial ran in (Python, installed distributions)."""

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass(frozen=True, slots=True)
class Observation:
    """What an agent is told about one of its proposals."""

    params: Mapping[str, Any]
    """The coerced params (for a rejection: as proposed)."""
    status: TrialStatus | None
    """Outcome of the trial; ``None`` for a rejected proposal (no trial was made)."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Metrics of a completed trial (or of the trial a cache hit reuses)."""
    score: float | None = None
    """The score of a completed trial (the campaign scorer's; by default the primary
    objective's value), ``None`` otherwise or when it is about other data than the current."""
    trial_number: int | None = None
    """Trial number in the campaign, ``None`` for a rejection."""
    failure: FailureClass | None = None
    """Failure class of a failed trial."""
    rejected: str | None = None
    """Why the proposal was rejected (constraint, outside the space), or ``None``."""
    direction: Direction = Direction.MINIMIZE
    """Whether a lower or a higher :attr:`score` is better (the campaign scorer's)."""

    @property
    def loss(self) -> float | None:
        """:attr:`score` oriented so that lower is better (``None`` without a score): what
        a minimising agent learns from, whatever the campaign's direction."""
        if self.score is None:
            return None
        return -self.score if self.direction is Direction.MAXIMIZE else self.score


def finite_float(value: Any) -> float | None:
    """*value* as a finite float, or ``None`` when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        result = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return result if math.isfinite(result) else None
