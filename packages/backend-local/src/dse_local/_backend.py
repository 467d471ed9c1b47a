"""The local backend: each attempt is a real process tree on this machine."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import py_compile
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from dse import (
    Backend,
    ConfigError,
    JobSpec,
    JobState,
    JobStatus,
    Resources,
    did_you_mean,
    parse_duration,
    stderr_tail,
)
from dse_local._wrapper import encode_request, read_small

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

log = logging.getLogger("dse.local")

WRAPPER = Path(__file__).with_name("_launch.py")
EXIT_FILE = "exit.json"
PID_FILE = "wrapper.pid"




AHEAD_ROUNDS = 3
"""Attempts the backend queues, in rounds of the attempts it runs at once."""
MAX_SPARES = 4
"""Most wrappers the wrapper server keeps forked ahead (one per slot up to this)."""
_HOST = socket.gethostname()
"""This machine's name: every task's DSE_NODE and DSE_NODES."""


def _compile_wrapper() -> None:
    """Cache the wrapper's bytecode (it starts once per trial), even where
    PYTHONDONTWRITEBYTECODE is set or the install skipped compiling."""
    source = WRAPPER.with_name("_wrapper.py")
    cached = Path(importlib.util.cache_from_source(str(source)))
    try:
        if not cached.exists() or cached.stat().st_mtime < source.stat().st_mtime:
            py_compile.compile(str(source), cfile=str(cached), doraise=True)
    except (OSError, py_compile.PyCompileError) as exc:
        log.debug("cannot cache the wrapper's bytecode: %s", exc)


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


def attempt_dir(spec: JobSpec) -> Path:
    """Where an attempt's logs and exit file live."""
    return spec.trial_dir / f"attempt-{spec.attempt}"


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    if fields[0] == b"Z":
        return None
    return int(fields[19])


@dataclass(slots=True)
class _Job:
    job_id: str
    spec: JobSpec
    launched: bool = False
    pid: int | None = None
    ticks: int | None = None
    pidfd: int | None = None
    sid: int | None = None
    """The wrapper's pid, which is its session's id: what is left of the attempt when the
    wrapper died is found by it."""
    sid_ticks: int | None = None
    """The wrapper's start time (tells a reused pid apart)."""
    orphans_since: float | None = None
    """When processes of the session were first found still alive after the wrapper died."""
    gpus: tuple[int, ...] = ()
    cancel_at: float | None = None
    killed_at: float | None = None
    final: JobStatus | None = None
    started_at: float | None = None
    reattached: bool = False
    released: bool = False
    request: tuple[dict[str, str], list[str]] | None = None
    """The wrapper's environment and arguments, made when the job was submitted (its
    directories too), so that starting it when a slot frees is one request to the server."""
    gone: bool = False
    """Its wrapper ended before it could be watched (no pidfd): the next poll reads its end,
    so a wait returns at once rather than sleeping the poll interval."""


