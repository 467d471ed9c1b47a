"""The local backend: each attempt is a real process tree on this machine.

:class:`LocalBackend` owns what is shared: its job table, its queue, its CPU and GPU slots,
and the wrapper server (``_server``). What concerns one attempt (its wrapper, its files, its
time limit, its end) is in ``_attempt``; facts about and signals to processes, in ``_procs``.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar, Self, cast

from dse import (
    Backend,
    ConfigError,
    JobSpec,
    JobState,
    JobStatus,
    Resources,
    did_you_mean,
    parse_duration,
    start_attempt_dir,
)
from dse_local._attempt import (
    LIMIT_MARGIN,
    Job,
    ask_to_stop,
    ended,
    ended_lately,
    enforce_cancel,
    enforce_limit,
    gone,
    measured,
    next_due,
    orphan_runs,
    reattach,
    watch,
    wrapper_request,
)
from dse_local._attempt import attempt_dir as attempt_dir  # re-exported by dse_local
from dse_local._procs import age, kill_session
from dse_local._server import Servers, compile_wrapper

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence
    from pathlib import Path

log = logging.getLogger("dse.local")

AHEAD_ROUNDS = 3
"""Attempts the backend queues, in rounds of the attempts it runs at once."""
MAX_SPARES = 4
"""Most wrappers the wrapper server keeps forked ahead (one per slot up to this)."""
UNRECORDED_GRACE_S = 120.0
"""How long another campaign keeps waiting on a gone controller's trial whose attempt ended
(its exit file written) but was not recorded: its controller, restarted meanwhile, records
the result, and the configuration is not run a second time. Past it, the configuration is
taken over (run again)."""
_HOST = socket.gethostname()
"""This machine's name: every task's DSE_NODE and DSE_NODES."""


def detect_gpus() -> int:
    """Number of GPUs ``nvidia-smi -L`` lists (0 when it is absent or fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run(
            [exe, "-L"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def local_options(options: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The ``[backend.local]`` table checked, as :class:`LocalBackend`'s arguments."""
    unknown = sorted(set(options) - {"cpus", "gpus", "grace"})
    if unknown:
        raise ConfigError(f"{source}: backend.local: unknown option(s) {unknown}"
                          + did_you_mean(unknown, ("cpus", "gpus", "grace")))
    for key in ("cpus", "gpus"):
        value = options.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"{source}: backend.local.{key}: expected an integer")
    opts = dict(options)
    if "grace" in opts:
        opts["grace"] = parse_duration(opts["grace"], f"{source}: backend.local.grace")
    return opts


class Slots:
    """The CPU slots and GPUs free for the next attempt (the GPUs by number, lowest first)."""

    def __init__(self, cpus: int, gpus: int) -> None:
        self.cpus = cpus
        self.gpus = list(range(gpus))

    def fit(self, res: Resources) -> bool:
        return res.cpus <= self.cpus and res.gpus <= len(self.gpus)

    def take(self, res: Resources) -> tuple[int, ...]:
        """Hold *res* (it fits); the GPUs it is given."""
        self.cpus -= res.cpus
        given = tuple(self.gpus[: res.gpus])
        del self.gpus[: res.gpus]
        return given

    def take_cpus(self, cpus: int) -> None:
        """Hold the CPUs of an attempt found running (it names its GPUs itself)."""
        self.cpus -= cpus

    def give(self, cpus: int, gpus: tuple[int, ...]) -> None:
        self.cpus += cpus
        self.gpus = sorted([*self.gpus, *gpus])


class LocalBackend(Backend):
    """Runs attempts as process trees on this machine, within CPU and GPU slots.

    Options (the ``[backend.local]`` table):

    * ``cpus`` — CPU slots (default: the CPUs this process may use);
    * ``gpus`` — GPU slots (default: what ``nvidia-smi -L`` lists);
    * ``grace`` — seconds between SIGTERM and SIGKILL on a cancel or a time-out (default 10).

    Each attempt runs under a small wrapper (``_wrapper.py``) in a session of its own; the
    wrapper writes ``exit.json`` in ``<trial_dir>/attempt-<n>/``, so a controller restarted
    later learns how an attempt it no longer parents ended. A wrapper that dies without
    writing it (killed from outside) leaves its session behind: the attempt is reported ended
    (``LOST``) only once every process of that session is killed and gone, by this controller
    or, after a restart, by the one that reattaches. The attempt's directories are made as it
    starts, not when it is queued (:func:`dse.start_attempt_dir`: what other trials left in
    them meanwhile is moved aside). A restarted controller believes no pid file: the
    wrapper it reattaches to is the session leader working in the attempt's directory, and
    what is left of a wrapper that died meanwhile is found by the attempt's environment
    (``docs/guide.md``, "What a trial cannot do to another"). GPUs are handed out exclusively
    through ``CUDA_VISIBLE_DEVICES`` (empty for a trial that asks for none, so it sees no
    GPU); a job waits in the backend's queue until its CPUs and GPUs are free (first come,
    first served).

    A trial inherits the controller's environment (``os.environ`` when the attempt is
    submitted) with the job's variables (``JobSpec.env``: the trial contract) set over it.
    The directory of the controller's Python comes first on the trials' ``PATH``, so
    ``python`` in a command is the controller's environment. Its stdin is ``/dev/null``; its
    stdout and stderr are appended to ``stdout.log`` and ``stderr.log`` in
    ``<trial_dir>/attempt-<n>/`` (never through a symlink, nor into a FIFO).
    """

    name: ClassVar[str] = "local"
    version: ClassVar[str] = "0.1.0"
    default_poll_interval: ClassVar[tuple[float, float]] = (0.2, 1.0)

    def __init__(
        self, *, cpus: int | None = None, gpus: int | None = None, grace: float = 10.0
    ) -> None:
        super().__init__()
        self.cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))
        self.gpus = gpus if gpus is not None else detect_gpus()
        if self.cpus < 1 or self.gpus < 0 or grace < 0:
            msg = (
                f"backend.local: cpus >= 1, gpus >= 0, grace >= 0 expected"
                f" (got {cpus}, {gpus}, {grace})"
            )
            raise ConfigError(msg)
        self.grace = float(grace)
        # SIGTERM at the limit, SIGKILL one grace later; the wrapper times the run itself.
        self.overrun_s = self.grace + LIMIT_MARGIN
        compile_wrapper()
        self._servers = Servers(os.path.realpath(sys.executable), min(self.cpus, MAX_SPARES))
        self._trial_gpus = 0
        self._bin_dir = os.path.dirname(sys.executable)
        self._jobs: dict[str, Job] = {}
        self._queue: deque[Job] = deque()
        self._slots = Slots(self.cpus, self.gpus)
        self._limit: int | None = None
        """At most this many attempts run at once (:meth:`limit_running`)."""
        self._fresh: set[str] = set()
        """Trials none of whose attempts started (each one this backend was handed never
        did): the next starts as a first attempt, its checkpoint directory empty."""
        # Attempts may wait here beyond those that run (limit_running sizes how many), each
        # started the moment a slot frees: the controller's pass is then off the path from
        # one trial to the next.
        self.queue_ahead = AHEAD_ROUNDS * self.cpus

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: str = "<campaign>") -> Self:
        try:
            return cls(**local_options(options, source))
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def for_trials(
        self, *, time_limit: float | None, resources: Resources, parallelism: int
    ) -> Backend:
        self._trial_gpus = resources.gpus
        return super().for_trials(time_limit=time_limit, resources=resources,
                                  parallelism=parallelism)

    def expect_command(self, command: Sequence[str], *, shell: bool) -> None:
        """A Python function objective's warm server starts now, beside the controller's
        start (``_warm.py``): by the first attempt it has imported the function."""
        if not shell and not self._trial_gpus:
            self._servers.expect(tuple(command))

    def job_id_for(self, job: JobSpec) -> str | None:
        return f"{job.trial_id}.{job.attempt}"

    def still_running(self, job_id: str | None, trial_dir: Path, attempt: int) -> bool:
        path = trial_dir / f"attempt-{attempt}"
        return orphan_runs(path) or ended_lately(path, UNRECORDED_GRACE_S)

    def refuse(self, resources: Resources) -> str | None:
        refused = super().refuse(resources)
        if refused is not None:
            return refused
        if resources.cpus <= self.cpus and resources.gpus <= self.gpus:
            return None
        why = (f"asks for {resources.cpus} CPUs and {resources.gpus} GPUs; this machine has"
               f" {self.cpus} CPU slots and {self.gpus} GPUs")
        if resources.gpus > self.gpus:
            why += " (`nvidia-smi -L` lists them; [backend.local] gpus = N overrides it)"
        return why

    def capacity(self, resources: Resources) -> tuple[int, str] | None:
        limits = [(self.cpus // max(resources.cpus, 1),
                   f"{self.cpus} CPUs, {max(resources.cpus, 1)} per trial")]
        if resources.gpus > 0:
            limits.append((self.gpus // resources.gpus,
                           f"{self.gpus} GPUs, {resources.gpus} per trial"))
        return min(limits)

    # -- template methods -----------------------------------------------------------------

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        ids = []
        for spec in jobs:
            job_id = f"{spec.trial_id}.{spec.attempt}"
            job = Job(job_id, spec)
            self._jobs[job_id] = job
            res = spec.resources
            if res.cpus > self.cpus or res.gpus > self.gpus:
                job.final = JobStatus(
                    job_id, JobState.INVALID, node="localhost",
                    reason=f"asks for {res.cpus} CPUs and {res.gpus} GPUs; this machine has"
                    f" {self.cpus} CPU slots and {self.gpus} GPUs",
                )
            elif self._prepare(job):
                self._queue.append(job)
            ids.append(job_id)
        self._launch_ready()
        # What starts now has its pid file written when submit returns: a controller that
        # dies now leaves a wrapper a restarted one finds. Attempts queued ahead start later,
        # as slots free, without waiting for the server's answer (_ended_fds reads it).
        self._take_answers(block=True)
        return ids

    def _prepare(self, job: Job) -> bool:
        """Make *job*'s directories and its wrapper's request; whether it can be started (else
        its end is set)."""
        made = wrapper_request(job.spec, self.grace, self._bin_dir)
        if isinstance(made, JobStatus):
            job.final = made
            return False
        job.request = made
        return True

    def limit_running(self, limit: int | None) -> None:
        self._limit = limit
        self.queue_ahead = AHEAD_ROUNDS * (limit or self.cpus)
        # Called once before anything runs: the server and its spares start now, beside the
        # controller's opening of the run, rather than on the first trial's path.
        self._servers.start(min(limit or self.cpus, MAX_SPARES))

    def _running(self) -> int:
        """Attempts launched (or reattached alive) and not yet released."""
        return sum(1 for j in self._jobs.values() if j.launched and not j.released)

    def _launch_ready(self) -> None:
        """Start the queued jobs that fit, in order, all in one request to the server."""
        ready = []
        while self._queue:
            job = self._queue[0]
            res = job.spec.resources
            if not self._slots.fit(res):
                break
            if self._limit is not None and self._running() >= self._limit:
                break
            self._queue.popleft()
            job.gpus = self._slots.take(res)
            job.launched = True
            ready.append(job)
        if ready:
            self._launch(ready)

    def _release(self, job: Job) -> None:
        if not job.launched or job.released:
            return
        job.released = True
        self._slots.give(job.spec.resources.cpus, job.gpus)

    def _launch(self, jobs: Sequence[Job]) -> None:
        requests = []
        ready = []
        for job in jobs:
            assert job.request is not None
            env, args = job.request
            job.request = None
            if not self._ready(job):
                continue
            ready.append(job)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpus)
            env["DSE_NODE"] = env["DSE_NODES"] = _HOST  # one task, here (the trial contract)
            requests.append((env, args))
        if not requests:
            return
        # Before the request: the controller's measure of each attempt covers all of it.
        launched = self.clock.monotonic()
        self._servers.send([(job, request, not job.gpus)
                            for job, request in zip(ready, requests, strict=True)])
        started = self.clock.time()
        for job in ready:
            job.started_at = started
            job.launched_mono = launched
            job.starting = True

    def _take_answers(self, *, block: bool, ready: Collection[int] = ()) -> bool:
        """Watch each attempt whose wrapper the server started (its answer in), or end it
        (``LAUNCH_ERROR``) if none could; *block*: every attempt sent. Whether one of them
        already ended (the next poll reports it)."""
        ended = False
        for tag, reply in self._servers.answers(block=block, ready=ready):
            job = cast("Job", tag)
            job.starting = False
            if isinstance(reply, OSError):
                self._not_started(job, reply)
            else:
                watch(job, *reply)
            ended = ended or job.gone or job.final is not None
        return ended

    def _not_started(self, job: Job, exc: OSError) -> None:
        job.final = JobStatus(job.job_id, JobState.LAUNCH_ERROR, node="localhost",
                              reason=f"{type(exc).__name__}: {exc}")
        self._release(job)

    def _ready(self, job: Job) -> bool:
        """Make *job*'s directories as it starts (:func:`dse.start_attempt_dir`: what other
        trials left there while it was queued is moved aside, and said); whether it can
        start (else its end is set)."""
        spec = job.spec
        first = spec.attempt == 1 or spec.trial_id in self._fresh
        self._fresh.discard(spec.trial_id)
        try:
            moved = start_attempt_dir(spec, first=first)
        except OSError as exc:
            self._not_started(job, exc)
            return False
        if moved:
            log.warning("trial %s, attempt %d, as it starts: what was in %s before"
                        " is not its own, moved aside (nothing deleted): %s", spec.trial_id,
                        spec.attempt, spec.trial_dir, "; ".join(moved))
        return True

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        now = self.clock.monotonic()
        ready = self._ended_fds(0.0)
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is None:
                out[job_id] = JobStatus(job_id, JobState.LOST, reason="unknown to this backend")
                continue
            status = self._check(job, now, ready)
            if status is not None:
                out[job_id] = status
                if status.state.is_finished():
                    self._forget(job)
        self._launch_ready()
        return out

    def _ended_fds(self, timeout: float) -> set[int]:
        """Pidfds of wrappers that ended, waiting up to *timeout* seconds for one (one
        ``poll`` call for all of them); the answers of the wrapper servers are taken in as
        they come (:meth:`_take_answers`), and an attempt that could not start, or whose
        wrapper ended before it was watched, ends the wait."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            fds = [j.pidfd for j in self._jobs.values() if j.pidfd is not None]
            servers = self._servers.fds()
            if not fds and not servers:
                return set()
            poller = select.poll()
            for fd in (*fds, *servers):
                poller.register(fd, select.POLLIN)
            left = max(deadline - time.monotonic(), 0.0)
            got = {fd for fd, _ in poller.poll(left * 1000.0)}
            answered = got.intersection(servers)
            ended = got - answered
            if answered and self._take_answers(block=False, ready=answered):
                return ended
            if ended or time.monotonic() >= deadline:
                return ended

    def _check(self, job: Job, now: float, ready: set[int]) -> JobStatus | None:
        if job.final is not None:
            return job.final
        if not job.launched and not job.reattached:
            return None  # still queued for resources
        if job.starting:  # its wrapper is being started: the server's answer tells the rest
            return JobStatus(job.job_id, JobState.RUNNING, node="localhost",
                             started_at=job.started_at)
        job.gone = False  # looked at: a wait no longer returns early for it
        exited = job.pidfd in ready if job.pidfd is not None else gone(job)
        if not exited:
            enforce_cancel(job, now, self.grace)
            exited = enforce_limit(job, now, self.grace)
        if exited:
            end = self._end_of(job)
            if end is not None:
                return end
        return JobStatus(job.job_id, JobState.RUNNING, node="localhost",
                         started_at=job.started_at)

    def _end_of(self, job: Job) -> JobStatus | None:
        """:func:`ended`, as the controller measured it (:func:`measured`)."""
        status = ended(job, self.clock, self._fresh)
        return None if status is None else measured(job, status, self.clock.monotonic())

    def _forget(self, job: Job) -> None:
        self._release(job)
        if job.pidfd is not None:
            os.close(job.pidfd)
            job.pidfd = None
        self._jobs.pop(job.job_id, None)

    def _cancel(self, job_ids: Sequence[str]) -> None:
        self._take_answers(block=True)  # every pid known: each started attempt is signalled
        now = self.clock.monotonic()
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is None or job.final is not None:
                continue
            if not job.launched and not job.reattached:
                self._queue.remove(job)
                job.final = JobStatus(job_id, JobState.CANCELLED, node="localhost",
                                      reason="cancelled before it started")
                continue
            ask_to_stop(job, now)

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        self._take_answers(block=True)
        for job_id, spec in jobs.items():
            job = Job(job_id, spec, reattached=True)
            self._jobs[job_id] = job
            ticks = reattach(job)
            if ticks is None:
                continue  # gone, or never started: the next poll says how it ended
            # Still running: it holds its CPUs (not its GPUs, which it names itself) until
            # it ends, so what this backend starts next stays within the limit.
            job.launched = True
            self._slots.take_cpus(spec.resources.cpus)
            # Started in another controller's time: its age by the kernel's clock (the
            # wrapper's start), which no wall-clock step moves.
            job.launched_mono = self.clock.monotonic() - age(ticks)

    def _wait(self, timeout: float) -> bool:
        """Wait for a wrapper to end. With attempts queued ahead (:meth:`limit_running`),
        settle each end and start the next attempt in its slot at once, and wait on until
        less than a round is left to start: the controller then takes in the ends of several
        attempts in one pass (one commit) while the slots stay busy."""
        if any(j.final is not None or j.gone for j in self._jobs.values()):
            return True
        if not any(j.pidfd is not None or j.starting for j in self._jobs.values()):
            return False
        # Woken for the next time limit the controller enforces itself, not a pass later.
        timeout = min(timeout, next_due(self._jobs.values(), self.clock.monotonic(),
                                        self.grace))
        deadline = time.monotonic() + timeout
        while True:
            ready = self._ended_fds(deadline - time.monotonic())
            if (not ready or self._limit is None or len(self._queue) < self._limit
                    or self.interrupted_at is not None):
                return True
            self._settle(ready)
            self._launch_ready()

    def _settle(self, ready: set[int]) -> None:
        """Record how the attempts whose wrappers ended (their pidfds in *ready*) ended, for
        the next poll to report, and free their slots."""
        for job in list(self._jobs.values()):
            if job.final is not None or job.pidfd is None or job.pidfd not in ready:
                continue
            status = self._end_of(job)
            if status is None:
                continue  # what is left of its session is still being killed
            job.final = status
            if job.pidfd is not None:
                os.close(job.pidfd)
                job.pidfd = None
            self._release(job)

    def _shutdown(self) -> None:
        """Wait (up to the grace period and a margin) for cancelled attempts to end."""
        self._take_answers(block=True)
        clock = self.clock
        deadline = clock.monotonic() + (self.grace + 5.0 if self.wait_on_shutdown else 0.0)
        live = [j for j in self._jobs.values() if j.cancel_at is not None and j.pid is not None]
        while live and clock.monotonic() < deadline:
            live = [j for j in live if not gone(j)]
            if live:
                clock.sleep(0.05)
        if self.wait_on_shutdown:
            for job in live:
                assert job.pid is not None
                kill_session(job.pid, job.ticks)
        self._servers.close()
