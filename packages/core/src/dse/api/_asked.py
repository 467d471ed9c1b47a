"""The ``ask`` backend: the runner of a campaign whose trials a Python loop evaluates itself
(:func:`dse.ask_tell`). The asking loop is the command; this backend is where its trials wait.

Every job's state lives on disk, in its attempt's directory (``<trial_dir>/attempt-<n>/``),
so that any process driving the campaign reads the same state:

* ``ask.json`` — written when the engine submits the attempt: the trial is **ready**, waiting
  for an asker (its params, number, data version);
* ``asked.json`` — written (atomically, under the campaign's lock) when a loop's ``ask()`` takes
  it: the asker (host, pid, its process's start), when it was asked, how long it may go without
  a word (``expire_s``) and when it last gave one (``renewed_at``);
* ``told.json`` — written by ``tell()`` (under the lock), after the trial's ``result.json``
  (:func:`dse.trial.write_result`, as any trial writes it): how it ended, ``succeeded`` or
  ``failed`` with the asker's words;
* ``stop.json`` — written when the attempt must end without its tell: ``cancel`` (a stopping
  rule's stop, the run stopped), ``time_limit`` (past ``[environment] time_limit``),
  ``killed`` (its asker is gone) or ``preempted`` (its asker went silent past its expiry, or
  gave it back). The asker sees it (``trial.should_stop``); a later tell is not written.

:meth:`AskBackend._poll` reads them: ready → ``PENDING``, asked → ``RUNNING`` (started when
asked), told → ``SUCCEEDED`` or ``FAILED`` (a result about the design), a cancel →
``CANCELLED``, past the time limit → ``TIMEOUT`` (ended at the limit), an asker gone (its pid
ended, on this host) → ``KILLED``, ambiguous (the evaluation may have killed it: retried once,
the same end twice is a failure), an asker silent past its expiry or that gave the trial back
→ ``PREEMPTED``. Both are interruptions, which the engine retries as a new attempt of the same
trial, ready again for another asker. Job ids are ``<trial_id>.<attempt>``
(:meth:`AskBackend.job_id_for`), so a controller rebuilt from the record in another process
reattaches to them.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dse.engine._trialdirs import start_attempt_dir
from dse.model._trialfile import read_trial_file, write_trial_file
from dse.model._types import JobState, JobStatus
from dse.plugins._backend import Backend
from dse.record._lock import LockHolder
from dse.trial import write_result

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from dse.model._types import JobSpec

log = logging.getLogger("dse.ask")

ASK_FILE = "ask.json"
"""The job, ready to be asked."""
ASKED_FILE = "asked.json"
"""Who asked it, when, and until when it may go without a word."""
TOLD_FILE = "told.json"
"""How the asker said it ended."""
STOP_FILE = "stop.json"
"""Why it must end without its tell."""

_ENDS = {"cancel": JobState.CANCELLED, "time_limit": JobState.TIMEOUT,
         "killed": JobState.KILLED, "preempted": JobState.PREEMPTED}
"""The end each kind of stop is reported as. An asker gone is ``killed`` (whatever killed it,
the trial's evaluation may have: ambiguous, retried once, the same end twice a failure); an
asker silent past its expiry, or one that gave its trial back, had it taken away:
``preempted`` (an interruption)."""


@dataclass(frozen=True, slots=True)
class Ticket:
    """A ready attempt handed to an asker (:meth:`AskBackend.take`)."""

    job_id: str
    """The attempt's job id (``<trial_id>.<attempt>``)."""
    trial_id: str
    """``<campaign>-<run>-<number>``."""
    number: int
    """The trial's number in its run."""
    attempt: int
    """The attempt's number, from 1 (a retried trial's is more)."""
    params: Mapping[str, Any]
    """The trial's params."""
    trial_dir: Path
    """The trial's directory (its ``result.json``, ``progress.jsonl``, ``checkpoint/``)."""
    data_version: str | None
    """The data version the trial is dispatched against."""
    token: str
    """What the asker holds: a tell or a give-back of another token is refused."""


def attempt_dir(trial_dir: Path, attempt: int) -> Path:
    """Where the state of attempt *attempt* of the trial in *trial_dir* is kept."""
    return trial_dir / f"attempt-{attempt}"


def read_state(directory: Path, name: str) -> dict[str, Any] | None:
    """The JSON object of the state file *name* in *directory*, or ``None`` (missing, or not
    one: a file this backend did not write whole is no state)."""
    try:
        doc = json.loads(read_trial_file(directory, name))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_state(directory: Path, name: str, doc: Mapping[str, Any]) -> None:
    """Replace the state file *name* in *directory* with *doc*, atomically."""
    write_trial_file(directory, name, json.dumps(dict(doc), sort_keys=True).encode())


def stop_reason(trial_dir: Path, attempt: int) -> str | None:
    """Why attempt *attempt* of the trial in *trial_dir* must end without its tell, in words;
    ``None`` while it may go on (what an asker reads: no lock needed)."""
    stop = read_state(attempt_dir(trial_dir, attempt), STOP_FILE)
    return None if stop is None else str(stop.get("why") or stop.get("kind") or "stopped")


def renew(trial_dir: Path, attempt: int, token: str) -> None:
    """The asker holding *token* gives a word: its expiry starts again from now. A trial no
    longer its own (ended, asked by another) is left as it is."""
    where = attempt_dir(trial_dir, attempt)
    asked = read_state(where, ASKED_FILE)
    if asked is None or asked.get("token") != token or asked.get("expire_s") is None:
        return
    if read_state(where, STOP_FILE) is None:
        write_state(where, ASKED_FILE, {**asked, "renewed_at": time.time()})


class AskBackend(Backend):
    """Trials evaluated by the loops that ask for them (see the module): nothing runs here;
    each attempt waits, ready, in its directory until a loop asks for it, and ends when that
    loop tells how it went. Its methods beyond :class:`~dse.Backend`'s (:meth:`ready`,
    :meth:`take`, :meth:`tell`, :meth:`give_back`) are called under the campaign's lock."""

    name: ClassVar[str] = "ask"
    version: ClassVar[str] = "1"
    default_poll_interval: ClassVar[tuple[float, float]] = (0.05, 1.0)
    runs_commands: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self._jobs: dict[str, JobSpec] = {}
        self._seen: dict[str, JobState] = {}
        """The state of each job as the last poll read it."""
        self._refused: dict[str, JobStatus] = {}
        """Jobs whose directory could not be made: launch errors, reported at the next poll."""
        self._cancelled: set[str] = set()
        """Jobs this backend was asked to cancel."""
        self.host = socket.gethostname()

    def job_id_for(self, job: JobSpec) -> str | None:
        return f"{job.trial_id}.{job.attempt}"

    # -- template methods -------------------------------------------------------------------

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        ids = []
        for spec in jobs:
            job_id = f"{spec.trial_id}.{spec.attempt}"
            self._jobs[job_id] = spec
            ids.append(job_id)
            try:
                moved = start_attempt_dir(spec)
                write_state(attempt_dir(spec.trial_dir, spec.attempt), ASK_FILE, {
                    "trial_id": spec.trial_id, "attempt": spec.attempt,
                    "number": _number(spec.trial_id), "params": dict(spec.params),
                    "data_version": spec.env.get("DSE_DATA_VERSION") or None,
                    "time_limit": spec.time_limit, "submitted_at": self.clock.time(),
                })
            except OSError as exc:
                self._refused[job_id] = JobStatus(job_id, JobState.LAUNCH_ERROR,
                                                  reason=f"cannot ready it: {exc}")
                continue
            self._seen[job_id] = JobState.PENDING
            if moved:
                log.warning("trial %s: moved aside what was in its directory: %s",
                            spec.trial_id, "; ".join(moved))
        return ids

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        self._jobs.update(jobs)

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        now = self.clock.time()
        out: dict[str, JobStatus] = {}
        for job_id in job_ids:
            status = self._refused.pop(job_id, None) or self._status(job_id, now)
            self._seen[job_id] = status.state
            out[job_id] = status
        return out

    def _cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            spec = self._jobs.get(job_id)
            self._cancelled.add(job_id)
            if spec is not None:
                self._stop(spec, "cancel", "stopped by the campaign (a stopping rule, or the"
                                           " run stopped)")

    # -- what the asking loop does, under the campaign's lock --------------------------------

    def cancelling(self) -> bool:
        """Whether a job this backend was asked to cancel is not yet reported ended (the next
        poll reports it)."""
        return any(job_id in self._cancelled for job_id in self.outstanding)

    def ready(self) -> list[str]:
        """The outstanding jobs waiting for an asker, oldest trial first."""
        ids = [j for j in self.outstanding if self._seen.get(j) is JobState.PENDING]
        return sorted(ids, key=lambda j: (_number(self._jobs[j].trial_id), self._jobs[j].attempt))

    def take(self, holder: LockHolder, expire: float | None) -> Ticket | None:
        """Hand the oldest ready job to *holder* (its ``asked.json`` written), who gives a word
        at least every *expire* seconds (``None``: needs not); ``None`` when none is ready."""
        for job_id in self.ready():
            spec = self._jobs[job_id]
            where = attempt_dir(spec.trial_dir, spec.attempt)
            if any(read_state(where, n) is not None for n in (ASKED_FILE, STOP_FILE, TOLD_FILE)):
                continue  # not as the last poll saw it: the next poll says what it is
            token = secrets.token_hex(8)
            now = time.time()
            write_state(where, ASKED_FILE, {
                "holder": holder.as_record(), "asked_at": now, "renewed_at": now,
                "expire_s": expire, "token": token,
            })
            self._seen[job_id] = JobState.RUNNING
            return Ticket(job_id, spec.trial_id, _number(spec.trial_id), spec.attempt,
                          dict(spec.params), spec.trial_dir,
                          spec.env.get("DSE_DATA_VERSION") or None, token)
        return None

    def is_open(self, ticket: Ticket) -> bool:
        """Whether *ticket*'s attempt is still outstanding, asked by its holder, and neither
        told nor to be stopped: whether a tell of it may be written."""
        if ticket.job_id not in self.outstanding:
            return False
        where = attempt_dir(ticket.trial_dir, ticket.attempt)
        asked = read_state(where, ASKED_FILE)
        return (asked is not None and asked.get("token") == ticket.token
                and read_state(where, STOP_FILE) is None and read_state(where, TOLD_FILE) is None)

    def tell(self, ticket: Ticket, metrics: Mapping[str, Any] | None,
             failure: str | None) -> bool:
        """Write how *ticket*'s attempt ended: its ``result.json`` (*metrics*, as
        :func:`dse.trial.report` writes it) and ``told.json``, or ``told.json`` alone with the
        *failure*'s words; False (nothing written) when it may no longer be told
        (:meth:`is_open`)."""
        if not self.is_open(ticket):
            return False
        if metrics is not None:
            write_result(ticket.trial_dir, metrics, data_version=ticket.data_version)
        write_state(attempt_dir(ticket.trial_dir, ticket.attempt), TOLD_FILE, {
            "state": "failed" if failure is not None else "succeeded", "message": failure,
            "told_at": time.time(),
        })
        return True

    def give_back(self, ticket: Ticket) -> None:
        """*ticket*'s asker will not tell it (its loop is closed): the attempt ends ``lost``
        at the next poll, and its trial is retried."""
        spec = self._jobs.get(ticket.job_id)
        if spec is not None and self.is_open(ticket):
            self._stop(spec, "preempted", "given back by its asker (its loop was closed)")

    # -- reading the state ----------------------------------------------------------------

    def _status(self, job_id: str, now: float) -> JobStatus:
        spec = self._jobs.get(job_id)
        if spec is None:
            return JobStatus(job_id, JobState.LOST, reason="not a job of this run")
        where = attempt_dir(spec.trial_dir, spec.attempt)
        if read_state(where, ASK_FILE) is None:
            return JobStatus(job_id, JobState.LOST, reason="it was never made ready to be asked")
        asked = read_state(where, ASKED_FILE)
        started = _float(asked.get("asked_at")) if asked is not None else None
        node = str(asked["holder"].get("host")) if asked is not None and isinstance(
            asked.get("holder"), dict) else None
        told = read_state(where, TOLD_FILE)
        if told is not None and started is not None:
            ended = _float(told.get("told_at")) or now
            if told.get("state") == "failed":
                return JobStatus(job_id, JobState.FAILED, exit_code=1, node=node,
                                 started_at=started, ended_at=ended,
                                 reason=str(told.get("message") or "failed"))
            return JobStatus(job_id, JobState.SUCCEEDED, exit_code=0, node=node,
                             started_at=started, ended_at=ended)
        stop = read_state(where, STOP_FILE)
        if stop is None and asked is not None and started is not None:
            stop = self._judge(spec, asked, started, now)
        if stop is not None:
            state = _ENDS.get(str(stop.get("kind")), JobState.CANCELLED)
            return JobStatus(job_id, state, node=node, started_at=started,
                             ended_at=_float(stop.get("at")) or now,
                             reason=str(stop.get("why") or "stopped"),
                             ambiguous=state is JobState.KILLED)
        if asked is None or started is None:
            return JobStatus(job_id, JobState.PENDING)
        return JobStatus(job_id, JobState.RUNNING, node=node, started_at=started)

    def _judge(self, spec: JobSpec, asked: Mapping[str, Any], started: float,
               now: float) -> dict[str, Any] | None:
        """The stop an asked attempt is due (past its time limit, its asker gone or silent
        past its expiry), written for its asker to see; ``None`` while it may go on."""
        limit = spec.time_limit
        if limit is not None and now >= started + limit:
            return self._stop(spec, "time_limit", f"time limit {limit:g} s", started + limit)
        holder = LockHolder.from_json(json.dumps(asked.get("holder")))
        if holder is None:
            return self._stop(spec, "killed", "its asked marker names no asker", now)
        if holder.host == self.host and (not holder.is_running() or _ended(holder.pid)):
            return self._stop(spec, "killed", f"its asker (pid {holder.pid} on {holder.host})"
                                              " is gone", now)
        expire, renewed = _float(asked.get("expire_s")), _float(asked.get("renewed_at"))
        if expire is not None and renewed is not None and now > renewed + expire:
            return self._stop(spec, "preempted", f"its asker ({holder.describe()}) gave no word"
                                                 f" for {now - renewed:.0f} s (expire ="
                                                 f" {expire:g} s): asked again", now)
        return None

    def _stop(self, spec: JobSpec, kind: str, why: str,
              at: float | None = None) -> dict[str, Any]:
        """Mark *spec*'s attempt to end without its tell (its asker sees it); the stop."""
        where = attempt_dir(spec.trial_dir, spec.attempt)
        stop = {"kind": kind, "why": why, "at": time.time() if at is None else at}
        if read_state(where, STOP_FILE) is None and read_state(where, TOLD_FILE) is None:
            try:
                write_state(where, STOP_FILE, stop)
            except OSError as exc:  # its directory gone: reported all the same
                log.warning("trial %s: cannot mark it stopped: %s", spec.trial_id, exc)
        return stop


def _number(trial_id: str) -> int:
    """The trial number at the end of *trial_id* (``<campaign>-<run>-<number>``)."""
    tail = trial_id.rpartition("-")[2]
    return int(tail) if tail.isdigit() else 0


def _ended(pid: int) -> bool:
    """Whether process *pid* of this host ended and waits to be reaped (a zombie: its parent,
    a shell or a test, has not waited for it yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] == b"Z"


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
