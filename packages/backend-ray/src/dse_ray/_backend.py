"""The Ray backend: each attempt a named, detached actor on a node with the trial's resources.

:class:`RayBackend` owns the controller's side: the connection (``_options.connect``), the
table of attempts (``_attempt.Attempt``), one ``ray.wait`` per pass over every answer it
awaits, cancels, and finding attempts again by name after a restart. What runs on the node is
``_actor`` (the actor) and ``_supervise`` (one process per task, which runs the command).
Ray is imported when a backend is built, never when the plugin is listed: ``import ray`` costs
seconds, and every ``dse`` command loads the registered backends' classes.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, ClassVar, Self

from dse import Backend, ConfigError, JobSpec, JobState, JobStatus, start_attempt_dir
from dse_ray._attempt import (
    CANCEL_MARK,
    Attempt,
    actor_names,
    attempt_dir,
    job_id_for,
    node_request,
    read_exit_files,
)
from dse_ray._files import Mirror, outgoing
from dse_ray._nodes import labels, room
from dse_ray._options import RayOptions, connect, ray_options

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from dse import Resources

log = logging.getLogger("dse.ray")

SYNC_S = 1.0
"""Without a shared filesystem: how often a running attempt is asked what it wrote (its
progress lines and checkpoint), at most."""


def ask_of(resources: Resources, custom: Mapping[str, float]) -> dict[str, float]:
    """What one node of an attempt asks of Ray, in Ray's resource names."""
    ask = {"CPU": float(resources.cpus * resources.tasks_per_node),
           "GPU": float(resources.gpus), **custom}
    if resources.memory_mb is not None:
        ask["memory"] = float(resources.memory_mb) * 2**20
    return ask


