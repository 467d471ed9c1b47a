"""One attempt as the local backend sees it: its wrapper, its files, its time limit, its end.

A :class:`Job` is the backend's record of one attempt; the functions here act on one job
alone (the backend owns the job table, the queue and the slots). Each attempt runs under a
wrapper (``_wrapper.py``) in a session of its own, which writes its pid file and its exit
file in ``<trial_dir>/attempt-<n>/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import select
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse import JobSpec, JobState, JobStatus, stderr_tail
from dse_local._procs import (
    find_wrapper,
    kill_marked,
    kill_session,
    pid_hint,
    start_ticks,
    stopped,
)
from dse_local._wrapper import open_attempt_dir, read_small

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from pathlib import Path

    from dse import Clock

log = logging.getLogger("dse.local")

EXIT_FILE = "exit.json"
PID_FILE = "wrapper.pid"
"""The wrapper's pid and start time, written by it in its attempt directory: a hint for a
controller that restarts, never believed alone (:func:`find_wrapper`)."""

LIMIT_MARGIN = 1.0
"""Seconds past an attempt's time limit its wrapper has to end it before the controller
does (by its own clock: a stopped wrapper cannot); the SIGKILL comes a grace period later,
at the end of the attempt's reservation (:attr:`LocalBackend.overrun_s`)."""
FORCED_ENDS = frozenset({JobState.LOST, JobState.CANCELLED, JobState.KILLED, JobState.FAILED})
"""The ends a wrapper reports (or its death leaves) when the controller ended the attempt at
its time limit: a time-out, whatever they say."""


def attempt_dir(spec: JobSpec) -> Path:
    """Where an attempt's logs and exit file live."""
    return spec.trial_dir / f"attempt-{spec.attempt}"


@dataclass(slots=True)
class Job:
    """One attempt as the backend sees it: queued, running under its wrapper, or ended."""

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
    starting: bool = False
    """Its wrapper was asked of the server, whose answer (its pid) has not been read yet."""
    gone: bool = False
    """Its wrapper ended before it could be watched (no pidfd): the next poll reads its end,
    so a wait returns at once rather than sleeping the poll interval."""
    launched_mono: float | None = None
    """When it was started, on the controller's monotonic clock (just before its wrapper
    was asked to start it; for one reattached, its wrapper's start by the kernel's clock):
    its time limit and its charge are measured from here, never from the wrapper's word."""
    limit_stage: int = 0
    """How far past its time limit the controller has looked at it (1: past the limit and
    the wrapper's margin; 2: at its reservation's end, everything of it SIGKILLed)."""
    forced: bool = False
    """The controller signalled it at its time limit itself (its wrapper stopped, or still
    running at the reservation's end)."""


def wrapper_request(
    spec: JobSpec, grace: float, bin_dir: str
) -> tuple[dict[str, str], list[str]] | JobStatus:
    """The environment and arguments of *spec*'s wrapper; or why it cannot start."""
    job_id = f"{spec.trial_id}.{spec.attempt}"
    adir = attempt_dir(spec)
    argv = ["/bin/sh", "-c", spec.argv[0], "dse-trial"] if spec.shell else list(spec.argv)
    if not argv:
        return JobStatus(job_id, JobState.INVALID, node="localhost",
                         reason="the job has no command (set [environment] command)")
    refused = unsafe_item(argv, spec.env)
    if refused is not None:
        return JobStatus(job_id, JobState.INVALID, node="localhost", reason=refused)
    # Its directories are made when it starts (LocalBackend._ready), not now: it may wait in
    # the queue while other trials run, and they can write where its directories go.
    env = dict(os.environ)
    env.update(spec.env)
    env["PATH"] = os.pathsep.join(filter(None, [bin_dir, env.get("PATH")]))
    args = [
        str(adir), repr(grace), "" if spec.time_limit is None else repr(spec.time_limit),
        str(adir / "stdout.log"), str(adir / "stderr.log"), str(spec.cwd or spec.trial_dir),
        "--", *argv,
    ]
    return env, args


