"""Reading ``squeue`` and ``sacct`` output and mapping Slurm job states (pure functions).

The backend asks for exactly these formats (:data:`SQUEUE_ARGS`, :data:`SACCT_ARGS`); the
parsers never raise on odd input: a line they cannot read is skipped, an unknown state maps
to ``LOST`` with ``ambiguous=True``. Array tasks are keyed ``<array id>_<task>``; a pending
range such as ``123_[5-9%2]`` or ``123_[1,4-6]`` is expanded into one row per task. A node
list in Slurm's compact form (``n[1-3,5]``) is expanded by :func:`expand_hostlist`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from dse import JobState

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "SACCT_ARGS",
    "SQUEUE_ARGS",
    "SacctRow",
    "SqueueRow",
    "expand_hostlist",
    "expand_job_ids",
    "node_is_failing",
    "parse_exit_code",
    "parse_sacct",
    "parse_squeue",
    "to_job_state",
]

SQUEUE_ARGS = ("squeue", "--noheader", "--format=%i|%T|%N|%r")
"""The squeue command :func:`parse_squeue` reads (add ``--jobs=<ids>``)."""
SACCT_ARGS = (
    "sacct", "-X", "--noheader", "--parsable2",
    "--format=JobID,State,ExitCode,NodeList,ElapsedRaw,Start,End,AllocTRES",
)
"""The sacct command :func:`parse_sacct` reads (add ``--jobs=<ids>``)."""

_SUCCEEDED = frozenset({"COMPLETED"})
_PENDING = frozenset({"PENDING", "CONFIGURING", "RESV_DEL_HOLD"})
_RUNNING = frozenset(
    {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"}
)
_REQUEUE = frozenset({"REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD"})
_ENDS = {
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.TIMEOUT,
    "PREEMPTED": JobState.PREEMPTED,
    "NODE_FAIL": JobState.NODE_FAIL,
    "BOOT_FAIL": JobState.BOOT_FAIL,
    "CANCELLED": JobState.CANCELLED,
}
_AMBIGUOUS = frozenset({"REVOKED", "SPECIAL_EXIT"})
_MAX_SIGNAL = 64  # SIGRTMAX on Linux; Slurm puts other codes there (0:125 for OUT_OF_MEMORY)

_FAILING_NODE = frozenset({"down", "drain", "drng", "drained", "draining", "fail", "failg",
                           "failing", "no_respond"})
_NODE_FLAGS = "*~#!%$@^-+"

_ARRAY_RANGE = re.compile(r"^(\d+)_\[([^\]]*)\]$")


@dataclass(frozen=True, slots=True)
class SqueueRow:
    """One job (or array task) as ``squeue`` lists it."""

    job_id: str
    """``<id>`` or ``<array id>_<task>``."""
    state: str
    """Slurm's state word (``PENDING``, ``RUNNING``, ...)."""
    nodes: str | None
    """Node list, ``None`` while pending."""
    reason: str | None
    """Slurm's reason (``Priority``, ``Resources``, ``BeginTime``), ``None`` for ``None``."""


@dataclass(frozen=True, slots=True)
class SacctRow:
    """One job (or array task) as ``sacct -X`` reports it (its last run)."""

    job_id: str
    """``<id>`` or ``<array id>_<task>``."""
    state: str
    """Slurm's state word, without the ``by <uid>`` of a cancellation."""
    exit_code: int | None
    """Exit status (the part before ``:``), ``None`` when unreadable."""
    signal: int | None
    """Signal (the part after ``:``), ``None`` when 0 or unreadable."""
    cancelled_by: int | None = None
    """The uid in ``CANCELLED by <uid>``, else ``None``."""
    nodes: str | None = None
    """Node list, ``None`` for ``None assigned``."""
    elapsed_s: int | None = None
    """Run time in seconds (``ElapsedRaw``)."""
    started_at: float | None = None
    """Start (seconds since the epoch, read in this machine's time zone), ``None`` if unknown."""
    ended_at: float | None = None
    """End, likewise."""
    alloc_tres: Mapping[str, str] = field(default_factory=dict)
    """Allocated trackable resources (``cpu``, ``mem``, ``gres/gpu``, ...), for cost."""


def expand_job_ids(text: str) -> list[str]:
    """``123_[5-9%2]`` → ``123_5`` … ``123_9``; anything else is returned as it is."""
    match = _ARRAY_RANGE.match(text)
    if match is None:
        return [text]
    base, body = match.group(1), match.group(2).split("%", 1)[0]
    ids: list[str] = []
    for part in body.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return [text]
        ids += [f"{base}_{task}" for task in range(int(low), int(high or low) + 1)]
    return ids


def expand_hostlist(text: str) -> list[str]:
    """The node names of Slurm's compact node list *text*, in Slurm's order (the order of
    ``SLURM_NODEID``): ``n[1-3,5]`` → ``n1``, ``n2``, ``n3``, ``n5``; ``gpu[01-02]`` keeps the
    zero padding; several brackets in one name (``r[1-2]n[1-2]``) give every combination;
    top-level commas separate names (``a1,b[2-3]``). A part it cannot read is kept as it is
    (never raises)."""
    items: list[str] = []
    depth, start = 0, 0
    for at, char in enumerate(text):
        if char == "," and depth == 0:
            items.append(text[start:at])
            start = at + 1
        elif char == "[":
            depth += 1
        elif char == "]":
            depth = max(depth - 1, 0)
    items.append(text[start:])
    return [name for item in items if item.strip() for name in _expand_host(item.strip())]


