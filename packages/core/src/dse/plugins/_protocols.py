"""The protocols dse is specified with: :class:`Agent`, :class:`Environment`, :class:`Runner`,
and :class:`StoppingRule` for a campaign that stops hopeless trials early.

Each is what the engine needs from one part, and a plain class satisfies it. Users write agents
and environments as plain classes; a runner is usually written by extending
:class:`dse.Backend`, the base class that implements :class:`Runner` and leaves a backend a few
small template methods, but the engine depends on the protocol alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence
    from pathlib import Path

    from dse.model._clock import Clock
    from dse.model._types import (
        Decision,
        Evaluation,
        JobSpec,
        JobStatus,
        Observation,
        Resources,
    )


@runtime_checkable
class Agent(Protocol):
    """Proposes params and learns from results.

    Agents are registered by the class attribute :attr:`name` (see
    :func:`dse.hookspecs.dse_register_agents`) and built as
    ``cls(space, seed=seed, **options)``, where *options* is the campaign's
    ``[agent.<name>]`` table. An agent must be deterministic for a given seed.

    The engine drives an agent with two calls:

    * :meth:`propose` asks for **up to** *n* proposals. The agent may answer with fewer, or
      with none while it waits for feedback on what is in flight. It must never answer more
      than *n*. Proposals need not be coerced: the engine coerces them to the space, and a
      proposal outside the space is rejected and reported back through :meth:`observe`.
    * :meth:`observe` tells the agent what became of its proposals. In ``waves`` mode it is
      called once per wave with the whole wave, in proposal order, before the next
      :meth:`propose`; in ``rolling`` mode once per polling pass with what finished. A rejected
      proposal (constraint, outside the space) is reported at once, with ``status=None``.

    The agent says it has nothing more to propose by setting :attr:`exhausted`; an agent that
    answers no proposal while nothing is in flight and is not exhausted ends the campaign
    (it would otherwise wait forever).

    The engine numbers the proposals it takes 1, 2, 3... over the run, in the order
    :meth:`propose` returned them; each :class:`~dse.Observation` names its
    :attr:`~dse.Observation.proposal`. An agent is also told results it did not propose:
    configurations enqueued for the campaign (``[[enqueue]]``, ``dse enqueue``), numbered like
    its own proposals, and before its first :meth:`propose` a warm start's results (``[agent]
    warm_start``), with no proposal number. An answer of more than *n* is cut to its first *n*
    (the rest get no number, never run and are never told; an ``agent_overproposed`` event each
    time, a warning once a run). A call that raises, or a :meth:`propose` that answers anything
    but a sequence of mappings, ends the campaign with an :class:`~dse.AgentError` naming the
    agent, its plugin and the call (the run is recorded ``failed``; trials still running are
    cancelled).

    A resumed run builds a new agent the same way and replays the logged calls into it (the
    latest :meth:`snapshot`, if the agent gives them, restored first): the same
    :meth:`propose` calls, whose answers are compared with the recorded ones and dropped,
    and the same :meth:`observe` calls (``docs/plugins.md``, "How a resumed run replays the
    agent"). Optional ``snapshot() -> dict | None`` and ``restore(state)`` methods let it
    skip the calls before the snapshot.
    """

    name: ClassVar[str]
    """Registered name, used as ``agent = "<name>"`` in campaign files."""
    version: ClassVar[str]
    """Version recorded with every trial the agent proposes."""

    @property
    def exhausted(self) -> bool:
        """``True`` once the agent will never propose again (a finished grid)."""
        ...

    def propose(
        self, n: int, in_flight: Sequence[Mapping[str, Any]]
    ) -> Sequence[Mapping[str, Any]]:
        """Return at most *n* proposals.

        :param n: the most proposals the engine will take now (free slots), at least 1.
        :param in_flight: params of the trials still running, so a batch-aware agent does not
            propose them again.
        """
        ...

    def observe(self, observations: Sequence[Observation]) -> None:
        """Learn from finished trials, cache hits and rejections (see the class docstring).

        :param observations: in proposal order.
        """
        ...


@runtime_checkable
class StoppingRule(Protocol):
    """Decides, from the learning curves trials report, which to stop early and which stopped
    ones to promote (resume from their checkpoint).

    Rules are registered by :attr:`name` (:func:`dse.hookspecs.dse_register_stopping_rules`)
    and built as ``cls(min_step=..., max_step=..., **options)`` from the campaign's
    ``[stopping]`` table, *options* being its ``[stopping.<name>]`` table. A rule sees only
    numbers: trial numbers, steps and values oriented so that lower is better. It must be
    deterministic: a resumed run rebuilds it by reporting every recorded point again, in the
    order they were recorded, before it decides anything new.
    """

    name: ClassVar[str]
    """Registered name, used as ``rule = "<name>"`` in ``[stopping]``."""
    version: ClassVar[str]
    """Version recorded with every decision the rule makes."""

    def report(self, trial: int, step: int, value: float) -> Decision | None:
        """Trial *trial* reported *value* (a loss) after *step*; return a decision when the
        rule compares it with its peers now (:attr:`Verdict.CONTINUE` or :attr:`Verdict.STOP`),
        ``None`` when it does not (between rungs, too early)."""
        ...

    def promotions(self, stopped: Collection[int]) -> Sequence[Decision]:
        """Of the *stopped* trials (stopped at a rung and resumable from a checkpoint), those
        to resume now, most deserving first, each as a :attr:`Verdict.PROMOTE` decision.
        The engine promotes as many as it has room for and reports their points again as
        they come."""
        ...


@runtime_checkable
class PopulationRule(Protocol):
    """A :class:`StoppingRule` that also starts trials from others' checkpoints: population-
    based training (dse's ``pbt``). Its :attr:`Verdict.EXPLOIT` decisions stop a trial and
    name a donor; the engine starts a new trial in its place from a copy of the donor's
    checkpoint, with the donor's params perturbed by :meth:`explore`."""

    population: int
    """How many trials the agent is asked for in all (an exploit's trial is not one)."""

    def explore(self, params: Mapping[str, Any], space: Any, key: str) -> dict[str, Any]:
        """*params* perturbed within *space* (a :class:`dse.Space`), deterministically for
        *key*."""
        ...

    def forget(self, trial: int) -> None:
        """Trial *trial* ended: it is no member any more."""
        ...


@dataclass(frozen=True, slots=True)
class TrialInfo:
    """What an environment is told about the trial it prepares."""

    trial_id: str
    """Stable trial id (``<campaign>-<run>-<number>``)."""
    number: int
    """Trial number in the campaign (1-based)."""
    attempt: int
    """Attempt number (1-based)."""
    params: Mapping[str, Any]
    """Coerced params."""
    trial_dir: Path
    """The trial's own directory (already created)."""
    data_version: str | None = None
    """Expected data version, passed on as ``DSE_DATA_VERSION``."""


@runtime_checkable
class Environment(Protocol):
    """Turns params into a job and a finished job into metrics.

    The default, :class:`dse.CommandEnvironment`, runs the campaign's command template and
    reads the trial's ``result.json``.
    """

    def identity(self) -> Mapping[str, Any]:
        """What identifies the workload for config hashing (command template, code version)."""
        ...

    def prepare(self, trial: TrialInfo) -> JobSpec:
        """Build the job for one attempt. Raising fails this trial alone (``prepare_error``).

        :param trial: the trial being prepared.
        """
        ...

    def evaluate(self, job: JobSpec, status: JobStatus) -> Evaluation:
        """Read the metrics of an attempt that exited successfully.

        Called only for :attr:`JobState.SUCCEEDED`. Must not raise for a broken result:
        return an :class:`Evaluation` with a failure class instead.

        :param job: the job as prepared.
        :param status: its final status.
        """
        ...


@runtime_checkable
class Runner(Protocol):
    """What the engine needs from an executor: runs attempts somewhere, reports raw states.

    The engine depends on this protocol alone. :class:`dse.Backend` is the base class plugin
    authors extend to implement it (it keeps the outstanding ids, reports each end once and
    survives a failing query, leaving a few small template methods); a plain class that
    satisfies it works too, but it then owns that bookkeeping itself.

    The engine drives a runner in polling passes and owns their cadence: it backs off while
    nothing changes, and calls :meth:`poll` once per pass, never per job.

    * :meth:`use_clock` is called once, when the engine is built, before any other call.
    * :meth:`submit` takes a whole batch (a wave, or the trials that fill freed slots) and
      returns one id per job. It must not raise for a job it cannot start: it returns an id
      all the same and reports that job's end (``LAUNCH_ERROR``, ``INVALID``) by a later poll.
    * :meth:`poll` makes one pass over every outstanding job and returns the statuses that
      changed since the previous pass. A finished job is reported once; the engine never asks
      about it again. It must not raise for a failing query: nothing changes in that pass.
    * :meth:`cancel` asks jobs to stop; their ends come with later passes.
    * :meth:`reattach` adopts jobs a previous controller started (after a restart);
      :meth:`job_id_for` finds a job whose id was never recorded.
    * :meth:`wait` lets a runner that can wait on events end the engine's sleep early.
    * :meth:`shutdown` is called by whoever built the runner when the campaign is over.

    States are raw :class:`dse.JobState` values; the engine classifies them into trial
    outcomes, so a runner never decides whether a failure is about the design.
    """

    @property
    def name(self) -> str:
        """Its name, recorded with every attempt (``backend = "<name>"`` in campaign files)."""
        ...

    @property
    def version(self) -> str:
        """Its version, recorded with every attempt (``<name>==<version>``)."""
        ...

    @property
    def default_poll_interval(self) -> tuple[float, float]:
        """(first, largest) wait in seconds between passes that saw no change, used unless
        the campaign sets ``poll_interval``."""
        ...

    def refuse(self, resources: Resources) -> str | None:
        """Why no job asking for *resources* can ever run on it (one line), or ``None``."""
        ...

    def placement(self) -> Mapping[str, Any]:
        """The options that change what a result on it means (a partition, a node constraint):
        part of every trial's identity, with its name (see docs/record.md)."""
        ...

    @property
    def runs_commands(self) -> bool:
        """Whether it runs each trial's command: a campaign on it without
        ``[environment] command`` is then refused before anything runs."""
        ...

    @property
    def overrun_s(self) -> float:
        """How long past its time limit an attempt may still run before the runner has ended
        it (a grace period, a scheduler's check interval); budgets reserve it on top of the
        limit."""
        ...

    @property
    def last_pass_commands(self) -> Mapping[str, int]:
        """Commands issued to the system behind the runner (``sbatch``, ``squeue``...) by
        name, between the previous :meth:`poll` and the end of the last one; the engine
        records them per pass. Empty for a runner that issues none."""
        ...

    def use_clock(self, clock: Clock) -> None:
        """Read the time from *clock* from now on.

        Every time the runner reports (``started_at``, ``ended_at``) or compares in its own
        process (a deadline, a lag it waits out) comes from this clock, so attempts are
        charged in the engine's time base and a test on a fake clock needs no sleeps. A
        process of the runner's own (a wrapper, a pilot job) writes the wall clock, which is
        what :class:`dse.SystemClock` reads.

        :param clock: the engine's clock.
        """
        ...

    def submit(self, jobs: Sequence[JobSpec]) -> list[str]:
        """Start every job of *jobs* (one batched call where the system allows it) and
        return their ids, in the same order. A job it cannot start still gets an id; its end
        is reported by a later :meth:`poll`.

        :param jobs: one :class:`dse.JobSpec` per attempt, never empty when the engine calls.
        """
        ...

    def poll(self) -> list[JobStatus]:
        """Make one pass over every outstanding job (one batched query: never one per job)
        and return the statuses that changed since the last pass; a finished job is reported
        once. A failing query is survived: it returns what it knows (often nothing)."""
        ...

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Ask these jobs to stop; their ends (``CANCELLED``, or how they ended first) are
        reported by later polls. Unknown or finished ids are ignored.

        :param job_ids: ids :meth:`submit` returned or :meth:`reattach` adopted.
        """
        ...

    def reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        """Adopt jobs an earlier controller started, and report their ends from the next poll
        on (the runner must be able to learn how a job started by another process ended).

        :param jobs: job id → the spec it was submitted with.
        """
        ...

    def job_id_for(self, job: JobSpec) -> str | None:
        """The id *job* has or would have, if the runner can tell without having started it;
        ``None`` when it cannot. Used after a controller crashed between submitting an attempt
        and recording its id; an attempt it cannot find is retried as lost to the restart.

        :param job: the attempt's spec, as recorded before submission.
        """
        ...

    def wait(self, timeout: float) -> bool:
        """Block until an outstanding job may have changed, or *timeout* seconds passed.
        Return ``False`` at once when the runner cannot wait on events: the engine then
        sleeps on its own clock.

        :param timeout: the most to wait, in seconds (0: do not block).
        """
        ...

    def shutdown(self, *, cancel: bool = True, wait: bool = True) -> None:
        """Release the runner, cancelling what still runs unless *cancel* is false.

        :param cancel: cancel the outstanding jobs (false: leave them for a resumed campaign
            to reattach).
        :param wait: wait for cancelled jobs to end (false: the user asked twice to stop now;
            a resumed campaign learns their ends later).
        """
        ...
