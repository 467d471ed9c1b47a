"""The actor that is one attempt (one node of it) on the Ray cluster.

Each attempt is a named, detached actor (``lifetime="detached"``) holding the trial's resources
on its node: a controller that dies leaves it running, and the next one finds it by name
(:meth:`dse_ray.RayBackend.reattach`). An attempt that spans nodes is one such actor per node,
in a placement group of one bundle per node. The actor starts one supervisor per task of its
node (``_supervise.py``: a process that runs the command under the trial contract and writes
its end) and answers three calls, each on a thread of its own (a threaded actor):

* ``started()`` — once every task started: where (the node's id and name) and when;
* ``result()`` — once every task ended: each task's exit document (what ``exit.json`` holds);
* ``cancel()`` — SIGTERM every supervisor (each ends its tree: SIGTERM, grace, SIGKILL);
* ``sync(offset, fresh)`` — without a shared filesystem, what the trial wrote since the last
  answer, or since it started when *fresh* (``_files``).

Without a shared filesystem (the request's ``files``), the actor first stages the trial's
directory on its node (:class:`~dse_ray._files.NodeFiles`), runs the tasks there (the
controller's trial directory in their paths, arguments and environment becomes the node's),
and ``result()`` carries back what they wrote.

Once it has ended, the actor waits for the controller to kill it (which frees its resources)
and exits on its own after ``linger`` seconds when no controller does; a controller that comes
later reads the exit files the supervisors left in the attempt directory instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import ray

from dse_ray._files import NodeFiles

SUPERVISOR = str(Path(__file__).with_name("_supervise.py"))


def node_names() -> dict[str, str]:
    """Node id → dse's name of it, from the cluster (one call to Ray's control store)."""
    from dse_ray._nodes import labels

    return labels(ray.nodes())


class AttemptActor:
    """One attempt's tasks on one node (see the module's docstring)."""

    def __init__(self, request: dict[str, Any]) -> None:
        self._request = request
        self._cancelled = False
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._started = threading.Event()
        self._done = threading.Event()
        self._where: dict[str, Any] = {}
        self._docs: list[dict[str, Any]] = []
        self._files: NodeFiles | None = None
        self._collected: dict[str, Any] | None = None
        threading.Thread(target=self._run, name="dse-attempt", daemon=True).start()

    def started(self) -> dict[str, Any]:
        """Where and when the attempt's tasks started (blocks until they have)."""
        self._started.wait()
        return self._where

    def result(self) -> dict[str, Any]:
        """Each task's exit document, with where it ran (blocks until every task ended)."""
        self._done.wait()
        out = {**self._where, "tasks": self._docs}
        if self._collected is not None:
            out["collected"] = self._collected
        return out

    def sync(self, offset: int, fresh: bool) -> dict[str, Any]:
        """Without a shared filesystem: the progress file from *offset* and the files
        written since the last answer, or since the start when *fresh* (empty before the
        tasks started)."""
        if self._files is None or not self._started.is_set():
            return {}
        return self._files.since(offset, fresh=fresh)

    def cancel(self) -> bool:
        """End every task (its supervisor's SIGTERM, grace, SIGKILL); whether any ran."""
        with self._lock:
            self._cancelled = True
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        return bool(procs)

    # -- on the attempt's thread ------------------------------------------------------------

    def _place(self) -> tuple[str, str, list[str]]:
        """This node's id and name, and the names of the attempt's nodes in node-rank order."""
        node_id = ray.get_runtime_context().get_node_id()
        names: dict[str, str] = dict(self._request.get("names") or {})
        group = ray.util.get_current_placement_group()
        order = [node_id]
        if group is not None:
            table = ray.util.placement_group_table(group)
            bundles = table.get("bundles_to_node_id") or {}
            order = [str(bundles[i]) for i in sorted(bundles)]
        if any(n not in names for n in order):
            names.update(node_names())
        return node_id, names.get(node_id, node_id[:12]), [names.get(n, n[:12]) for n in order]

    def _run(self) -> None:
        """Start the tasks, wait for their ends; whatever goes wrong here still answers
        ``started()`` and ``result()`` (a task that could not start ends ``start_error``),
        never leaving the controller waiting on an attempt that will not run."""
        try:
            self._attempt()
        except Exception as exc:  # noqa: BLE001 - the attempt's end, not the actor's crash
            words = f"{type(exc).__name__}: {exc}"
            self.cancel()  # the tasks that did start end too
            docs = [self._finish(t, p)
                    for t, p in zip(self._request["tasks"], self._procs, strict=False)]
            self._docs = [*docs, {"start_error": words, "ended_at": time.time(),
                                  "node": self._where.get("node")}]
        finally:
            self._collect()
            self._started.set()
            self._done.set()
            threading.Timer(float(self._request.get("linger", 600.0)), os._exit, (0,)).start()

    def _collect(self) -> None:
        """What the tasks wrote on this node, for ``result()`` (no shared filesystem)."""
        if self._files is None:
            return
        try:
            self._collected = self._files.collect()
        except Exception as exc:  # noqa: BLE001 - said in the attempt's end, not raised
            self._collected = {"error": f"{type(exc).__name__}: {exc}"}

    def _attempt(self) -> None:
        node_id, node, nodes = self._place()
        req = self._request
        started_at = time.time()
        self._where = {"node_id": node_id, "node": node, "nodes": nodes,
                       "started_at": started_at}
        tasks = req["tasks"]
        if req.get("files"):
            tasks = self._stage(req["files"], tasks, node)
        with self._lock:
            if not self._cancelled:
                for task in tasks:
                    self._procs.append(self._start(task, node, nodes))
        self._started.set()
        docs = self._wait_all(tasks)
        if len(self._procs) < len(tasks):  # cancelled before they started
            docs += [{"cancelled": True, "never_started": True, "node": node,
                      "started_at": started_at, "ended_at": time.time()}
                     for _ in tasks[len(self._procs):]]
        self._docs = docs

    def _stage(self, files: dict[str, Any], tasks: list[dict[str, Any]], node: str
               ) -> list[dict[str, Any]]:
        """Make the trial's directory on this node and the tasks' requests that use it."""
        import tempfile

        from dse_ray._files import node_root

        base = files["node_dir"] or os.path.join(tempfile.gettempdir(), "dse-ray")
        src = files["trial_dir"]
        root = node_root(base, node, Path(src))
        node_rank = int(tasks[0]["node_rank"]) if tasks else 0
        self._files = NodeFiles(root, int(files["attempt"]), node_rank, int(files["limit"]))
        self._files.stage(files["stage"] if node_rank == 0 else {
            k: v for k, v in files["stage"].items() if k == "params.json"})

        def mapped(value: Any) -> Any:
            if isinstance(value, str):
                return value.replace(src, root)
            if isinstance(value, list):
                return [mapped(v) for v in value]
            if isinstance(value, dict):
                return {k: mapped(v) for k, v in value.items()}
            return value

        out = []
        for task in tasks:
            new = mapped(task)
            if files["working_dir"]:
                new["cwd"] = files["working_dir"]
            elif not os.path.isdir(new["cwd"]):
                new["cwd"] = root
            out.append(new)
        return out

    def _start(self, task: dict[str, Any], node: str, nodes: list[str]
               ) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env.update(task["env"])
        env["PATH"] = os.pathsep.join(filter(None, [os.path.dirname(sys.executable),
                                                    env.get("PATH")]))
        env["DSE_NODE"] = node
        env["DSE_NODES"] = ",".join(nodes)
        node_rank = int(task["node_rank"])
        env["DSE_NODE_RANK"] = str(node_rank)
        request = {**task, "env": env, "node": node}
        for tries in range(3):
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-S", SUPERVISOR], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
                )
                break
            except OSError:
                # A fork of this threaded worker failed for a moment (EFAULT and EAGAIN were
                # seen on a loaded host): tried again, then the attempt ends start_error.
                if tries == 2:
                    raise
                time.sleep(0.2)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
        return proc

    def _wait_all(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each started task's exit document, once it ended. One task failing ends the others
        of this node (as srun's ``--kill-on-bad-exit``; the controller ends other nodes')."""
        procs = list(self._procs)
        if len(procs) <= 1:
            return [self._finish(t, p) for t, p in zip(tasks, procs, strict=False)]
        docs: dict[int, dict[str, Any]] = {}
        while len(docs) < len(procs):
            for i, proc in enumerate(procs):
                if i in docs or proc.poll() is None:
                    continue
                docs[i] = self._finish(tasks[i], proc)
                if docs[i].get("exit_code") != 0 or docs[i].get("launch_error"):
                    self.cancel()
            time.sleep(0.05)
        return [docs[i] for i in range(len(procs))]

    def _finish(self, task: dict[str, Any], proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        """Wait for one supervisor; its exit document (the last line it printed)."""
        assert proc.stdout is not None
        last = b""
        for line in proc.stdout:
            if line.strip():
                last = line
        proc.wait()
        try:
            doc = json.loads(last)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or "ended_at" not in doc:
            doc = {"supervisor_died": proc.returncode, "ended_at": time.time(),
                   "cancelled": self._cancelled}
        doc["rank"] = task["env"].get("DSE_RANK", "0")
        return doc


class Launcher:
    """Creates attempts' actors (and placement groups) for every controller of the cluster
    (:data:`LAUNCHER`).

    A controller killed right after ``Actor.remote()`` returned loses the actor: Ray registers
    it and submits its creation asynchronously, and the control store drops a detached actor
    whose owner died before that was done. So the controller hands each batch to this
    detached actor (one call, answered once every actor of the batch is registered under its
    name) and goes on only then: what it records as submitted exists, and a controller that
    comes later finds it by name. It asks for no CPU and lives on the head node.
    """

    def ping(self) -> bool:
        return True

    def launch(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Start each attempt of *items* (``{"group": bundles or None, "group_name",
        "actors": [(options, request), ...]}``); per attempt its placement group, its actors'
        handles, or the error that stopped it."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        out: list[dict[str, Any]] = []
        names: list[tuple[str, str]] = []
        for item in items:
            group = None
            handles: list[Any] = []
            try:
                if item.get("group"):
                    group = ray.util.placement_group(
                        item["group"], strategy="STRICT_SPREAD", name=item["group_name"],
                        lifetime="detached")
                for rank, (options, request) in enumerate(item["actors"]):
                    if group is not None:
                        options = dict(options, scheduling_strategy=(
                            PlacementGroupSchedulingStrategy(
                                group, placement_group_bundle_index=rank)))
                    handles.append(remote_class(**options).remote(request))
                    names.append((options["name"], options["namespace"]))
                out.append({"group": group, "handles": handles, "error": None})
            except Exception as exc:  # noqa: BLE001 - one attempt's refusal is its own end
                out.append({"group": group, "handles": handles,
                            "error": f"{type(exc).__name__}: {exc}"})
        deadline = time.monotonic() + 60.0
        for name, namespace in names:  # registered: findable by name, kept if we die
            while time.monotonic() < deadline:
                try:
                    ray.get_actor(name, namespace=namespace)
                    break
                except ValueError:
                    time.sleep(0.01)
        return out


_REMOTE: list[Any] = []
"""The Ray actor class, made once per process (each one made is exported to the cluster)."""


def remote_class(**options: Any) -> Any:
    """:class:`AttemptActor` as a Ray actor class with *options* (a threaded actor: its
    ``result()`` blocks while ``cancel()`` is served)."""
    if not _REMOTE:
        _REMOTE.append(ray.remote(AttemptActor))
    return _REMOTE[0].options(max_concurrency=4, max_restarts=0, **options)


LAUNCHER_NAMESPACE = "dse-launcher"
LAUNCHER = "launcher-" + hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
"""The cluster's one :class:`Launcher` for this code (a controller of another dse version
makes its own): one for every namespace and every controller.

Not one per namespace: Ray 2.38 to 2.44 crash the head's raylet (``worker_pool.cc``, "Check
failed: worker->GetAssignedJobId().IsNil() || worker->GetAssignedJobId() ==
task_spec.JobId()", ray-project/ray#52090, fixed by #52405 in 2.45) when a second driver (a
second controller) makes a detached actor there while the workers of the actors another
driver's detached launcher made sit idle. With one launcher, every attempt's actor is made by
the same job."""


def launcher() -> Any:
    """The cluster's :class:`Launcher` (made if none lives), once it answers."""
    head = {"node:__internal_head__": 0.001}
    cls: Any = ray.remote(Launcher)  # Ray's stubs type the actor class as a function
    handle = cls.options(
        name=LAUNCHER, namespace=LAUNCHER_NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, resources=head, max_concurrency=8, max_restarts=-1).remote()
    ray.get(handle.ping.remote(), timeout=120)
    return handle
