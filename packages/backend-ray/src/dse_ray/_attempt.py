"""One attempt as the controller sees it on Ray: its actors (one per node), the answers it
waits for, and how it ended.

An :class:`Attempt` holds the handles and the pending answers (Ray object refs) of one
attempt; the backend gathers every pending ref of every attempt into one ``ray.wait`` per
pass and hands each answer back here (:meth:`Attempt.take`). What one node of it must run is
built by :func:`node_request`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dse import JobSpec, JobState, JobStatus
from dse_ray._states import ORDER, exit_name, from_documents, from_error, log_name

if TYPE_CHECKING:
    from pathlib import Path

    from dse import Clock
    from dse_ray._files import Mirror

CANCEL_MARK = "ray-cancel"
"""Left in the attempt directory when dse cancels the attempt: a controller that reattaches
after the actor is gone tells dse's cancel from a loss by it."""
_NODE_ID = re.compile(r"Node Id: ([0-9a-f]{16,})")


def job_id_for(spec: JobSpec) -> str:
    """The attempt's id, which is also its actor's name: the trial and attempt, and a digest of
    the trial directory (two workspaces may hold campaigns of the same name)."""
    digest = hashlib.sha256(str(spec.trial_dir).encode()).hexdigest()[:8]
    return f"dse.{spec.trial_id}.{spec.attempt}.{digest}"


def actor_names(job_id: str, nodes: int) -> list[str]:
    """The names of the attempt's actors, one per node (the job id alone for one node)."""
    return [job_id] if nodes == 1 else [f"{job_id}/{i}" for i in range(nodes)]


def attempt_dir(spec: JobSpec) -> Path:
    """Where an attempt's logs and exit files live."""
    return spec.trial_dir / f"attempt-{spec.attempt}"


