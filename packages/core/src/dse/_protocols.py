"""What users write: agents and environments are small protocols a plain class satisfies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from dse._types import Evaluation, JobSpec, JobStatus, Observation


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