def _expand_host(item: str) -> list[str]:
    """One name of a node list, its first bracket expanded (and the rest, recursively)."""
    start = item.find("[")
    end = item.find("]", start)
    if start < 0 or end < 0:
        return [item]
    heads: list[str] = []
    for part in item[start + 1 : end].split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return [item]
        heads += [item[:start] + str(n).zfill(len(low))
                  for n in range(int(low), int(high or low) + 1)]
    return [head + tail for head in heads for tail in _expand_host(item[end + 1 :])]


def node_is_failing(state: str) -> bool:
    """Whether a node in ``sinfo``'s *state* (``%t``: ``down``, ``drain*``, ``idle``...) is
    one to blame for a job that ended on it: down, drained or draining, failing, or not
    responding (a trailing ``*``)."""
    word = state.strip().lower()
    return word.endswith("*") or word.rstrip(_NODE_FLAGS) in _FAILING_NODE


def parse_squeue(text: str) -> dict[str, SqueueRow]:
    """Rows of ``squeue --noheader --format=%i|%T|%N|%r``, keyed by job id."""
    rows: dict[str, SqueueRow] = {}
    for line in text.splitlines():
        fields = line.strip().split("|", 3)
        if len(fields) != 4 or not fields[0]:
            continue
        job, state, nodes, reason = fields
        for job_id in expand_job_ids(job):
            rows[job_id] = SqueueRow(
                job_id, state, nodes or None, None if reason in ("", "None") else reason
            )
    return rows


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """``"3:0"`` → ``(3, None)``, ``"0:15"`` → ``(0, 15)``; unreadable parts are ``None``."""
    status, _, sig = text.strip().partition(":")
    code = int(status) if status.isdigit() else None
    signal = int(sig) if sig.isdigit() and int(sig) else None
    return code, signal


def _time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:  # Unknown, None, empty
        return None


def parse_sacct(text: str) -> dict[str, SacctRow]:
    """Rows of :data:`SACCT_ARGS`'s output, keyed by job id; a later line for the same id
    (a later run) wins."""
    rows: dict[str, SacctRow] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 8 or not fields[0]:
            continue
        job, state_text, exit_text, nodes, elapsed, start, end, tres = fields
        state, _, by = state_text.partition(" by ")
        code, signal = parse_exit_code(exit_text)
        alloc = dict(
            item.split("=", 1) for item in tres.split(",") if "=" in item
        )
        for job_id in expand_job_ids(job):
            rows[job_id] = SacctRow(
                job_id=job_id, state=state.strip(), exit_code=code, signal=signal,
                cancelled_by=int(by) if by.strip().isdigit() else None,
                nodes=None if nodes in ("", "None assigned") else nodes,
                elapsed_s=int(elapsed) if elapsed.isdigit() else None,
                started_at=_time(start), ended_at=_time(end), alloc_tres=alloc,
            )
    return rows


def to_job_state(
    state: str, exit_code: str | None = None, *, queued: bool = False
) -> tuple[JobState, int | None, int | None, bool]:
    """Map a Slurm state and ``ExitCode`` (``"status:signal"``) to
    ``(state, exit status, signal, ambiguous)``.

    * ``COMPLETED`` → SUCCEEDED; ``FAILED`` → FAILED with the exit status, or KILLED
      (ambiguous) when a signal ended it — without cgroups Slurm's memory kill is
      ``FAILED 0:9``, so a signal there is not the workload's own failure;
    * ``OUT_OF_MEMORY``, ``TIMEOUT`` (and ``DEADLINE``), ``PREEMPTED``, ``NODE_FAIL``,
      ``BOOT_FAIL``, ``CANCELLED`` (``CANCELLED by <uid>`` too) → the same-named state; the
      backend turns CANCELLED into an interruption when dse did not ask for it;
    * ``REQUEUED``, ``REQUEUE_FED``, ``REQUEUE_HOLD`` → PREEMPTED: the run was taken away by
      the infrastructure, and PREEMPTED is the interruption JobState closest to that. With
      ``queued=True`` (the job is still in ``squeue``) they are PENDING instead: Slurm will run
      the same job again;
    * ``PENDING``, ``CONFIGURING`` → PENDING; ``RUNNING``, ``COMPLETING``, ``SUSPENDED``,
      ``STOPPED``, ``SIGNALING``, ``RESIZING`` → RUNNING;
    * ``REVOKED``, ``SPECIAL_EXIT`` and any unknown word → LOST, ambiguous. Never raises.

    The exit status is given for SUCCEEDED and FAILED only; the signal whenever it is a real
    signal number (``0:125`` of an OOM kill is not).
    """
    word = state.strip().split(" ", 1)[0].upper() if state.strip() else ""
    code, signal = parse_exit_code(exit_code) if exit_code else (None, None)
    if signal is not None and signal > _MAX_SIGNAL:
        signal = None
    if word in _SUCCEEDED:
        return JobState.SUCCEEDED, code if code is not None else 0, None, False
    if word == "FAILED":
        if signal is not None and not code:
            return JobState.KILLED, None, signal, True
        return JobState.FAILED, code, signal, False
    if word in _PENDING or (queued and word in _REQUEUE):
        return JobState.PENDING, None, None, False
    if word in _RUNNING:
        return JobState.RUNNING, None, None, False
    if word in _REQUEUE:
        return JobState.PREEMPTED, None, signal, False
    if word in _ENDS:
        return _ENDS[word], None, signal, False
    return JobState.LOST, None, signal, True