class RayBackend(Backend):
    """Runs attempts on a Ray cluster (``docs/ray.md``).

    Options (the ``[backend.ray]`` table, :class:`~dse_ray._options.RayOptions`): ``address``,
    ``namespace``, ``grace``, ``linger``, ``resources``, ``connect_timeout``, and without a
    shared filesystem ``shared_filesystem = false``, ``node_dir``, ``return_limit``,
    ``working_dir``.

    Each attempt is a detached actor named by its job id, asking Ray for the trial's CPUs,
    GPUs, memory and the table's custom resources; an attempt of several nodes is one actor
    per node in a ``STRICT_SPREAD`` placement group, each starting its node's tasks with their
    ranks. The command runs under a supervisor process on the node with the node's
    environment (its Ray worker's) and ``JobSpec.env`` over it, the directory of the node's
    Python first on ``PATH``. The trial directory is on a filesystem the nodes share, or
    (``shared_filesystem = false``) each node keeps one of its own and the files travel
    through Ray (``_files``).
    """

    name: ClassVar[str] = "ray"
    version: ClassVar[str] = "0.1.0"
    default_poll_interval: ClassVar[tuple[float, float]] = (0.2, 2.0)
    spans_tasks: ClassVar[bool] = True

    def __init__(self, *, address: str = "auto", namespace: str = "dse", grace: float = 10.0,
                 linger: float = 600.0, resources: Mapping[str, float] | None = None,
                 connect_timeout: float = 30.0, shared_filesystem: bool = True,
                 node_dir: str = "", return_limit: int = 64 << 20,
                 working_dir: str = "") -> None:
        super().__init__()
        self.options = RayOptions(address=address, namespace=namespace, grace=float(grace),
                                  linger=float(linger), resources=dict(resources or {}),
                                  connect_timeout=float(connect_timeout),
                                  shared_filesystem=bool(shared_filesystem), node_dir=node_dir,
                                  return_limit=int(return_limit), working_dir=working_dir)
        connect(self.options)
        # SIGTERM at the limit, SIGKILL one grace later, and a pass to see it.
        self.overrun_s = self.options.grace + 2.0
        self._jobs: dict[str, Attempt] = {}
        self._names: dict[str, str] = {}
        self._launcher_handle: Any = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: str = "<campaign>") -> Self:
        opts = ray_options(options, source)
        try:
            return cls(address=opts.address, namespace=opts.namespace, grace=opts.grace,
                       linger=opts.linger, resources=opts.resources,
                       connect_timeout=opts.connect_timeout,
                       shared_filesystem=opts.shared_filesystem, node_dir=opts.node_dir,
                       return_limit=opts.return_limit, working_dir=opts.working_dir)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    # -- what the engine asks before anything runs ---------------------------------------

    def _cluster(self) -> list[dict[str, Any]]:
        import ray

        self.count_command("ray.nodes")
        entries = list(ray.nodes())
        self._names.update(labels(entries))
        return entries

    def refuse(self, resources: Resources) -> str | None:
        refused = super().refuse(resources)
        if refused is not None:
            return refused
        fit = room(self._cluster(), ask_of(resources, self.options.resources))
        if len(fit) >= resources.nodes:
            return None
        return (f"asks for {resources.describe()}"
                f"{' and ' + str(dict(self.options.resources)) if self.options.resources else ''};"
                f" the Ray cluster has {len(fit)} node(s) that can hold that"
                f"{' (' + ','.join(fit) + ')' if fit else ''}, {resources.nodes} needed")

    def capacity(self, resources: Resources) -> tuple[int, str] | None:
        ask = ask_of(resources, self.options.resources)
        total = 0
        for entry in self._cluster():
            if entry.get("Alive"):
                have = entry.get("Resources") or {}
                total += min((math.floor(have.get(k, 0.0) / v) for k, v in ask.items() if v > 0),
                             default=0)
        per = max(resources.nodes, 1)
        return total // per, f"the Ray cluster's nodes hold {total} such node share(s)"

    def placement(self) -> Mapping[str, Any]:
        return {"resources": dict(self.options.resources)} if self.options.resources else {}

    def job_id_for(self, job: JobSpec) -> str | None:
        return job_id_for(job)

    def still_running(self, job_id: str | None, trial_dir: Path, attempt: int) -> bool:
        """Whether the attempt's actor still lives (running, or ended and waiting out its
        ``linger`` for its controller to record its end)."""
        if job_id is None:
            return False
        import ray

        self.count_command("list_named_actors")
        names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a.get("namespace") == self.options.namespace}
        return job_id in names or f"{job_id}/0" in names

    # -- template methods -----------------------------------------------------------------

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        import ray

        cluster = self._cluster()
        ids = []
        todo = []
        for spec in jobs:
            att = self._attempt(job_id_for(spec), spec)
            self._jobs[att.job_id] = att
            ids.append(att.job_id)
            att.final = self._unfit(att, cluster) or self._ready(att)
            if att.final is None:
                todo.append(att)
        if not todo:
            return ids
        items = [self._item(att, cluster) for att in todo]
        self.count_command("launch")
        try:
            answers = ray.get(self._launcher().launch.remote(items), timeout=300)
        except Exception:
            self._launcher_handle = None  # asked again (made again if it died) next time
            raise
        for att, answer in zip(todo, answers, strict=True):
            att.group = answer["group"]
            for rank, actor in enumerate(answer["handles"]):
                self._watch(att, rank, actor)
            if answer["error"] is not None:
                att.final = JobStatus(att.job_id, JobState.INVALID if not answer["handles"]
                                      else JobState.LAUNCH_ERROR,
                                      reason=f"Ray refused it: {answer['error']}")
        return ids

    def _attempt(self, job_id: str, spec: JobSpec) -> Attempt:
        att = Attempt(job_id, spec, names=dict(self._names))
        if not self.options.shared_filesystem:
            att.mirror = Mirror(spec.trial_dir)
        return att

    def _files(self, spec: JobSpec) -> dict[str, Any] | None:
        """What an attempt's actors stage on their nodes (no shared filesystem), else
        ``None``."""
        opts = self.options
        if opts.shared_filesystem:
            return None
        return {"trial_dir": str(spec.trial_dir), "node_dir": opts.node_dir,
                "working_dir": opts.working_dir, "limit": opts.return_limit,
                "attempt": spec.attempt, "stage": outgoing(spec.trial_dir)}

    def _launcher(self) -> Any:
        from dse_ray._actor import launcher

        if self._launcher_handle is None:
            self._launcher_handle = launcher()
        return self._launcher_handle

    def _unfit(self, att: Attempt, cluster: list[dict[str, Any]]) -> JobStatus | None:
        """Why *att* can never run here (``INVALID``), or ``None``."""
        spec = att.spec
        if not spec.argv:
            return JobStatus(att.job_id, JobState.INVALID,
                             reason="the job has no command (set [environment] command)")
        fit = room(cluster, ask_of(spec.resources, self.options.resources))
        if len(fit) >= spec.resources.nodes:
            return None
        return JobStatus(att.job_id, JobState.INVALID,
                         reason=f"asks for {spec.resources.describe()} per node on"
                         f" {spec.resources.nodes} node(s); {len(fit)} node(s) of the Ray"
                         " cluster can hold that")

    def _ready(self, att: Attempt) -> JobStatus | None:
        """Make the attempt's directory (:func:`dse.start_attempt_dir`); its end if it cannot."""
        try:
            moved = start_attempt_dir(att.spec)
        except OSError as exc:
            return JobStatus(att.job_id, JobState.LAUNCH_ERROR,
                             reason=f"{type(exc).__name__}: {exc}")
        if moved:
            log.warning("trial %s, attempt %d: what was in %s before is not its own, moved"
                        " aside: %s", att.spec.trial_id, att.spec.attempt, att.spec.trial_dir,
                        "; ".join(moved))
        return None

    def _item(self, att: Attempt, cluster: list[dict[str, Any]]) -> dict[str, Any]:
        """What the launcher makes of *att*: its placement group's bundles (of an attempt
        that spans nodes) and each node's actor options and request."""
        from ray.util.scheduling_strategies import NodeLabelSchedulingStrategy, NotIn

        spec = att.spec
        ask = ask_of(spec.resources, self.options.resources)
        base: dict[str, Any] = {
            "lifetime": "detached", "namespace": self.options.namespace,
            "num_cpus": ask["CPU"], "num_gpus": ask["GPU"],
            "resources": dict(self.options.resources),
        }
        if "memory" in ask:
            base["memory"] = ask["memory"]
        group = None
        if att.nodes > 1:
            group = [{k: v for k, v in ask.items() if v > 0}] * att.nodes
        else:
            avoid = [e["NodeID"] for e in cluster
                     if e.get("Alive") and self._names.get(e["NodeID"]) in spec.avoid_nodes]
            if avoid:
                base["scheduling_strategy"] = NodeLabelSchedulingStrategy(
                    # Ray 2.40 leaves NotIn's __init__ unannotated.
                    hard={"ray.io/node_id": NotIn(*avoid)})  # type: ignore[no-untyped-call]
        files = self._files(spec)
        actors = [
            (dict(base, name=name),
             node_request(spec, rank, self.options.grace, self.options.linger, self._names,
                          files))
            for rank, name in enumerate(actor_names(att.job_id, att.nodes))
        ]
        return {"group": group, "group_name": f"{att.job_id}/pg", "actors": actors}

    @staticmethod
    def _watch(att: Attempt, rank: int, actor: Any) -> None:
        att.actors[rank] = actor
        att.starts[rank] = actor.started.remote()
        att.results[rank] = actor.result.remote()

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        import ray

        out: dict[str, JobStatus] = {}
        waiting: dict[Any, tuple[Attempt, str, int]] = {}
        for job_id in job_ids:
            att = self._jobs.get(job_id)
            if att is None:
                out[job_id] = JobStatus(job_id, JobState.LOST, reason="unknown to this backend")
                continue
            for ref, kind, rank in att.pending():
                waiting[ref] = (att, kind, rank)
        if waiting:
            self.count_command("ray.wait")
            ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=0)
            # Starts first: an attempt whose node died is named by where it had started; what
            # a node wrote while running before what it wrote by its end.
            order = ("start", "sync", "result")
            for ref in sorted(ready, key=lambda r: order.index(waiting[r][1])):
                att, kind, rank = waiting[ref]
                try:
                    value, error = ray.get(ref), None
                except Exception as exc:  # noqa: BLE001 - Ray's error is the attempt's end
                    value, error = None, exc
                att.take(kind, rank, value, error, self.clock)
        self._ask_syncs(job_ids)
        for job_id in job_ids:
            att = self._jobs.get(job_id)
            if att is None:
                continue
            status = self._check(att)
            if status is not None:
                out[job_id] = status
        return out

    def _ask_syncs(self, job_ids: Sequence[str]) -> None:
        """Ask each running attempt without a shared filesystem what it wrote since (answered
        in a later pass: the progress lines early stopping reads, the checkpoint a retry on
        another node resumes from)."""
        now = self.clock.monotonic()
        for job_id in job_ids:
            att = self._jobs.get(job_id)
            if att is not None and att.final is None and att.wants_sync(now, SYNC_S):
                assert att.mirror is not None
                att.sync = att.actors[0].sync.remote(att.mirror.progress_length(),
                                                     att.synced_at is None)
                att.synced_at = now
                self.count_command("sync")

    def _check(self, att: Attempt) -> JobStatus | None:
        if att.final is None and att.nodes > 1 and not att.cancelled and att.failing():
            # One node failed: the others are ended (kill-on-bad-exit), and their ends are
            # not the attempt's (an actor killed before it started says only that).
            att.stopped.update(r for r in att.results if r not in att.docs)
            self._stop(att)
        if att.final is None and att.ended():
            att.final = att.end()
        if att.final is not None:
            self._release(att)
            self._jobs.pop(att.job_id, None)
            return att.final
        return att.running()

    def _stop(self, att: Attempt) -> None:
        """End every node of *att* still running: through its actor once it started (its
        tasks get SIGTERM, the grace, SIGKILL), else by killing the actor waiting for room."""
        import ray

        for rank, actor in att.actors.items():
            if rank not in att.results:
                continue
            if rank in att.where:
                actor.cancel.remote()
                self.count_command("cancel")
            else:
                ray.kill(actor, no_restart=True)
                self.count_command("kill")

    def _release(self, att: Attempt) -> None:
        """Free what an ended attempt holds: its actors and placement group."""
        import ray

        for actor in att.actors.values():
            ray.kill(actor, no_restart=True)
            self.count_command("kill")
        if att.group is not None:
            ray.util.remove_placement_group(att.group)
            self.count_command("remove_placement_group")

    def _cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            att = self._jobs.get(job_id)
            if att is None or att.final is not None or att.cancelled:
                continue
            att.cancelled = True
            try:
                (attempt_dir(att.spec) / CANCEL_MARK).touch()
            except OSError as exc:
                log.warning("attempt %s: cannot leave its cancel mark: %s", job_id, exc)
            if not att.actors:
                att.final = JobStatus(job_id, JobState.CANCELLED, reason="cancelled")
                continue
            self._stop(att)

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        import ray

        self._cluster()
        self.count_command("list_named_actors")
        namespace = self.options.namespace
        alive = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a.get("namespace") == namespace}
        for job_id, spec in jobs.items():
            att = self._attempt(job_id, spec)
            self._jobs[job_id] = att
            att.cancelled = (attempt_dir(spec) / CANCEL_MARK).exists()
            if att.nodes > 1:
                try:
                    att.group = ray.util.get_placement_group(f"{job_id}/pg")
                except ValueError:
                    att.group = None
            for rank, name in enumerate(actor_names(job_id, att.nodes)):
                if name in alive:
                    try:
                        self._watch(att, rank, ray.get_actor(name, namespace=namespace))
                        continue
                    except ValueError:
                        pass  # it ended between the listing and now: its files tell
                self._adopt_files(att, rank, name)

    def _adopt_files(self, att: Attempt, rank: int, name: str) -> None:
        """Node *rank* of *att* has no actor any more: its end is what its exit files say."""
        docs = read_exit_files(att.spec, rank)
        if docs is not None:
            att.docs[rank] = docs
        elif att.cancelled:
            att.docs[rank] = [{"cancelled": True, "rank": "0"}]
        else:
            att.errors[rank] = JobStatus(
                att.job_id, JobState.LOST, ambiguous=False,
                reason=f"no Ray actor named {name} in namespace {self.options.namespace}"
                " and no exit file: it never started, or its node went away")

    def _wait(self, timeout: float) -> bool:
        import ray

        refs = [ref for att in self._jobs.values() for ref, _, _ in att.pending()]
        if any(att.final is not None for att in self._jobs.values()):
            return True
        if not refs:
            return False
        ray.wait(refs, num_returns=1, timeout=max(min(timeout, 5.0), 0.0))
        return True

    def _shutdown(self) -> None:
        """Wait (up to the grace period and a margin) for cancelled attempts to end."""
        import ray

        if not self.wait_on_shutdown:
            return
        cancelled = [att for att in self._jobs.values() if att.cancelled]
        refs = [ref for att in cancelled for ref in att.results.values()]
        if not refs:
            return
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=self.options.grace + 5.0)[0])
        for att in cancelled:
            if ready.issuperset(att.results.values()):
                self._release(att)  # ended: its actors need not wait out their linger