class _Server:
    """The wrapper server (``_wrapper.serve``): hands each attempt to a wrapper it forked ahead.

    Starting a Python interpreter per attempt would cost every trial tens of milliseconds,
    and forking one (twice: the wrapper, then its workload) several on this path; the server
    keeps *spares* wrappers forked ahead, each with its workload's first process forked too,
    so a request costs a pipe round trip. Wrappers live in sessions of their own, so they
    outlive the server and the controller.
    """

    def __init__(self, python: str) -> None:
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self.spares = 1

    def start(self, spares: int) -> None:
        """Start the server now, with *spares* wrappers forked ahead (it starts at the first
        request otherwise)."""
        self.spares = spares
        if self.proc is None or self.proc.poll() is not None:
            self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.proc = subprocess.Popen(
            [self.python, "-S", str(WRAPPER), "--serve", str(self.spares)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, bufsize=0,
        )
        return self.proc

    def spawn(
        self, requests: Sequence[tuple[Mapping[str, str], Sequence[str]]]
    ) -> list[tuple[int, int] | OSError]:
        """Start a wrapper for each (environment, arguments) of *requests*, all sent at once;
        return each one's pid and start time (clock ticks since boot), its pid file written,
        or why it could not start."""
        out: list[tuple[int, int] | OSError] = []
        for retry in (False, True):
            todo = requests[len(out):]
            proc = self.proc if self.proc is not None and self.proc.poll() is None else None
            proc = proc or self._start()
            assert proc.stdin is not None
            assert proc.stdout is not None
            message = b"".join(
                b"%d\n%s" % (len(payload), payload)
                for payload in (encode_request(env, list(args)) for env, args in todo)
            )
            try:
                proc.stdin.write(message)
                for line in self._lines(proc.stdout.fileno(), len(todo)):
                    words = line.split()
                    if len(words) == 2 and words[0].isdigit() and words[1].isdigit():
                        out.append((int(words[0]), int(words[1])))
                    elif words == [b"0"]:  # the server runs, but no wrapper took it
                        out.append(OSError("the wrapper server could not start a wrapper"))
                    else:
                        break
            except OSError:
                pass
            if len(out) == len(requests):
                return out
            self.close()
            if retry:
                break
        out.extend(OSError("the wrapper server did not answer") for _ in requests[len(out):])
        return out

    @staticmethod
    def _lines(fd: int, count: int) -> list[bytes]:
        """The next *count* lines the server writes (fewer if it ends first), read a pipe's
        worth at a time (its replies are all it writes, and it writes them once asked)."""
        data = b""
        while data.count(b"\n") < count:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        return data.split(b"\n")[: data.count(b"\n")]

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


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
    or, after a restart, by the one that reattaches. GPUs are handed out exclusively
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
        self.overrun_s = self.grace + 1.0
        _compile_wrapper()
        self._server = _Server(os.path.realpath(sys.executable))
        self._server.spares = min(self.cpus, MAX_SPARES)
        self._bin_dir = os.path.dirname(sys.executable)
        self._jobs: dict[str, _Job] = {}
        self._queue: deque[_Job] = deque()
        self._free_cpus = self.cpus
        self._free_gpus = list(range(self.gpus))
        self._limit: int | None = None
        """At most this many attempts run at once (:meth:`limit_running`)."""
        # Attempts may wait here beyond those that run (limit_running sizes how many), each
        # started the moment a slot frees: the controller's pass is then off the path from
        # one trial to the next.
        self.queue_ahead = AHEAD_ROUNDS * self.cpus

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: str = "<campaign>") -> Self:
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
        try:
            return cls(**opts)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def job_id_for(self, job: JobSpec) -> str | None:
        return f"{job.trial_id}.{job.attempt}"

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
            job = _Job(job_id, spec)
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
        return ids

    def _prepare(self, job: _Job) -> bool:
        """Make *job*'s directories and its wrapper's request; whether it can be started (else
        its end is set)."""
        made = _request(job.spec, self.grace, self._bin_dir)
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
        self._server.start(min(limit or self.cpus, MAX_SPARES))

    def _running(self) -> int:
        """Attempts launched (or reattached alive) and not yet released."""
        return sum(1 for j in self._jobs.values() if j.launched and not j.released)

    def _launch_ready(self) -> None:
        """Start the queued jobs that fit, in order, all in one request to the server."""
        ready = []
        while self._queue:
            job = self._queue[0]
            res = job.spec.resources
            if res.cpus > self._free_cpus or res.gpus > len(self._free_gpus):
                break
            if self._limit is not None and self._running() >= self._limit:
                break
            self._queue.popleft()
            self._free_cpus -= res.cpus
            job.gpus = tuple(self._free_gpus[: res.gpus])
            del self._free_gpus[: res.gpus]
            job.launched = True
            ready.append(job)
        if ready:
            self._launch(ready)

    def _release(self, job: _Job) -> None:
        if not job.launched or job.released:
            return
        job.released = True
        self._free_cpus += job.spec.resources.cpus
        self._free_gpus.extend(job.gpus)
        self._free_gpus.sort()

    def _launch(self, jobs: Sequence[_Job]) -> None:
        requests = []
        for job in jobs:
            assert job.request is not None
            env, args = job.request
            job.request = None
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpus)
            env["DSE_NODE"] = env["DSE_NODES"] = _HOST  # one task, here (the trial contract)
            requests.append((env, args))
        replies = self._server.spawn(requests)
        started = self.clock.time()
        for job, reply in zip(jobs, replies, strict=True):
            if isinstance(reply, OSError):
                job.final = JobStatus(
                    job.job_id, JobState.LAUNCH_ERROR, node="localhost",
                    reason=f"{type(reply).__name__}: {reply}",
                )
                self._release(job)
                continue
            job.started_at = started
            self._watch(job, *reply)

    def _watch(self, job: _Job, pid: int, ticks: int) -> None:
        """Watch *job*'s wrapper *pid*, started at *ticks*. It wrote its pid file (pid and
        start time) before the server answered: a later controller finds it from there."""
        job.pid = job.sid = pid
        job.ticks = job.sid_ticks = ticks
        try:
            job.pidfd = os.pidfd_open(pid)
        except OSError:
            job.pidfd = None  # already gone: the exit file tells the rest
        if job.pidfd is not None and _start_ticks(pid) != ticks:
            os.close(job.pidfd)  # it ended, and the pid may be another process's now
            job.pidfd = None
        if job.pidfd is None:
            # The wrapper ended before we looked (a command that fails at once): never wait
            # on its pid; the exit file tells the rest.
            job.pid = None
            job.gone = True

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        now = self.clock.time()
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
        """Pidfds of wrappers that ended (one ``poll`` call for all of them)."""
        fds = [j.pidfd for j in self._jobs.values() if j.pidfd is not None]
        if not fds:
            return set()
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        return {fd for fd, _ in poller.poll(max(timeout, 0.0) * 1000.0)}

    def _check(self, job: _Job, now: float, ready: set[int]) -> JobStatus | None:
        if job.final is not None:
            return job.final
        if not job.launched and not job.reattached:
            return None  # still queued for resources
        job.gone = False  # looked at: a wait no longer returns early for it
        if job.pidfd is not None:
            exited = job.pidfd in ready
        else:
            exited = job.pid is None or _start_ticks(job.pid) != job.ticks
        if exited:
            ended = self._ended(job)
            if ended is not None:
                return ended
        else:
            self._enforce_cancel(job, now)
        return JobStatus(job.job_id, JobState.RUNNING, node="localhost",
                         started_at=job.started_at)

    def _enforce_cancel(self, job: _Job, now: float) -> None:
        """If the wrapper ignores a cancel for too long, kill its whole session."""
        if job.cancel_at is None or job.killed_at is not None or job.pid is None:
            return
        if now - job.cancel_at > self.grace + 5.0:
            job.killed_at = now
            log.warning("attempt %s ignored its cancel; killing its session", job.job_id)
            _kill_session(job.pid, job.ticks)

    def _ended(self, job: _Job) -> JobStatus | None:
        """How the attempt whose wrapper is gone ended; ``None`` while processes of its
        session are still alive (it has not ended until they are gone)."""
        spec = job.spec
        # The attempt directory is the trial's to write: read_small follows no symlink and
        # never waits on a FIFO an earlier attempt may have left there.
        raw = read_small(str(attempt_dir(spec) / EXIT_FILE))
        try:
            doc = json.loads(raw) if raw is not None else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            state = JobState.CANCELLED if job.cancel_at is not None else JobState.LOST
            if not (attempt_dir(spec) / PID_FILE).exists():
                # No wrapper pid file: the wrapper, which writes it before it starts the
                # workload, never ran (its controller stopped while launching it). The
                # workload cannot have caused the loss: not ambiguous, so two such losses
                # never confirm a failure of the configuration.
                lost = "the attempt never started (its controller stopped while launching it)"
                return JobStatus(job.job_id, state, node="localhost", reason=lost,
                                 ended_at=self.clock.time())
            if not _session_ended(job, self.clock.time):
                return None
            lost = "the attempt's wrapper ended without writing exit.json"
            return JobStatus(job.job_id, state, node="localhost", reason=lost,
                             started_at=job.started_at, ended_at=self.clock.time(),
                             ambiguous=state is JobState.LOST)
        return _exit_status(job.job_id, spec, doc)

    def _forget(self, job: _Job) -> None:
        self._release(job)
        if job.pidfd is not None:
            os.close(job.pidfd)
            job.pidfd = None
        self._jobs.pop(job.job_id, None)

    def _cancel(self, job_ids: Sequence[str]) -> None:
        now = self.clock.time()
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is None or job.final is not None:
                continue
            if not job.launched and not job.reattached:
                self._queue.remove(job)
                job.final = JobStatus(job_id, JobState.CANCELLED, node="localhost",
                                      reason="cancelled before it started")
                continue
            if job.cancel_at is None and job.pid is not None:
                job.cancel_at = now
                with contextlib.suppress(ProcessLookupError):
                    if job.pidfd is not None:  # never a reused pid
                        signal.pidfd_send_signal(job.pidfd, signal.SIGTERM)
                    else:
                        os.kill(job.pid, signal.SIGTERM)

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        for job_id, spec in jobs.items():
            job = _Job(job_id, spec, reattached=True)
            self._jobs[job_id] = job
            adir = attempt_dir(spec)
            try:
                words = (read_small(str(adir / PID_FILE)) or b"").split()
                pid, recorded = int(words[0]), int(words[1])
            except (ValueError, IndexError):
                continue  # never started: decided by the exit file at the next poll
            # Its session id, even if the wrapper has died: what is left of it is killed
            # before the attempt ends (the next poll).
            job.sid, job.sid_ticks = pid, recorded or None
            ticks = _start_ticks(pid)
            if ticks is None or (recorded and ticks != recorded):
                continue  # ended, or the pid now belongs to another process
            job.pid = pid
            job.ticks = ticks
            with contextlib.suppress(OSError):
                job.pidfd = os.pidfd_open(pid)
            # Still running: it holds its CPUs (not its GPUs, which it names itself) until
            # it ends, so what this backend starts next stays within the limit.
            job.launched = True
            self._free_cpus -= spec.resources.cpus

    def _wait(self, timeout: float) -> bool:
        """Wait for a wrapper to end. With attempts queued ahead (:meth:`limit_running`),
        settle each end and start the next attempt in its slot at once, and wait on until
        less than a round is left to start: the controller then takes in the ends of several
        attempts in one pass (one commit) while the slots stay busy."""
        if any(j.final is not None or j.gone for j in self._jobs.values()):
            return True
        if not any(j.pidfd is not None for j in self._jobs.values()):
            return False
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
            status = self._ended(job)
            if status is None:
                continue  # what is left of its session is still being killed
            job.final = status
            if job.pidfd is not None:
                os.close(job.pidfd)
                job.pidfd = None
            self._release(job)

    def _shutdown(self) -> None:
        """Wait (up to the grace period and a margin) for cancelled attempts to end."""
        clock = self.clock
        deadline = clock.time() + (self.grace + 5.0 if self.wait_on_shutdown else 0.0)
        live = [j for j in self._jobs.values() if j.cancel_at is not None and j.pid is not None]
        while live and clock.time() < deadline:
            live = [j for j in live if not _gone(j)]
            if live:
                clock.sleep(0.05)
        if self.wait_on_shutdown:
            for job in live:
                assert job.pid is not None
                _kill_session(job.pid, job.ticks)
        self._server.close()


