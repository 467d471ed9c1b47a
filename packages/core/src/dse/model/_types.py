"""Values that cross a boundary between dse and its plugins: frozen, slotted, documented.

The states the record keeps (:class:`TrialStatus`, :class:`AttemptState`, :class:`JobState`,
:class:`CampaignStatus`, :class:`EndReason`, :class:`FailureClass`) are :mod:`dse.model._states`'s,
re-exported here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse.model._numbers import finite_float
from dse.model._states import (
    RESOLVED_SCORER,
    REUSED_FAILURES,
    AttemptState,
    CampaignStatus,
    EndReason,
    FailureClass,
    JobState,
    TrialStatus,
    reusable,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = [
    "RESOLVED_SCORER",
    "REUSED_FAILURES",
    "AttemptState",
    "CampaignStatus",
    "Decision",
    "Direction",
    "EndReason",
    "Evaluation",
    "FailureClass",
    "JobSpec",
    "JobState",
    "JobStatus",
    "Objective",
    "Observation",
    "Resources",
    "TrialStatus",
    "Verdict",
    "finite_float",
    "reusable",
]


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
    reference: float | None = None
    """In a Pareto campaign, the worst value of this objective the front's hypervolume
    counts (its reference point's coordinate); ``None``: placed beyond the worst value seen
    (:func:`dse.model._pareto.default_reference`)."""


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
    seeded: bool = False
    """The controller put a copy of another trial's checkpoint in :attr:`checkpoint_dir`
    before the first attempt (population-based training): the first attempt keeps it
    (:func:`dse.start_attempt_dir`) and resumes from it."""

    @property
    def checkpoint_dir(self) -> Path:
        """Directory kept across attempts of this trial."""
        return self.trial_dir / "checkpoint"


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One attempt's state as seen by one polling pass: what a backend's ``_poll`` answers
    (``docs/plugins.md``, "What a backend reports"). The backend reports the raw
    :class:`JobState`; dse's core classifies it into the trial's outcome."""

    job_id: str
    """The backend's id of the attempt (the one its ``submit`` returned)."""
    state: JobState
    """Raw state."""
    exit_code: int | None = None
    """Exit status when the workload exited (``FAILED`` needs it)."""
    signal: int | None = None
    """Signal number when the workload was killed by a signal (``KILLED``)."""
    node: str | None = None
    """Where it ran, when known: a node that interrupts trials is avoided
    (:attr:`JobSpec.avoid_nodes`)."""
    started_at: float | None = None
    """Start time (seconds since the epoch on the backend's :attr:`Backend.clock`), when
    known; without one the attempt is charged no run time."""
    ended_at: float | None = None
    """End time (the same clock), once finished; ``None``: the time of the pass that saw
    the end."""
    reason: str | None = None
    """Backend's own words on why it ended this way (recorded with the attempt)."""
    ambiguous: bool = False
    """The backend cannot tell an infrastructure cause from a workload cause: the trial is
    retried once, and the same end twice is recorded as a failure."""
    result: Mapping[str, Any] | None = None
    """A result document delivered in-band (the probe), read by the default environment
    instead of the trial's ``result.json``; ``None`` means read ``result.json``."""
    peak_rss_kb: int | None = None
    """Largest resident set size of the attempt's processes, in KiB, when known
    (recorded)."""
    usage: Mapping[str, float] | None = None
    """What the backend's accounting charged the attempt, when it keeps one: ``elapsed_s``,
    ``cpus``, ``gpus``, ``nodes``, ``mem_mb``, ``billing`` (Slurm's AllocTRES and ElapsedRaw).
    Recorded with the attempt as the input of the budget ledger."""
    left_files: Mapping[str, Any] | None = None
    """Files the attempt made that the backend left where they were made instead of in the
    trial directory, and where: ``{"node": name, "dir": path there, "files": {path relative
    to the trial directory: size in bytes}}`` (dse-backend-ray without a shared filesystem
    leaves a file larger than its ``return_limit`` on the node). Recorded with the attempt,
    shown by ``dse show``."""
    elapsed_s: float | None = None
    """How long the attempt ran, measured in the controller on its monotonic clock
    (:meth:`~dse.Clock.monotonic`) from before it started to when the backend saw it end:
    what the budget charges when the backend sets it (else ``ended_at - started_at``; an
    accounting's ``usage`` comes first). A process of the attempt that stamps its own times
    (a wrapper) cannot answer when it is stopped, and a wall clock steps: this figure is
    the controller's own."""


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
        """``True`` when the attempt produced a usable result (no :attr:`failure`)."""
        return self.failure is None


@dataclass(frozen=True, slots=True)
class Observation:
    """What an agent is told about one of its proposals (:meth:`Agent.observe`).

    An agent learns from :attr:`loss` (or, in a Pareto campaign, :attr:`losses`) and may
    match an observation to the proposal it answers by :attr:`proposal`; the other fields say
    what became of it. New fields are added at the end, with a default.
    """

    params: Mapping[str, Any]
    """The coerced params (for a rejection: as proposed)."""
    status: TrialStatus | None
    """Outcome of the trial: ``completed``, ``failed``, ``stopped`` (early, by the stopping
    rule), ``interrupted`` (out of retries) or ``budget_exhausted``; a cache hit is told with
    the status of the trial it reuses (never ``cached``), and a cancelled trial is never told.
    ``None`` for a rejected proposal (no trial was made)."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Metrics of a completed trial (or of the trial a cache hit reuses)."""
    score: float | None = None
    """The score of a completed trial (the campaign scorer's; by default the primary
    objective's value); for a trial stopped early, the scorer's score of its metrics at
    :attr:`step` when the scorer can give one (the record keeps no score for it); ``None``
    otherwise or when it is about other data than the current."""
    trial_number: int | None = None
    """Trial number in the campaign, ``None`` for a rejection."""
    failure: FailureClass | None = None
    """Failure class of a failed trial."""
    rejected: str | None = None
    """Why the proposal was rejected (constraint, outside the space), or ``None``."""
    direction: Direction = Direction.MINIMIZE
    """Whether a lower or a higher :attr:`score` is better (the campaign scorer's)."""
    step: int | None = None
    """For a trial stopped early (``status`` :attr:`TrialStatus.STOPPED`, or a cache hit of
    one): the step its :attr:`metrics` and :attr:`score` are from, a lower fidelity than a full
    run's; ``None`` for a trial that ran to its end. A stopped trial promoted later is told
    again, with the same :attr:`trial_number`, when it ends."""
    max_step: int | None = None
    """The step a full run ends at (the campaign's ``[stopping] max_step``), when the campaign
    stops trials early; ``step / max_step`` is the fidelity of a stopped trial's result."""
    objectives: tuple[Objective, ...] = ()
    """The objectives a Pareto campaign optimises together (``[campaign] objectives =
    "pareto"``), in the campaign file's order, each with its direction; empty when the
    campaign optimises one (its first objective, by :attr:`score`)."""
    scores: tuple[float, ...] | None = None
    """In a Pareto campaign, the scorer's score of each of :attr:`objectives` (in their
    order) wherever :attr:`score` is given (:attr:`score` is the first of them); ``None``
    otherwise."""
    proposal: int | None = None
    """Which of the agent's proposals this tells about: the engine numbers the proposals it
    takes 1, 2, 3... in the order :meth:`Agent.propose` returned them, over the whole run
    (rejected ones included; those it drops — beyond the *n* asked for, or the rest of a
    batch once the run ends or the budget refuses one of it — get no number and are never
    told). The record keeps it as the trial's ``proposal`` (``dse show``: ``candidate ...
    proposal 12``); a trial told again (promoted, then stopped higher or ended) and a replay
    after a restart carry the same number. ``None`` only in an observation built by hand."""

    @property
    def loss(self) -> float | None:
        """:attr:`score` oriented so that lower is better (``None`` without a score): what
        a minimising agent learns from, whatever the campaign's direction."""
        if self.score is None:
            return None
        return -self.score if self.direction is Direction.MAXIMIZE else self.score

    @property
    def losses(self) -> tuple[float, ...] | None:
        """:attr:`scores` oriented so that lower is better in each objective (a maximised
        one negated): the point a multi-objective agent learns from; ``None`` without
        scores (a single-objective campaign, or no score)."""
        if self.scores is None or len(self.scores) != len(self.objectives):
            return None
        return tuple(-s if o.direction is Direction.MAXIMIZE else s
                     for s, o in zip(self.scores, self.objectives, strict=True))


class Verdict(enum.StrEnum):
    """What a stopping rule decided for a trial at a rung."""

    CONTINUE = "continue"
    """Go on to the next rung."""
    STOP = "stop"
    """Stop now: the trial ends :attr:`TrialStatus.STOPPED` at this rung."""
    PROMOTE = "promote"
    """A stopped trial goes on after all (its peers did worse than expected): it resumes
    from its checkpoint as a new attempt."""
    EXPLOIT = "exploit"
    """Population-based training: the trial is stopped (it ends :attr:`TrialStatus.STOPPED`)
    and its place in the population goes to a new trial that starts from a copy of the
    checkpoint of :attr:`Decision.donor`, with the donor's params perturbed."""


MAX_COMPARED = 64
"""The most peers a :class:`Decision` lists by name (the count is always whole)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision of a stopping rule about one trial at one rung, as the record keeps it.

    Values are losses (lower is better: a maximised metric's values are negated) as the rule
    saw them; the record keeps them in the metric's own sign.
    """

    trial: int
    """The trial number decided on."""
    verdict: Verdict
    """What was decided: continue, stop, or promote a stopped trial."""
    rung: int
    """The step of the rung the trial was compared at."""
    step: int
    """The step whose value was compared (the first reported at or past the rung)."""
    value: float
    """The trial's value there."""
    cutoff: float | None = None
    """The value it had to match or beat (``None``: no peers to compare with yet)."""
    peers: int = 0
    """How many other trials it was compared with."""
    compared: tuple[tuple[int, float], ...] = ()
    """Those peers as ``(trial number, value)``, best first; at most :data:`MAX_COMPARED`
    (the best ones)."""
    reason: str = ""
    """One line saying why (``"0.41 is not in the best 1/3 of 7 trials at step 9"``)."""
    bracket: int | None = None
    """The bracket the trial belongs to (Hyperband), ``None`` for a rule without brackets."""
    donor: int | None = None
    """For :attr:`Verdict.EXPLOIT`: the trial whose checkpoint the replacement starts from."""
