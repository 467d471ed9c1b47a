"""The base class plugin authors extend to implement the :class:`~dse.Runner` protocol.

The engine depends on :class:`~dse.Runner` (what it needs from an executor); :class:`Backend`
implements it. The public batch methods live here; a backend fills in four small template
methods. The engine owns the cadence: it calls :meth:`Backend.poll` once per pass, never per
job.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

from dse.model._clock import Clock, SystemClock
from dse.model._errors import BackendError, ConfigError
from dse.model._numbers import finite_float, is_int64, is_time
from dse.model._types import JobSpec, JobState, JobStatus, Resources

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from types import TracebackType

log = logging.getLogger("dse.backend")


class Backend(ABC):
    """Runs attempts somewhere and reports their raw states: the :class:`~dse.Runner` the
    engine drives, as a base class that does the bookkeeping.

    Subclasses set :attr:`name` and implement :meth:`_submit`, :meth:`_poll` and
    :meth:`_cancel`, and may implement :meth:`_reattach` and :meth:`_shutdown`. They report
    raw :class:`JobState` values; the core classifies them into trial outcomes. Every time
    a backend reports (``started_at``, ``ended_at``) or compares in its own process (a
    deadline, a lag it waits out) is read from :attr:`clock`, which the engine sets to its own
    with :meth:`use_clock`; a process of its own (a wrapper, a pilot job) writes the wall
    clock, which is what :class:`~dse.SystemClock` reads.

    Guarantees the base class gives the engine:

    * :meth:`submit` takes a whole batch (a wave) in one call and returns one job id per job.
      A batch the backend refuses as a whole becomes :attr:`JobState.LAUNCH_ERROR` statuses
      reported by the next :meth:`poll`.
    * :meth:`poll` makes **one** call to :meth:`_poll` with every outstanding id and returns
      only the statuses that changed; a finished job is reported once and never queried
      again. A failing :meth:`_poll` is logged and survived (nothing changes in that pass).
    * :meth:`cancel` and :meth:`shutdown` are safe to call on finished or unknown ids.
    """

    name: ClassVar[str]
    """Registered name, used as ``backend = "<name>"`` in campaign files."""
    version: ClassVar[str] = "0"
    """Version recorded with every attempt."""
    default_poll_interval: ClassVar[tuple[float, float]] = (0.5, 10.0)
    """(first, largest) wait in seconds between passes that saw no change."""
    runs_commands: ClassVar[bool] = True
    """Whether it runs each trial's command: a campaign on it must then name one
    (``[environment] command``). The probe backend plays scripts instead."""
    spans_tasks: ClassVar[bool] = False
    """Whether it starts a trial of several tasks (``nodes``, ``tasks_per_node``) as that many
    processes, each told its place (``DSE_RANK``, ``DSE_NODE``... of the trial contract). A
    backend that does not refuses such trials (:meth:`refuse`) rather than run one task."""
    trial_dirs: bool = True
    """Whether the engine makes each trial its directory (``<run>/<number:06d>``, the
    ``trial_dir`` of its :class:`dse.JobSpec`) before preparing it: a backend that runs
    commands needs one for the trial's params file, output and result. The probe, which
    runs none, asks for them only when it writes result files; then ``trial_dir`` is
    recorded but never made."""
    queue_ahead: int = 0
    """How many attempts beyond the campaign's ``max_parallelism`` the backend may be handed:
    it queues them itself and never starts more than ``max_parallelism`` at once (Slurm's
    auto-sized allocation; the local backend, told the limit by :meth:`limit_running`), so a
    freed slot takes the next attempt without waiting for the controller. The engine hands
    them over in rolling mode, for a campaign run alone, when its agent proposes ahead
    (``proposes_ahead = True``: it does not learn from results); it reads the figure after
    calling :meth:`limit_running`, which may size it."""
    overrun_s: float = 0.0
    """How long past its time limit an attempt may still run before the backend has ended it
    (a grace period, a scheduler's check interval). Budgets reserve it on top of the limit."""

    clock: Clock
    """Where the backend reads the time and waits: the engine's clock once :meth:`use_clock`
    was called, the system clock until then."""
    interrupted_at: float | None = None
    """When (:func:`time.monotonic`) the controller was last asked to stop (see
    :meth:`interrupt`); ``None`` until then."""

    def __init__(self) -> None:
        self.clock = SystemClock()
        self._outstanding: dict[str, JobState] = {}
        self._deferred: list[JobStatus] = []
        self._launch_errors = 0
        self.poll_failures = 0
        """Consecutive passes whose query failed."""
        self.wait_on_shutdown = True
        """Whether :meth:`shutdown` waits for cancelled jobs to end."""
        self.commands: dict[str, int] = {}
        """Commands issued to the system behind the backend (``sbatch``, ``squeue``...), by
        name, since the backend was made (see :meth:`count_command`)."""
        self.last_pass_commands: dict[str, int] = {}
        """Commands issued between the previous :meth:`poll` and the end of the last one
        (a pass's submissions, cancels and queries); empty for backends that issue none."""
        self._commands_at_poll: dict[str, int] = {}

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: str = "<campaign>") -> Self:
        """Build the backend from the campaign's ``[backend.<name>]`` table."""
        try:
            return cls(**options)
        except TypeError as exc:
            msg = f"{source}: backend.{cls.name}: bad option(s): {exc}"
            raise ConfigError(msg) from None

    # -- public batch API (the engine calls these) ---------------------------------------

    def for_trials(
        self, *, time_limit: float | None, resources: Resources, parallelism: int
    ) -> Backend:
        """The backend to run a campaign's trials on, now that their time limit (``None``:
        none, or set per trial by a param), resources and ``max_parallelism`` are known: this
        one by default. A backend with several modes (Slurm's ``mode = "auto"``) returns the
        one that fits. Called once, when the campaign is built, before anything runs."""
        return self

    def expect_command(self, command: Sequence[str], *, shell: bool) -> None:
        """The command every trial of the campaign runs (``[environment] command``, its
        ``{param}`` placeholders not yet filled; *shell*: run through ``/bin/sh -c``), told
        once when the campaign is built, before anything runs, so the backend may prepare
        what its attempts need beside the controller's start (the local backend starts a
        Python function objective's warm server). Nothing by default."""
        del command, shell

    def limit_running(self, limit: int | None) -> None:
        """Start at most *limit* jobs at once (``None``: as many as the backend holds room
        for). The pool calls it once before anything runs: with the limit when it will hand
        this backend up to :attr:`queue_ahead` attempts beyond it, else with ``None``. A
        backend whose :attr:`queue_ahead` is sized to the limit already (Slurm's allocation)
        may ignore it, as this default does."""
        del limit  # nothing to hold: this backend queues nothing ahead by default

    def refuse(self, resources: Resources) -> str | None:
        """Why no job asking for *resources* can ever run here (more GPUs than there are), in
        words for one line; ``None`` when it may. The engine asks before anything runs, for
        the resources every trial of a campaign asks. This default refuses trials of more
        than one task unless :attr:`spans_tasks` says the backend starts them."""
        if resources.tasks > 1 and not self.spans_tasks:
            return (f"asks for {resources.nodes} node(s) x {resources.tasks_per_node} task(s);"
                    f" the {self.name} backend runs one task per trial (run trials that span"
                    " tasks or nodes with a backend that starts them: backend = \"slurm\")")
        return None

    def capacity(self, resources: Resources) -> tuple[int, str] | None:
        """How many jobs asking for *resources* run here at once, with why in a few words
        (``(2, "2 CPUs, 1 per trial")``); ``None`` (the default): no fixed limit. A campaign
        whose ``max_parallelism`` is larger is told, once, that it runs this many at a time."""
        return None

    def still_running(self, job_id: str | None, trial_dir: Path, attempt: int) -> bool:
        """Whether attempt *attempt* (job *job_id*, when it was recorded) of the trial in
        *trial_dir*, started by a controller that is gone (killed), still runs on this
        backend — its orphan — or ended a moment ago, its result not recorded yet (its
        controller, restarted, records it). Another campaign's controller asks before it
        takes over the configuration that trial claimed, and waits rather than run the
        configuration beside it or again. ``False`` (the default): cannot tell, the claim is
        taken over at once."""
        return False

    def placement(self) -> Mapping[str, Any]:
        """The options that change what a result on this backend means (a partition, a node
        constraint, exclusive nodes): part of every trial's identity, so a result measured
        under other placement is never reused. Empty by default."""
        return {}

    def interrupt(self) -> None:
        """The controller was asked to stop (SIGTERM, Ctrl+C): a call of this backend that is
        waiting on something slow — a scheduler query that does not answer — should give up
        now, so the stop is acted on within a second; the cancels that follow are not
        interrupted. The default notes the time in :attr:`interrupted_at`: a backend's waits
        compare it with when they began. Called from a signal handler: keep overrides short."""
        self.interrupted_at = time.monotonic()

    def use_clock(self, clock: Clock) -> None:
        """Read the time from *clock* from now on (the engine passes its own, once, when it
        is built), so attempts are charged in one time base and tests on a fake clock need
        no sleeps."""
        self.clock = clock

    @property
    def outstanding(self) -> tuple[str, ...]:
        """Ids of jobs not yet reported finished."""
        return tuple(self._outstanding)

    def submit(self, jobs: Sequence[JobSpec]) -> list[str]:
        """Start every job of *jobs*; return their ids in the same order."""
        if not jobs:
            return []
        try:
            ids = list(self._submit(jobs))
            if len(ids) != len(jobs):
                msg = f"backend {self.name!r} returned {len(ids)} ids for {len(jobs)} jobs"
                raise BackendError(msg)
        except Exception as exc:  # noqa: BLE001 - any refusal becomes launch errors, never a crash
            log.warning("backend %s refused a batch of %d: %s", self.name, len(jobs), exc)
            ids = []
            for job in jobs:
                self._launch_errors += 1
                job_id = f"launch-error-{self._launch_errors}-{job.trial_id}"
                self._deferred.append(
                    JobStatus(job_id, JobState.LAUNCH_ERROR, reason=f"{type(exc).__name__}: {exc}")
                )
                ids.append(job_id)
            return ids
        for job_id in ids:
            self._outstanding[job_id] = JobState.PENDING
        return ids

    def count_command(self, name: str) -> None:
        """Note one command issued to the system (one ``squeue`` call, one ``sbatch``)."""
        self.commands[name] = self.commands.get(name, 0) + 1

    def poll(self) -> list[JobStatus]:
        """One pass over every outstanding job; return the statuses that changed."""
        try:
            return self._poll_once()
        finally:
            self.last_pass_commands = {
                name: count - self._commands_at_poll.get(name, 0)
                for name, count in self.commands.items()
                if count != self._commands_at_poll.get(name, 0)
            }
            self._commands_at_poll = dict(self.commands)

    def _poll_once(self) -> list[JobStatus]:
        changed = self._deferred
        self._deferred = []
        if not self._outstanding:
            return changed
        try:
            statuses = self._poll(tuple(self._outstanding))
            malformed = _malformed(statuses)
            if malformed is None:
                statuses = {job_id: _bounded(s) for job_id, s in statuses.items()}
        except Exception as exc:  # noqa: BLE001 - a failing query never fails a trial
            malformed = f"{type(exc).__name__}: {exc}"
        if malformed is not None:
            # Survived like a failing query: the pass changes nothing, the next one asks again.
            self.poll_failures += 1
            cls = type(self)
            log.warning("backend %s (%s.%s): poll failed (%d in a row): %s", self.name,
                        cls.__module__, cls.__qualname__, self.poll_failures, malformed)
            return changed
        self.poll_failures = 0
        for job_id, status in statuses.items():
            previous = self._outstanding.get(job_id)
            if previous is None or status.state is previous:
                continue
            if status.state.is_finished():
                del self._outstanding[job_id]
            else:
                self._outstanding[job_id] = status.state
            changed.append(status)
        return changed

    def job_id_for(self, job: JobSpec) -> str | None:
        """The id *job* has or would have, if the backend can tell without having started it.

        Used after a controller crash to find an attempt whose id was not recorded yet
        (it was stored as submitted, then the controller died). ``None``: cannot tell.
        """
        return None

    def wait(self, timeout: float) -> bool:
        """Block until an outstanding job may have changed, or *timeout* seconds passed.

        Return ``False`` when the backend cannot wait on events; the engine then sleeps on
        its own clock. The default implementation returns ``False`` at once.
        """
        return self._wait(timeout)

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Ask the backend to stop these jobs; their end is reported by later polls."""
        live = [j for j in job_ids if j in self._outstanding]
        if live:
            self._cancel(live)

    def reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        """Adopt jobs started by an earlier controller (job id → its spec)."""
        if not jobs:
            return
        self._reattach(jobs)
        for job_id in jobs:
            self._outstanding.setdefault(job_id, JobState.PENDING)

    def shutdown(self, *, cancel: bool = True, wait: bool = True) -> None:
        """Release the backend; cancel what still runs unless *cancel* is false.

        With *wait* false the backend does not wait for cancelled jobs to end (the user
        asked twice to stop now); a resumed campaign learns their ends later.
        """
        self.wait_on_shutdown = wait
        if cancel and self._outstanding:
            self._cancel(tuple(self._outstanding))
        self._shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    # -- template methods (a backend implements these) ------------------------------------

    @abstractmethod
    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        """Start *jobs* (one batched call where the system allows it); return their ids."""

    @abstractmethod
    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """Query the state of *job_ids* in one batched query; omit ids with no news."""

    @abstractmethod
    def _cancel(self, job_ids: Sequence[str]) -> None:
        """Stop *job_ids* (SIGTERM, grace, SIGKILL or the system's equivalent)."""

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:  # noqa: B027 - optional hook
        """Prepare to poll jobs started by an earlier controller (default: nothing to do)."""

    def _wait(self, timeout: float) -> bool:
        """Wait for news about outstanding jobs (default: cannot; return ``False``)."""
        return False

    def _shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release resources held by the backend (default: nothing)."""


def _bounded(status: JobStatus) -> JobStatus:
    """*status* without the numbers the record could not keep: an exit code, a signal or a
    peak RSS that is no integer within 64 bits, a time that is no time (seconds since the
    epoch), a usage figure that is no finite number. A backend may hand on what a trial
    wrote (the local wrapper's exit file lies in the trial's directory)."""
    changes: dict[str, Any] = {
        name: None for name in ("exit_code", "signal", "peak_rss_kb")
        if getattr(status, name) is not None and not is_int64(getattr(status, name))}
    changes.update({name: None for name in ("started_at", "ended_at")
                    if getattr(status, name) is not None and not is_time(getattr(status, name))})
    usage = status.usage
    if usage is not None and not all(finite_float(v) is not None for v in usage.values()):
        changes["usage"] = {str(k): v for k, v in usage.items() if finite_float(v) is not None}
    return dataclasses.replace(status, **changes) if changes else status


def _malformed(statuses: object) -> str | None:
    """What is wrong with what ``_poll`` returned (a mapping of job id to
    :class:`~dse.JobStatus` expected), or ``None``."""
    if not isinstance(statuses, Mapping):
        return f"_poll returned {type(statuses).__name__}, not a mapping of job id to JobStatus"
    for job_id, status in statuses.items():
        if not isinstance(status, JobStatus):
            return (f"_poll returned {type(status).__name__} {status!r:.60} for job {job_id!r},"
                    " not a JobStatus")
        state: object = status.state  # a frozen dataclass checks no type: a plugin may err
        if not isinstance(state, JobState):
            return (f"_poll returned a JobStatus for job {job_id!r} whose state is"
                    f" {state!r:.40}, not a JobState")
    return None