def _session_ended(job: _Job, now: Callable[[], float]) -> bool:
    """Kill what is left of the session of a wrapper that died without its exit file (an
    OOM killer, an operator's ``kill -9``); whether none of it is left.

    The wrapper is the one that ends its workload; once it is gone, nothing else would:
    the workload would run on, unlimited and uncharged, beside the retry of its own trial
    and write into a trial already recorded. So the attempt ends only once every process
    of its session is gone (SIGKILL cannot be ignored, but a process in uninterruptible
    sleep dies only when it wakes: until then the attempt stays ``running``).
    """
    if job.pidfd is not None:
        os.close(job.pidfd)  # the wrapper has ended: never wait on it again
        job.pidfd = None
    job.pid = None
    if job.sid is None:
        return True
    deadline = time.monotonic() + 1.0
    left = _kill_session(job.sid, job.sid_ticks)
    if left and job.orphans_since is None:
        log.warning("attempt %s: its wrapper died without its exit file; killing what is"
                    " left of its session (pids %s)", job.job_id, " ".join(map(str, left)))
    while left:
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
        left = _kill_session(job.sid, job.sid_ticks)
    if not left:
        return True
    at = now()
    if job.orphans_since is None:
        job.orphans_since = at
    elif at - job.orphans_since > 30.0:
        log.warning("attempt %s: its wrapper died and %d process(es) of its session"
                    " survive SIGKILL (pids %s)", job.job_id, len(left),
                    " ".join(map(str, left)))
        job.orphans_since = at
    return False


