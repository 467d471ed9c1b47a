"""The local backend: each attempt is a real process tree on this machine."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from dse import Backend, ConfigError, JobSpec, JobState, JobStatus

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

log = logging.getLogger("dse.local")

WRAPPER = Path(__file__).with_name("_wrapper.py")
EXIT_FILE = "exit.json"
PID_FILE = "wrapper.pid"


_BLOCKED = {signal.SIGTERM, signal.SIGINT}


def _write_pid_file(adir: Path, pid: int) -> None:
    """Record the wrapper's pid and start time, so a later controller can find it."""
    tmp = adir / (PID_FILE + ".tmp")
    tmp.write_text(f"{pid} {_start_ticks(pid) or 0}\n")
    os.replace(tmp, adir / PID_FILE)


def _find_wrapper(adir: Path) -> int | None:
    """The pid of a wrapper running for *adir*, found by its command line."""
    needle = str(adir).encode()
    marker = WRAPPER.name.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                args = handle.read().split(b"\0")
        except OSError:
            continue
        if len(args) > 3 and args[2].endswith(marker) and args[3] == needle:
            return int(name)
    return None


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
    state: JobState = JobState.PENDING
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    pidfd: int | None = None
    gpus: tuple[int, ...] = ()
    cancel_at: float | None = None
    killed_at: float | None = None
    final: JobStatus | None = None
    started_at: float | None = None
    reattached: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class LocalBackend(Backend):
    """Runs attempts as process trees on this machine, within CPU and GPU slots.

    Options (the ``[backend.local]`` table):

    * ``cpus`` — CPU slots (default: the CPUs this process may use);
    * ``gpus`` — GPU slots (default: what ``nvidia-smi -L`` lists);
    * ``grace`` — seconds between SIGTERM and SIGKILL on a cancel or a time-out (default 10).

    Each attempt runs under a small wrapper (``_wrapper.py``) in a session of its own; the
    wrapper writes ``exit.json`` in ``<trial_dir>/attempt-<n>/``, so a controller restarted
    later learns how an attempt it no longer parents ended. GPUs are handed out exclusively
    through ``CUDA_VISIBLE_DEVICES``; a job waits in the backend's queue until its CPUs and
    GPUs are free (first come, first served).
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
        self._python = os.path.realpath(sys.executable)
        self._jobs: dict[str, _Job] = {}
        self._queue: deque[_Job] = deque()
        self._free_cpus = self.cpus
        self._free_gpus = list(range(self.gpus))

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: str = "<campaign>") -> Self:
        unknown = sorted(set(options) - {"cpus", "gpus", "grace"})
        if unknown:
            raise ConfigError(f"{source}: backend.local: unknown option(s) {unknown}")
        for key in ("cpus", "gpus"):
            value = options.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise ConfigError(f"{source}: backend.local.{key}: expected an integer")
        try:
            return cls(**options)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

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
                    job_id, JobState.LAUNCH_ERROR, node="localhost",
                    reason=f"asks for {res.cpus} CPUs and {res.gpus} GPUs; this machine has"
                    f" {self.cpus} CPU slots and {self.gpus} GPUs",
                )
            else:
                self._queue.append(job)
            ids.append(job_id)
        self._launch_ready()
        return ids

    def _launch_ready(self) -> None:
        while self._queue:
            job = self._queue[0]
            res = job.spec.resources
            if res.cpus > self._free_cpus or res.gpus > len(self._free_gpus):
                return
            self._queue.popleft()
            self._free_cpus -= res.cpus
            job.gpus = tuple(self._free_gpus[: res.gpus])
            del self._free_gpus[: res.gpus]
            self._launch(job)

    def _release(self, job: _Job) -> None:
        if job.proc is None and not job.reattached:
            return
        if job.extra.get("released"):
            return
        job.extra["released"] = True
        if not job.reattached:
            self._free_cpus += job.spec.resources.cpus
            self._free_gpus.extend(job.gpus)
            self._free_gpus.sort()

    def _launch(self, job: _Job) -> None:
        spec = job.spec
        adir = attempt_dir(spec)
        argv = ["/bin/sh", "-c", spec.argv[0], "dse-trial"] if spec.shell else list(spec.argv)
        try:
            if not argv:
                raise ValueError("the job has no command (set [environment] command)")
            adir.mkdir(parents=True, exist_ok=True)
            spec.checkpoint_dir.mkdir(exist_ok=True)
            env = dict(os.environ)
            env.update(spec.env)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpus)
            cmd = [
                self._python, "-S", str(WRAPPER), str(adir), repr(self.grace),
                "" if spec.time_limit is None else repr(spec.time_limit),
                str(adir / "stdout.log"), str(adir / "stderr.log"),
                str(spec.cwd or spec.trial_dir), "--", *argv,
            ]
            # Blocked across the fork so that a cancel arriving before the wrapper installed
            # its handlers waits for them instead of killing it silently.
            old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
            try:
                job.proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, env=env, start_new_session=True, close_fds=True,
                )
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            _write_pid_file(adir, job.proc.pid)
        except (OSError, ValueError) as exc:
            job.final = JobStatus(
                job.job_id, JobState.LAUNCH_ERROR, node="localhost",
                reason=f"{type(exc).__name__}: {exc}",
            )
            self._release(job)
            return
        job.pid = job.proc.pid
        job.started_at = time.time()
        try:
            job.pidfd = os.pidfd_open(job.pid)
        except OSError:
            job.pidfd = None

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        now = time.monotonic()
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is None:
                out[job_id] = JobStatus(job_id, JobState.LOST, reason="unknown to this backend")
                continue
            status = self._check(job, now)
            if status is not None:
                out[job_id] = status
                if status.state.is_finished():
                    self._forget(job)
        self._launch_ready()
        return out

    def _check(self, job: _Job, now: float) -> JobStatus | None:
        if job.final is not None:
            return job.final
        if job.proc is None and not job.reattached:
            return None  # still queued for resources
        exited = False
        if job.proc is not None:
            exited = job.proc.poll() is not None
        elif job.pid is not None:
            exited = _start_ticks(job.pid) != job.extra.get("ticks")
        else:
            exited = True
        if not exited:
            self._enforce_cancel(job, now)
            return JobStatus(job.job_id, JobState.RUNNING, node="localhost",
                             started_at=job.started_at)
        return self._ended(job)

    def _enforce_cancel(self, job: _Job, now: float) -> None:
        """If the wrapper ignores a cancel for too long, kill its whole session."""
        if job.cancel_at is None or job.killed_at is not None or job.pid is None:
            return
        if now - job.cancel_at > self.grace + 5.0:
            job.killed_at = now
            log.warning("attempt %s ignored its cancel; killing its session", job.job_id)
            _kill_session(job.pid)

    def _ended(self, job: _Job) -> JobStatus:
        spec = job.spec
        path = attempt_dir(spec) / EXIT_FILE
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = None
        if not isinstance(doc, dict):
            wrapper_code = job.proc.returncode if job.proc is not None else None
            lost = "the attempt's wrapper ended without writing exit.json"
            if wrapper_code is not None and wrapper_code < 0:
                lost += f" (killed by signal {-wrapper_code})"
            state = JobState.CANCELLED if job.cancel_at is not None else JobState.LOST
            return JobStatus(job.job_id, state, node="localhost", reason=lost,
                             started_at=job.started_at, ended_at=time.time(),
                             ambiguous=state is JobState.LOST)
        code = doc.get("exit_code")
        sig = doc.get("signal")
        reason: str | None = None
        ambiguous = False
        if doc.get("launch_error"):
            state = JobState.LAUNCH_ERROR
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
        elif sig == signal.SIGKILL:
            # Nobody here sent it: the OOM killer, an operator, or a dying node.
            state = JobState.KILLED
            ambiguous = True
            reason = "killed by SIGKILL from outside dse"
        else:
            state = JobState.FAILED
            reason = f"killed by signal {sig}"
        return JobStatus(
            job.job_id, state, exit_code=code, signal=sig, node="localhost",
            started_at=doc.get("started_at"), ended_at=doc.get("ended_at"), reason=reason,
            ambiguous=ambiguous, peak_rss_kb=doc.get("peak_rss_kb"),
        )

    def _forget(self, job: _Job) -> None:
        self._release(job)
        if job.pidfd is not None:
            os.close(job.pidfd)
            job.pidfd = None
        self._jobs.pop(job.job_id, None)

    def _cancel(self, job_ids: Sequence[str]) -> None:
        now = time.monotonic()
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is None or job.final is not None:
                continue
            if job.proc is None and not job.reattached:
                self._queue.remove(job)
                job.final = JobStatus(job_id, JobState.CANCELLED, node="localhost",
                                      reason="cancelled before it started")
                continue
            if job.cancel_at is None and job.pid is not None:
                job.cancel_at = now
                with contextlib.suppress(ProcessLookupError):
                    os.kill(job.pid, signal.SIGTERM)

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        for job_id, spec in jobs.items():
            job = _Job(job_id, spec, reattached=True, state=JobState.RUNNING)
            self._jobs[job_id] = job
            adir = attempt_dir(spec)
            pid: int | None
            recorded: int | None = None
            try:
                words = (adir / PID_FILE).read_text().split()
                pid, recorded = int(words[0]), int(words[1])
            except (OSError, ValueError, IndexError):
                # The controller may have died between starting the wrapper and writing the
                # pid file: look for the wrapper by its command line.
                pid = _find_wrapper(adir)
            if pid is None:
                continue  # never started, or gone: decided by the exit file at the next poll
            ticks = _start_ticks(pid)
            if ticks is None or (recorded and ticks != recorded):
                continue  # ended, or the pid now belongs to another process
            job.pid = pid
            job.extra["ticks"] = ticks
            try:
                job.pidfd = os.pidfd_open(pid)
            except OSError:
                job.pidfd = None

    def _wait(self, timeout: float) -> bool:
        fds = [j.pidfd for j in self._jobs.values() if j.pidfd is not None]
        if not fds:
            return bool(any(j.final is not None for j in self._jobs.values()))
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        poller.poll(max(timeout, 0.0) * 1000.0)
        return True

    def _shutdown(self) -> None:
        """Wait (up to the grace period and a margin) for cancelled attempts to end."""
        deadline = time.monotonic() + self.grace + 5.0
        live = [j for j in self._jobs.values() if j.cancel_at is not None and j.pid is not None]
        while live and time.monotonic() < deadline:
            live = [j for j in live if not _gone(j)]
            if live:
                time.sleep(0.05)
        for job in live:
            _kill_session(job.pid)  # type: ignore[arg-type]
        for job in list(self._jobs.values()):
            if job.proc is not None and job.proc.poll() is None:
                continue
            if job.pidfd is not None:
                os.close(job.pidfd)
                job.pidfd = None


def _gone(job: _Job) -> bool:
    if job.proc is not None:
        return job.proc.poll() is not None
    return job.pid is None or _start_ticks(job.pid) != job.extra.get("ticks")


def _kill_session(pid: int) -> None:
    """SIGKILL every process in the session *pid* leads (the wrapper's session)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[3]) == pid:
            with contextlib.suppress(OSError):
                os.kill(int(name), signal.SIGKILL)