def node_request(spec: JobSpec, node_rank: int, grace: float, linger: float,
                 names: dict[str, str], files: dict[str, Any] | None = None
                 ) -> dict[str, Any]:
    """What the actor of node *node_rank* of *spec* runs: one task per local rank (and,
    without a shared filesystem, the *files* it stages: ``_files``)."""
    res = spec.resources
    adir = attempt_dir(spec)
    argv = ["/bin/sh", "-c", spec.argv[0], "dse-trial"] if spec.shell else list(spec.argv)
    tasks = []
    for local in range(res.tasks_per_node):
        rank = node_rank * res.tasks_per_node + local
        env = dict(spec.env)
        env.update(DSE_RANK=str(rank), DSE_LOCAL_RANK=str(local),
                   DSE_WORLD_SIZE=str(res.tasks))
        tasks.append({
            "argv": argv, "env": env, "cwd": str(spec.cwd or spec.trial_dir),
            "stdout": str(adir / log_name(rank, "stdout")),
            "stderr": str(adir / log_name(rank, "stderr")),
            "exit_file": str(adir / exit_name(rank)), "time_limit": spec.time_limit,
            "grace": grace, "node_rank": node_rank,
            "memory_mb": None if res.memory_mb is None
            else max(res.memory_mb // res.tasks_per_node, 1),
        })
    return {"tasks": tasks, "linger": linger, "names": names, "files": files}


def read_exit_files(spec: JobSpec, node_rank: int) -> list[dict[str, Any]] | None:
    """The exit documents the tasks of node *node_rank* left in the attempt directory, or
    ``None`` when one is missing."""
    res = spec.resources
    docs = []
    for local in range(res.tasks_per_node):
        rank = node_rank * res.tasks_per_node + local
        try:
            doc = json.loads((attempt_dir(spec) / exit_name(rank)).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict):
            return None
        doc["rank"] = str(rank)
        docs.append(doc)
    return docs


@dataclass(slots=True)
class Attempt:
    """One attempt: its actors, the answers awaited, and what is known of its end."""

    job_id: str
    spec: JobSpec
    actors: dict[int, Any] = field(default_factory=dict)
    """Node rank → its actor's handle."""
    group: Any = None
    """The placement group of an attempt that spans nodes."""
    starts: dict[int, Any] = field(default_factory=dict)
    """Node rank → the pending ``started()`` answer."""
    results: dict[int, Any] = field(default_factory=dict)
    """Node rank → the pending ``result()`` answer."""
    where: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Node rank → where and when it started (``started()``'s answer)."""
    docs: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """Node rank → its tasks' exit documents."""
    errors: dict[int, JobStatus] = field(default_factory=dict)
    """Node rank → its end when Ray answered with an error instead."""
    cancelled: bool = False
    stopped: set[int] = field(default_factory=set)
    """Node ranks the controller ended because another node failed: how they ended is not
    how the attempt did."""
    final: JobStatus | None = None
    running_said: bool = False
    names: dict[str, str] = field(default_factory=dict)
    """Node id → name, as the backend knew them (to name a node Ray reports dead)."""
    mirror: Mirror | None = None
    """Without a shared filesystem: the controller's copy of the trial's files."""
    sync: Any = None
    """The pending ``sync()`` answer of node 0 (no shared filesystem), if one is asked."""
    synced_at: float | None = None
    """When the last ``sync()`` was asked (the controller's monotonic clock); ``None``
    before this controller asked one."""
    file_errors: list[str] = field(default_factory=list)
    """What went wrong bringing files back (said in the attempt's end)."""

    @property
    def nodes(self) -> int:
        return self.spec.resources.nodes

    def pending(self) -> list[tuple[Any, str, int]]:
        """Every answer awaited: (ref, ``"start"`` or ``"result"``, node rank)."""
        syncs = [] if self.sync is None else [(self.sync, "sync", 0)]
        return [*((r, "start", i) for i, r in self.starts.items()), *syncs,
                *((r, "result", i) for i, r in self.results.items())]

    def take(self, kind: str, rank: int, value: Any, error: BaseException | None,
             clock: Clock) -> None:
        """Take in one answer: a ``started()``'s or a ``result()``'s, or the *error* Ray
        raised instead."""
        if kind == "start":
            self.starts.pop(rank, None)
            if error is None:
                self.where[rank] = dict(value)
            return
        if kind == "sync":
            self.sync = None
            if error is None and value:
                self._mirror(value, rank)
            elif type(error).__name__.startswith("RayTaskError") and not self.file_errors:
                # The actor's sync() raised (its death is the attempt's end, said elsewhere).
                self.file_errors.append(f"asking node {self.node_of(rank)} what the trial"
                                        f" wrote: {str(error).strip().splitlines()[-1]}")
            return
        self.results.pop(rank, None)
        if error is None:
            self.where.setdefault(rank, {k: v for k, v in value.items()
                                         if k not in ("tasks", "collected")})
            self.docs[rank] = list(value["tasks"])
            if "collected" in value:
                self._mirror(value["collected"], rank)
            return
        status = from_error(self.job_id, error, node=self.node_of(rank, error),
                            cancelled=self.cancelled, started_at=self.started_at(),
                            ended_at=clock.time())
        if status is None:  # unavailable for now: asked again
            self.results[rank] = self.actors[rank].result.remote()
        else:
            self.errors[rank] = status

    def _mirror(self, answer: dict[str, Any], rank: int) -> None:
        """Write what node *rank* sent back of the trial's files (no shared filesystem)."""
        if self.mirror is None:
            return
        if answer.get("error"):
            self.file_errors.append(f"node {self.node_of(rank)}: {answer['error']}")
            return
        try:
            self.mirror.take(answer, self.node_of(rank))
        except (OSError, ValueError) as exc:
            self.file_errors.append(f"writing what node {self.node_of(rank)} sent back:"
                                    f" {type(exc).__name__}: {exc}")

    def wants_sync(self, now: float, every: float) -> bool:
        """Whether to ask node 0 for what changed (no shared filesystem): it runs, no
        answer is awaited, and *every* seconds passed since the last ask."""
        return (self.mirror is not None and self.sync is None and 0 in self.where
                and 0 in self.results
                and (self.synced_at is None or now - self.synced_at >= every))

    def node_of(self, rank: int, error: BaseException | None = None) -> str | None:
        """The name of the node of *rank*, from its ``started()`` answer, else from the node
        Ray's *error* names."""
        if rank in self.where:
            return str(self.where[rank].get("node"))
        found = _NODE_ID.search(str(error or ""))
        if found:
            return self.names.get(found.group(1), found.group(1)[:12])
        return None

    def started_at(self) -> float | None:
        times = [w["started_at"] for w in self.where.values() if "started_at" in w]
        return min(times) if times else None

    def failing(self) -> bool:
        """Whether a node of it ended other than by success (its other nodes are ended too:
        one rank failing ends the attempt, as srun's ``--kill-on-bad-exit``)."""
        if self.errors:
            return True
        return any(not (d.get("exit_code") == 0 and not d.get("launch_error"))
                   for docs in self.docs.values() for d in docs)

    def ended(self) -> bool:
        return not self.results and len(self.docs) + len(self.errors) >= self.nodes

    def end(self) -> JobStatus:
        """How it ended, once every node answered: by the worst end of a node, leaving out
        the nodes ended because another failed."""
        errors = [s for rank, s in self.errors.items() if rank not in self.stopped]
        if errors or not self.docs:
            return min(errors or self.errors.values(), key=lambda s: ORDER.index(s.state))
        docs = [d for rank in sorted(self.docs) for d in self.docs[rank]]
        nodes = next((list(w.get("nodes") or []) for w in self.where.values()), [])
        status = from_documents(self.job_id, docs, attempt_dir(self.spec),
                                cancelled=self.cancelled, nodes=nodes)
        if self.mirror is None:
            return status
        reason = status.reason
        if self.file_errors:
            reason = "; ".join(filter(None, [reason, *self.file_errors]))
        return dataclasses.replace(status, left_files=self.mirror.left_files(), reason=reason)

    def running(self) -> JobStatus | None:
        """``RUNNING`` once, when every node of it started."""
        if self.running_said or len(self.where) < self.nodes:
            return None
        self.running_said = True
        nodes = next((list(w.get("nodes") or []) for w in self.where.values()), [])
        return JobStatus(self.job_id, JobState.RUNNING, node=",".join(nodes) or None,
                         started_at=self.started_at())