def _exit_status(job_id: str, spec: JobSpec, doc: Mapping[str, Any]) -> JobStatus:
    """How an attempt ended, from the exit file its wrapper wrote (*doc*)."""
    code = doc.get("exit_code")
    sig = doc.get("signal")
    reason: str | None = None
    ambiguous = False
    if doc.get("launch_error"):
        # exec() refused the trial's own command: it would fail the same way again.
        state = JobState.INVALID
        reason = str(doc["launch_error"])
    elif doc.get("cancelled"):
        state = JobState.CANCELLED
    elif doc.get("timed_out"):
        state = JobState.TIMEOUT
        reason = f"over its time limit of {spec.time_limit:g}s" if spec.time_limit else None
    elif code == 0:
        state = JobState.SUCCEEDED
    elif code is not None:
        state = JobState.FAILED
        # The command's own last words (its exception), else the core says "exit code N".
        reason = stderr_tail(attempt_dir(spec) / "stderr.log")
    elif sig == signal.SIGKILL:
        # Nobody here sent it: the OOM killer, an operator, or a dying node.
        state = JobState.KILLED
        ambiguous = True
        reason = "killed by SIGKILL from outside dse"
    else:
        state = JobState.FAILED
        said = stderr_tail(attempt_dir(spec) / "stderr.log")
        reason = f"killed by signal {sig}" + (f": {said}" if said else "")
    return JobStatus(
        job_id, state, exit_code=code, signal=sig, node="localhost",
        started_at=doc.get("started_at"), ended_at=doc.get("ended_at"), reason=reason,
        ambiguous=ambiguous, peak_rss_kb=doc.get("peak_rss_kb"),
    )


