"""The unshare backend: every attempt is PID 1 of its own PID and mount namespace."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from dse import Backend, BackendError, ConfigError, JobSpec, JobState, JobStatus, parse_duration

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

UNSHARE_FLAGS = ("--fork", "--pid", "--mount-proc", "--kill-child")
"""A new PID namespace whose init is the trial's command, with its own ``/proc``; if
``unshare`` itself dies, its child (and with it the whole namespace) is killed."""

# sh stays outside the namespace and records unshare's exit status (the workload's) in a
# file, so a controller started later learns how an attempt it does not parent ended.
_RECORD_EXIT = 'd=$1; shift; "$@"; echo $? >"$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit_code"'
JOB_FILE, EXIT_FILE, STOP_FILE = "job.json", "exit_code", "stopped"
UNSHARE_LOST_SIGKILL = "unshare: sigprocmask unblock failed"
"""What util-linux 2.38 ``unshare`` prints, before exiting 1, when its child was SIGKILLed: it
cannot re-raise SIGKILL on itself, so the signal shows only in this line of stderr.log."""


def attempt_dir(spec: JobSpec) -> Path:
    """Where an attempt's ``stdout.log``, ``stderr.log`` and bookkeeping files live."""
    return spec.trial_dir / f"attempt-{spec.attempt}"


@dataclass(slots=True)
class _Job:
    spec: JobSpec
    dir: Path
    pid: int | None = None
    """The recording sh, leader of its own session (unshare is its child)."""
    ticks: int | None = None
    """The sh's start time in clock ticks: tells a reused pid apart."""
    started_at: float | None = None
    proc: subprocess.Popen[bytes] | None = None
    """Set when this backend started the job (and so must reap it)."""
    final: JobStatus | None = None
    """Set when the job ended without running (no command, a launch error)."""