def unsafe_item(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
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


def watch(job: Job, pid: int, ticks: int) -> None:
    """Watch *job*'s wrapper *pid*, started at *ticks*. It wrote its pid file (pid and
    start time) before the server answered: a later controller finds it from there."""
    job.pid = job.sid = pid
    job.ticks = job.sid_ticks = ticks
    try:
        job.pidfd = os.pidfd_open(pid)
    except OSError:
        job.pidfd = None  # already gone: the exit file tells the rest
    if job.pidfd is not None and start_ticks(pid) != ticks:
        os.close(job.pidfd)  # it ended, and the pid may be another process's now
        job.pidfd = None
    if job.pidfd is None:
        # The wrapper ended before we looked (a command that fails at once): never wait
        # on its pid; the exit file tells the rest.
        job.pid = None
        job.gone = True


def orphan_runs(attempt_path: Path) -> bool:
    """Whether the wrapper of the attempt in *attempt_path* still runs: the session leader
    working there (its pid file is the trial's to rewrite, so it is only a hint)."""
    try:
        fd = open_attempt_dir(str(attempt_path))
    except OSError:
        return False  # never started, or not there
    try:
        here = os.fstat(fd)
        hint = pid_hint(read_small(PID_FILE, dir_fd=fd))
    finally:
        os.close(fd)
    return find_wrapper((here.st_dev, here.st_ino), hint) is not None


def ended_lately(attempt_path: Path, within: float) -> bool:
    """Whether the wrapper of the attempt in *attempt_path* wrote, less than *within* seconds
    ago, an exit file saying its command exited 0: an orphan that just ended with a result
    its controller (killed, being restarted) has not recorded yet. One that failed, was
    killed or cancelled holds nothing worth waiting for."""
    path = attempt_path / EXIT_FILE
    try:
        if time.time() - os.stat(path).st_mtime >= within:
            return False
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("exit_code") == 0 and not doc.get("cancelled")


def reattach(job: Job) -> int | None:
    """Find the wrapper of *job* again (a controller that restarted) and watch it; return its
    start ticks while it runs, ``None`` when it is gone or never started (the next poll
    decides how it ended)."""
    try:
        fd = open_attempt_dir(str(attempt_dir(job.spec)))
    except OSError:
        return None  # never started: decided at the next poll
    try:
        here = os.fstat(fd)
        hint = pid_hint(read_small(PID_FILE, dir_fd=fd))
    finally:
        os.close(fd)
    # The pid file is the trial's to rewrite: only a process proven to be the
    # attempt's wrapper is watched or ever signalled.
    found = find_wrapper((here.st_dev, here.st_ino), hint)
    # (A wrapper that simply ended names its own pid, gone with it: nothing to say.)
    if hint is not None and found != hint and (found or start_ticks(hint[0]) is not None):
        log.warning("attempt %s: its %s names pid %d, which is not its wrapper (%s):"
                    " not believed", job.job_id, PID_FILE, hint[0],
                    f"pid {found[0]}" if found else "gone")
    if found is None:
        # Gone: the exit file says how it ended (the next poll), and what is left
        # of it is found by the attempt's own environment, never by that pid.
        return None
    pid, ticks = found
    job.pid = job.sid = pid
    job.ticks = job.sid_ticks = ticks
    with contextlib.suppress(OSError):
        job.pidfd = os.pidfd_open(pid)
    if job.pidfd is not None and start_ticks(pid) != ticks:
        os.close(job.pidfd)  # it ended as it was found: never watch that pid
        job.pidfd = None
        job.pid = None
        return None
    return ticks


def gone(job: Job) -> bool:
    """Whether *job*'s wrapper is gone (no pid watched, or that pid ended or is reused)."""
    return job.pid is None or start_ticks(job.pid) != job.ticks


def ask_to_stop(job: Job, now: float) -> None:
    """Cancel *job*: SIGTERM to its wrapper (once), which ends its workload (SIGTERM, its
    grace, SIGKILL) and writes its exit file; :func:`enforce_cancel` follows it up."""
    if job.cancel_at is None and job.pid is not None:
        job.cancel_at = now
        with contextlib.suppress(ProcessLookupError):
            if job.pidfd is not None:  # never a reused pid
                signal.pidfd_send_signal(job.pidfd, signal.SIGTERM)
            else:
                os.kill(job.pid, signal.SIGTERM)


def enforce_cancel(job: Job, now: float, grace: float) -> None:
    """If the wrapper ignores a cancel for too long, kill its whole session."""
    if job.cancel_at is None or job.killed_at is not None or job.pid is None:
        return
    if now - job.cancel_at > grace + 5.0:
        job.killed_at = now
        log.warning("attempt %s ignored its cancel; killing its session", job.job_id)
        kill_session(job.pid, job.ticks)


def deadlines(job: Job, grace: float) -> tuple[float, float] | None:
    """When (the controller's monotonic clock) *job* is past its time limit by the
    margin its wrapper has to end it, and when its reservation ends (the limit plus
    :attr:`LocalBackend.overrun_s`: nothing of it may run past that); ``None`` without a limit."""
    limit = job.spec.time_limit
    if limit is None or job.launched_mono is None:
        return None
    term = job.launched_mono + limit + LIMIT_MARGIN
    return term, term + grace


def next_due(jobs: Iterable[Job], now: float, grace: float) -> float:
    """Seconds from *now* to the next step the controller takes at a time limit of *jobs*
    (:func:`enforce_limit`; infinity when none is due)."""
    left = math.inf
    for job in jobs:
        due = deadlines(job, grace) if job.limit_stage < 2 and job.pid else None
        if due is not None:
            left = min(left, max(due[job.limit_stage] - now, 0.0))
    return left


def enforce_limit(job: Job, now: float, grace: float) -> bool:
    """End *job* at its time limit by the controller's own clock, whatever its wrapper
    does: the wrapper enforces the limit itself, but a wrapper stopped (SIGSTOP from
    outside, a debugger) cannot, and the attempt would run on, and be charged, past its
    reservation. Past the limit and the margin, a stopped wrapper's workload gets the
    SIGTERM the wrapper would have sent (a wrapper that runs is trusted with its own);
    at the reservation's end, or once only the stopped wrapper is left, everything of
    the attempt is SIGKILLed, the wrapper too. Whether it is over (then its end is read
    at once)."""
    due = deadlines(job, grace)
    if due is None or job.pid is None or job.limit_stage >= 2 or now < due[0]:
        return False
    if job.limit_stage == 0:
        job.limit_stage = 1
        if stopped(job.pid, job.ticks):
            log.warning("attempt %s: its wrapper is stopped and cannot end it at its time"
                        " limit; the controller does (SIGTERM)", job.job_id)
            job.forced = True
            kill_session(job.pid, job.ticks, signal.SIGTERM, spare_leader=True)
    if now < due[1] and (not job.forced
                         or set(kill_session(job.pid, job.ticks, 0)) - {job.pid}):
        return False  # within the grace, and more than the stopped wrapper is left
    job.limit_stage, job.forced = 2, True
    log.warning("attempt %s: %s; killing everything of it", job.job_id,
                "only its stopped wrapper is left" if now < due[1] else
                "still running at the end of its reservation (its time limit and the grace)")
    deadline = time.monotonic() + 1.0
    while kill_session(job.pid, job.ticks) and time.monotonic() < deadline:
        time.sleep(0.01)
    if job.pidfd is None:
        return gone(job)
    return bool(select.select([job.pidfd], [], [], max(deadline - time.monotonic(), 0.0))[0])


def ended(job: Job, clock: Clock, fresh: set[str]) -> JobStatus | None:
    """How the attempt whose wrapper is gone ended; ``None`` while processes of its
    session are still alive (it has not ended until they are gone).

    *fresh* is the backend's set of trials none of whose attempts started: an attempt that
    never started keeps its trial there, or puts it there if it was the trial's first.
    """
    spec = job.spec
    # The attempt directory is the trial's to write: reached and read without following
    # a symlink, never waiting on a FIFO.
    raw, ran = attempt_files(spec)
    try:
        doc = json.loads(raw) if raw is not None else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        state = JobState.CANCELLED if job.cancel_at is not None else JobState.LOST
        if not ran:
            # No wrapper pid file: the wrapper, which writes it before it starts the
            # workload, never ran (its controller stopped while launching it). The
            # workload cannot have caused the loss: not ambiguous, so two such losses
            # never confirm a failure of the configuration.
            lost = "the attempt never started (its controller stopped while launching it)"
            if spec.attempt == 1 or spec.trial_id in fresh:
                fresh.add(spec.trial_id)
            return JobStatus(job.job_id, state, node="localhost", reason=lost,
                             ended_at=clock.time())
        if not session_ended(job, clock.monotonic):
            return None
        lost = "the attempt's wrapper ended without writing exit.json"
        return JobStatus(job.job_id, state, node="localhost", reason=lost,
                         started_at=job.started_at, ended_at=clock.time(),
                         ambiguous=state is JobState.LOST)
    return exit_status(job.job_id, spec, doc)


def session_ended(job: Job, now: Callable[[], float]) -> bool:
    """Kill what is left of the session of a wrapper that died without its exit file (an
    OOM killer, an operator's ``kill -9``); whether none of it is left.

    The wrapper is the one that ends its workload; once it is gone, nothing else would:
    the workload would run on, unlimited and uncharged, beside the retry of its own trial
    and write into a trial already recorded. So the attempt ends only once every process
    of its session is gone (SIGKILL cannot be ignored, but a process in uninterruptible
    sleep dies only when it wakes: until then the attempt stays ``running``). A wrapper found
    gone by a restarted controller has no session it can prove is the attempt's: its
    processes are those carrying the attempt's environment (:func:`kill_marked`).
    """
    if job.pidfd is not None:
        os.close(job.pidfd)  # the wrapper has ended: never wait on it again
        job.pidfd = None
    job.pid = None
    sid, ticks = job.sid, job.sid_ticks

    def kill() -> list[int]:
        # A wrapper this controller watched: its session. One found gone after a restart:
        # the processes carrying the attempt's own environment (its pid is not known).
        return kill_session(sid, ticks) if sid is not None else kill_marked(job.spec)

    deadline = time.monotonic() + 1.0
    left = kill()
    if left and job.orphans_since is None:
        log.warning("attempt %s: its wrapper died without its exit file; killing what is"
                    " left of its session (pids %s)", job.job_id, " ".join(map(str, left)))
    while left:
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
        left = kill()
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


def exit_status(job_id: str, spec: JobSpec, doc: Mapping[str, Any]) -> JobStatus:
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
    elif doc.get("moved"):
        # The project moved while it ran: the paths it was handed led nowhere. Not the
        # configuration's doing, and not ambiguous: retried, never a confirmed failure.
        state = JobState.LOST
        reason = ("its directory moved while it ran (the project was moved): the paths it"
                  " was handed led nowhere")
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


def attempt_files(spec: JobSpec) -> tuple[bytes | None, bool]:
    """The exit file of *spec*'s attempt (``None``: none) and whether its wrapper ran (its
    pid file exists), read in the attempt directory reached without following a symlink."""
    try:
        fd = open_attempt_dir(str(attempt_dir(spec)))
    except OSError:
        return None, False
    try:
        raw = read_small(EXIT_FILE, dir_fd=fd)
        try:
            os.stat(PID_FILE, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return raw, False
        return raw, True
    finally:
        os.close(fd)


def measured(job: Job, status: JobStatus, now: float) -> JobStatus:
    """*job*'s end *status* as the controller measured it at *now* (its monotonic clock):
    how long the attempt ran (what the budget charges), and an end the controller forced at
    the time limit reported as the time-out it is."""
    if job.launched_mono is None:
        return status
    changes: dict[str, Any] = {"elapsed_s": max(now - job.launched_mono, 0.0)}
    if job.forced and not (status.state is JobState.CANCELLED and job.cancel_at
                           is not None) and status.state in FORCED_ENDS:
        # The controller ended it at its time limit (its wrapper stopped, or too slow to):
        # the trial's own ceiling, whatever the wrapper managed to write.
        limit = job.spec.time_limit
        changes.update(state=JobState.TIMEOUT, ambiguous=False, reason=(
            f"over its time limit of {limit:g}s; its wrapper did not end it (stopped),"
            " the controller did"))
    return dataclasses.replace(status, **changes)