def _request(
    spec: JobSpec, grace: float, bin_dir: str
) -> tuple[dict[str, str], list[str]] | JobStatus:
    """The environment and arguments of *spec*'s wrapper, its directories made; or why it
    cannot start."""
    job_id = f"{spec.trial_id}.{spec.attempt}"
    adir = attempt_dir(spec)
    argv = ["/bin/sh", "-c", spec.argv[0], "dse-trial"] if spec.shell else list(spec.argv)
    if not argv:
        return JobStatus(job_id, JobState.INVALID, node="localhost",
                         reason="the job has no command (set [environment] command)")
    refused = _unsafe_item(argv, spec.env)
    if refused is not None:
        return JobStatus(job_id, JobState.INVALID, node="localhost", reason=refused)
    try:
        adir.mkdir(parents=True, exist_ok=True)
        spec.checkpoint_dir.mkdir(exist_ok=True)
    except OSError as exc:
        return JobStatus(job_id, JobState.LAUNCH_ERROR, node="localhost",
                         reason=f"{type(exc).__name__}: {exc}")
    env = dict(os.environ)
    env.update(spec.env)
    env["PATH"] = os.pathsep.join(filter(None, [bin_dir, env.get("PATH")]))
    args = [
        str(adir), repr(grace), "" if spec.time_limit is None else repr(spec.time_limit),
        str(adir / "stdout.log"), str(adir / "stderr.log"), str(spec.cwd or spec.trial_dir),
        "--", *argv,
    ]
    return env, args


def _unsafe_item(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why *argv* or *env* cannot reach a process intact (a NUL ends a C string; ``=`` in a
    name moves where the name ends), or ``None``."""
    for i, item in enumerate(argv):
        if "\0" in item:
            return f"argv item {i} {item!r} holds a NUL byte"
    for key, value in env.items():
        if not key or "=" in key or "\0" in key:
            return f"environment variable name {key!r} is empty or holds '=' or a NUL byte"
        if "\0" in value:
            return f"environment variable {key}={value!r} holds a NUL byte"
    return None


def _gone(job: _Job) -> bool:
    return job.pid is None or _start_ticks(job.pid) != job.ticks


def _kill_session(sid: int, leader_ticks: int | None) -> list[int]:
    """SIGKILL every live process of the session *sid* (a wrapper's session: its id is the
    wrapper's pid, started at *leader_ticks*); return the pids it found.

    Linux gives out a pid again only once no process has it as its pid, process group or
    session: while any process of the session lives, the number is the session's. So a live
    process *sid* that is not the wrapper (another start time) means the session is empty
    and the number reused: nothing is killed.
    """
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[3]) != sid or fields[0] in (b"Z", b"X"):
            continue  # another session's, or ended (a zombie cannot run or write)
        pid = int(name)
        if pid == sid and (leader_ticks is None or int(fields[19]) != leader_ticks):
            return []  # the pid was reused: a session of someone else's
        members.append(pid)
    for pid in members:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return members