class UnshareBackend(Backend):
    """Runs each attempt in a lightweight container: its own PID and mount namespace.

    The trial's command runs under ``unshare --fork --pid --mount-proc --kill-child`` and is
    PID 1 of a new PID namespace with a ``/proc`` of its own, so it sees only its own
    processes; when it ends or is killed, the kernel kills every process it left behind.
    Its environment is the controller's plus the job's ``env``, its working directory the
    job's ``cwd`` (default: the trial directory); output goes to ``stdout.log`` and
    ``stderr.log`` in ``<trial_dir>/attempt-<n>/``. Needs util-linux ``unshare`` and the
    right to create namespaces (root, or ``CAP_SYS_ADMIN``).

    Options (the ``[backend.unshare]`` table): ``grace`` — seconds between SIGTERM and
    SIGKILL when a job is cancelled or runs past its time limit (default 10). The kernel
    delivers SIGTERM to a namespace's init only if it handles it, so a workload that does
    not is killed when the grace period ends. Time limits are enforced at each poll.
    """

    name: ClassVar[str] = "unshare"
    version: ClassVar[str] = "0.1.0"
    default_poll_interval: ClassVar[tuple[float, float]] = (0.2, 1.0)

    def __init__(self, *, grace: float = 10.0) -> None:
        super().__init__()
        if grace < 0:
            msg = f"backend.unshare.grace: expected seconds >= 0, got {grace!r}"
            raise ConfigError(msg)
        self.grace = float(grace)
        self.overrun_s = self.grace + self.default_poll_interval[1]
        self._unshare = shutil.which("unshare")
        self._node = socket.gethostname()
        self._jobs: dict[str, _Job] = {}

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: str = "<campaign>") -> Self:
        opts = dict(options)
        if "grace" in opts:  # a campaign file may write "30s"
            opts["grace"] = parse_duration(opts["grace"], f"{source}: backend.unshare.grace")
        return super().from_options(opts, source=source)

    def job_id_for(self, job: JobSpec) -> str | None:
        return f"{job.trial_id}.{job.attempt}"

    # -- template methods -----------------------------------------------------------------

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        if self._unshare is None:
            msg = "util-linux `unshare` is not on PATH"
            raise BackendError(msg)
        ids = []
        for spec in jobs:
            job_id = f"{spec.trial_id}.{spec.attempt}"
            self._jobs[job_id] = job = _Job(spec, attempt_dir(spec))
            self._launch(job_id, job, self._unshare)
            ids.append(job_id)
        return ids

    def _launch(self, job_id: str, job: _Job, unshare: str) -> None:
        spec = job.spec
        argv = ("/bin/sh", "-c", spec.argv[0]) if spec.shell and spec.argv else spec.argv
        if not argv:
            job.final = JobStatus(job_id, JobState.INVALID, reason="the job has no command")
            return
        env = {**os.environ, **spec.env}
        # `python` in a command is the controller's interpreter, as with the local backend.
        env["PATH"] = os.pathsep.join(filter(None, [os.path.dirname(sys.executable),
                                                    env.get("PATH")]))
        cwd = spec.cwd or spec.trial_dir
        if shutil.which(argv[0], path=env["PATH"]) is None and not (
                os.sep in argv[0] and os.access(os.path.join(cwd, argv[0]), os.X_OK)):
            # The trial's own mistake, the same on every node: INVALID, not a launch error
            # (which dse retries) and not FAILED (which would read as a result).
            job.final = JobStatus(job_id, JobState.INVALID, node=self._node,
                                  reason=f"cannot run {argv[0]!r}: no such command")
            return
        command = ["/bin/sh", "-c", _RECORD_EXIT, "dse-unshare", str(job.dir),
                   unshare, *UNSHARE_FLAGS, "--", *argv]
        # Before it starts: a short job may end (its exit file written) before Popen returns
        # here on a loaded machine, and it cannot end before it started.
        started = time.time()
        try:
            job.dir.mkdir(parents=True, exist_ok=True)
            with (
                open(job.dir / "stdout.log", "wb") as out,
                open(job.dir / "stderr.log", "wb") as err,
            ):
                job.proc = subprocess.Popen(
                    command, cwd=cwd, env=env,
                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                )
        except OSError as exc:
            job.final = JobStatus(job_id, JobState.LAUNCH_ERROR, node=self._node,
                                  reason=f"{type(exc).__name__}: {exc}")
            return
        job.pid, job.started_at = job.proc.pid, started
        job.ticks = _start_ticks(job.pid)
        with contextlib.suppress(OSError):  # only a controller restarted later needs it
            _write_atomic(job.dir / JOB_FILE, json.dumps(
                {"pid": job.pid, "ticks": job.ticks, "started_at": job.started_at}))

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        now = time.time()
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is None:
                status = JobStatus(job_id, JobState.LOST, reason="unknown to this backend")
            elif job.final is not None:
                status = job.final
            elif self._alive(job):
                self._enforce(job, now)
                status = JobStatus(job_id, JobState.RUNNING, node=self._node,
                                   started_at=job.started_at)
            else:
                status = self._ended(job_id, job)
            out[job_id] = status
            if status.state.is_finished():
                self._jobs.pop(job_id, None)
        return out

    def _alive(self, job: _Job) -> bool:
        if job.proc is not None:
            return job.proc.poll() is None
        return job.pid is not None and job.ticks is not None and _start_ticks(job.pid) == job.ticks

    def _enforce(self, job: _Job, now: float) -> None:
        """Stop a job past its time limit; SIGKILL a stopped job once its grace is over."""
        try:
            stopped_at = (job.dir / STOP_FILE).stat().st_mtime
        except FileNotFoundError:
            limit, started = job.spec.time_limit, job.started_at
            if limit is not None and started is not None and now - started > limit:
                self._stop(job, "timeout")
            return
        if now - stopped_at > self.grace:
            self._kill(job, signal.SIGKILL)

    def _ended(self, job_id: str, job: _Job) -> JobStatus:
        stopped = _read(job.dir / STOP_FILE)
        code_text = _read(job.dir / EXIT_FILE)
        code = int(code_text) if code_text is not None and code_text.isdigit() else None
        ended_at = _mtime(job.dir / EXIT_FILE)
        if ended_at is not None and job.started_at is not None:
            # A file's time is the kernel's coarse clock (up to a tick behind time.time()).
            ended_at = max(ended_at, job.started_at)
        reason = None
        killed_by: int | None = None
        if stopped == "cancelled":
            state = JobState.CANCELLED
        elif stopped == "timeout":
            state = JobState.TIMEOUT
            reason = f"over its time limit of {job.spec.time_limit or 0:g}s"
        elif code == 0:
            state = JobState.SUCCEEDED
        elif code == 1 and _last_line(job.dir / "stderr.log").startswith(UNSHARE_LOST_SIGKILL):
            # SIGKILLed, and not by this backend (it records why it stops a job first): the
            # OOM killer, an operator. Not a result about the design: dse decides on a retry.
            state, code, killed_by = JobState.KILLED, None, int(signal.SIGKILL)
            reason = "killed by SIGKILL from outside dse"
        elif code is not None and code > 128:
            # unshare passes a signal death on by dying of the same signal; sh records it as
            # 128 + the signal. Not sent by this backend (it records why it stops a job
            # first): ambiguous, as above.
            state, killed_by, code = JobState.KILLED, code - 128, None
            reason = f"killed by signal {killed_by} from outside dse"
        elif code is not None:
            state = JobState.FAILED  # unshare passes the workload's exit status on
        else:  # killed from outside before it could record one, or never started at all
            state = JobState.LOST
            reason = ("the attempt ended without recording its exit status" if job.pid
                      else "the attempt never started (its controller stopped first)")
        return JobStatus(job_id, state, exit_code=code, signal=killed_by, node=self._node,
                         started_at=job.started_at, ended_at=ended_at or time.time(),
                         reason=reason,
                         ambiguous=state is JobState.KILLED
                         or (state is JobState.LOST and job.pid is not None))

    def _stop(self, job: _Job, why: str) -> None:
        """Record why the job is being stopped (a later controller reads it), then SIGTERM."""
        _write_atomic(job.dir / STOP_FILE, why)
        self._kill(job, signal.SIGTERM)

    def _kill(self, job: _Job, sig: signal.Signals) -> None:
        """Signal the namespace's init: when it dies, the kernel kills the whole namespace."""
        if job.pid is None:
            return
        init = _ns_init(job.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if init is not None:
                os.kill(init, sig)
            elif sig is signal.SIGKILL:  # not forked yet: unshare and sh die with their group
                os.killpg(job.pid, sig)

    def _cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is not None and self._alive(job) and not (job.dir / STOP_FILE).exists():
                self._stop(job, "cancelled")

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        for job_id, spec in jobs.items():
            self._jobs[job_id] = job = _Job(spec, attempt_dir(spec))
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                doc = json.loads((job.dir / JOB_FILE).read_text())
                job.pid, job.ticks = int(doc["pid"]), doc["ticks"]
                job.started_at = float(doc["started_at"])

    def _shutdown(self) -> None:
        """Give stopped jobs their grace period (none if told not to wait), then SIGKILL."""
        stopping = [j for j in self._jobs.values()
                    if (j.dir / STOP_FILE).exists() and self._alive(j)]
        deadline = time.monotonic() + (self.grace if self.wait_on_shutdown else 0.0)
        while stopping and time.monotonic() < deadline:
            time.sleep(0.05)
            stopping = [j for j in stopping if self._alive(j)]
        for job in stopping:
            self._kill(job, signal.SIGKILL)
            if job.proc is not None and self.wait_on_shutdown:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    job.proc.wait(timeout=5.0)


def _ns_init(pid: int) -> int | None:
    """Host pid of the namespace's init: the child of the unshare that sh *pid* runs."""
    for _ in range(2):  # sh -> unshare -> init
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return None
        if len(children) != 1:
            return None
        pid = int(children[0])
    return pid


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``None``: gone or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return None if fields[0] == b"Z" else int(fields[19])


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _last_line(path: Path) -> str:
    """The last non-empty line of *path* ('' if none or unreadable); reads only its tail."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line for line in tail.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None
