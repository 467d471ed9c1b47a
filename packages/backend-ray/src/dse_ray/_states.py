"""How an attempt on Ray ended, as a raw :class:`dse.JobState`: from its tasks' exit documents
(what the supervisors wrote) or from the error Ray raised instead of the actor's answer.

The mapping follows Slurm's (``docs/slurm.md``): a node lost under the attempt is
``NODE_FAIL`` (retried elsewhere, the node avoided), a node drained for preemption (a spot
node taken back, the autoscaler's ``DRAIN_NODE_REASON_PREEMPTION``) is ``PREEMPTED``, a tree
over its memory ``OUT_OF_MEMORY``, a command that cannot start ``INVALID``.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

from dse import JobState, JobStatus, stderr_tail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

ORDER = (
    JobState.NODE_FAIL, JobState.PREEMPTED, JobState.LAUNCH_ERROR, JobState.LOST,
    JobState.TIMEOUT, JobState.OUT_OF_MEMORY, JobState.INVALID, JobState.FAILED,
    JobState.KILLED, JobState.CANCELLED, JobState.SUCCEEDED,
)
"""Of the ends of an attempt's tasks, the one that names the attempt's end comes first: the
cause, not the tasks the cause took down with it (one rank failing cancels the others)."""


def log_name(rank: int, stream: str) -> str:
    """Rank 0's ``stdout.log``, rank *r*'s ``stdout.<r>.log`` (the trial contract)."""
    return f"{stream}.log" if rank == 0 else f"{stream}.{rank}.log"


def exit_name(rank: int) -> str:
    """The exit document of rank *rank* in the attempt directory."""
    return "exit.json" if rank == 0 else f"exit.{rank}.json"


def task_state(doc: Mapping[str, Any], attempt_dir: Path, *, cancelled: bool
               ) -> tuple[JobState, str | None, bool]:
    """(state, reason, ambiguous) of one task's exit document *doc*; *cancelled*: dse asked."""
    rank = int(doc.get("rank") or 0)
    code, sig = doc.get("exit_code"), doc.get("signal")
    if doc.get("launch_error"):
        return JobState.INVALID, str(doc["launch_error"]), False
    if doc.get("start_error"):
        # The node could not start the supervisor: the infrastructure's, retried.
        return JobState.LAUNCH_ERROR, f"the node could not start it: {doc['start_error']}", False
    if doc.get("out_of_memory"):
        return JobState.OUT_OF_MEMORY, "its processes passed the memory asked (memory_mb)", False
    if doc.get("timed_out"):
        return JobState.TIMEOUT, "over its time limit", False
    if doc.get("cancelled") or (cancelled and code != 0):
        return JobState.CANCELLED, None, False
    if doc.get("orphaned"):
        return JobState.LOST, "its Ray actor died while it ran", False
    if doc.get("supervisor_died") is not None:
        return JobState.LOST, "its supervisor died without an exit document", True
    if code == 0:
        return JobState.SUCCEEDED, None, False
    if code is not None:
        return JobState.FAILED, stderr_tail(attempt_dir / log_name(rank, "stderr")), False
    if sig == signal.SIGKILL:
        return JobState.KILLED, "killed by SIGKILL from outside dse", True
    said = stderr_tail(attempt_dir / log_name(rank, "stderr"))
    return JobState.FAILED, f"killed by signal {sig}" + (f": {said}" if said else ""), False


def from_documents(job_id: str, docs: Sequence[Mapping[str, Any]], attempt_dir: Path, *,
                   cancelled: bool, nodes: Sequence[str]) -> JobStatus:
    """The end of attempt *job_id* from every task's exit document *docs*."""
    ends = [(task_state(doc, attempt_dir, cancelled=cancelled), doc) for doc in docs]
    (state, reason, ambiguous), worst = min(ends, key=lambda e: ORDER.index(e[0][0]))
    rank0 = next((d for d in docs if int(d.get("rank") or 0) == 0), docs[0])
    started = [d["started_at"] for d in docs if isinstance(d.get("started_at"), int | float)]
    ended = [d["ended_at"] for d in docs if isinstance(d.get("ended_at"), int | float)]
    peaks = [d["peak_rss_kb"] for d in docs if isinstance(d.get("peak_rss_kb"), int)]
    node = ",".join(nodes) if nodes else worst.get("node")
    if state is not JobState.SUCCEEDED and len(nodes) > 1:
        node = worst.get("node") or node
    return JobStatus(
        job_id, state, exit_code=worst.get("exit_code") if state is JobState.FAILED
        else rank0.get("exit_code"), signal=worst.get("signal"), node=node,
        started_at=min(started) if started else None, ended_at=max(ended) if ended else None,
        reason=reason, ambiguous=ambiguous, peak_rss_kb=max(peaks) if peaks else None,
    )


def from_error(job_id: str, exc: BaseException, *, node: str | None, cancelled: bool,
               started_at: float | None, ended_at: float) -> JobStatus | None:
    """The end of attempt *job_id* whose actor Ray reports failed with *exc* (where it ran:
    *node*, when known); ``None`` when Ray says the actor is only unavailable for now."""
    import ray.exceptions as rex

    if isinstance(exc, rex.ActorUnavailableError):
        return None
    text = str(exc)
    words = " ".join(line.strip() for line in text.splitlines()[-2:])[:300]
    state, ambiguous = JobState.LOST, True
    if isinstance(exc, rex.RayActorError) and getattr(exc, "preempted", False):
        state, ambiguous = JobState.PREEMPTED, False
    elif "its node has died" in text or "node was terminated" in text:
        state, ambiguous = JobState.NODE_FAIL, False
    elif "OutOfMemoryError" in text or "memory monitor" in text or "killed due to memory" in text:
        state, ambiguous = JobState.OUT_OF_MEMORY, False
    elif cancelled:
        state, ambiguous, words = JobState.CANCELLED, False, "cancelled (its actor killed)"
    elif isinstance(exc, rex.RuntimeEnvSetupError):
        state, ambiguous = JobState.LAUNCH_ERROR, False
    return JobStatus(job_id, state, node=node, started_at=started_at, ended_at=ended_at,
                     reason=f"Ray: {words}" if state is not JobState.CANCELLED else words,
                     ambiguous=ambiguous)
