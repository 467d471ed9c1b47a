"""The pilot of an allocation: runs in the allocation's batch step and starts attempts as steps.

The controller (:class:`dse_slurm.SlurmAllocationBackend`) copies this file into the pilot's
directory on the shared filesystem and submits it as the batch script's body::

    python3 pilot.py PILOT_DIR ALLOCATION_SECONDS PYTHON [GRACE_SECONDS]

It imports nothing from dse and runs on any Python from 3.7 (the node's ``python3``). The
directory is its inbox and its outbox; every file in it is written atomically (temporary name,
then ``os.replace``), so a reader never sees half a file:

* ``step.py`` — written by the controller: what each step runs (under the pilot's own
  interpreter, with ``-S``), the
  manifest launcher of :mod:`dse_slurm._script` after :data:`STEP_MARK`;
* ``pilot.json`` — written by the pilot when it starts: job id, start, end of the allocation,
  its nodes and the CPUs on each;
* ``<key>.task.json`` — written by the controller, one per attempt (resources, time limit,
  nodes to avoid; ``<key>.jsonl`` beside it is the attempt's manifest line);
* ``<key>.cancel`` — written by the controller to cancel an attempt;
* ``controller.alive`` (:data:`HEARTBEAT`) — touched by the controller on each polling pass:
  its modification time changing is how the pilot knows a controller still follows it;
* ``draining`` (:data:`DRAINING`) — written by the controller once the pilot declined an
  attempt: no controller hands it new attempts any more (a restarted one neither);
* ``<key>.claim`` — written by the pilot when it lets the attempt's workload start (its node,
  when, and ``launched_at``: when its ``srun`` was started, maybe well before);
* ``<key>.run`` — written inside the step, before the workload starts: node, step id, start,
  the CPUs it may use;
* ``<key>.exit.json`` — written by the pilot when the attempt ended (``srun``'s exit status
  and its last error lines, whether the pilot cancelled it or ended it at its time limit), or
  when it will not run it here (``declined``: too little time left, every node avoided;
  ``invalid``: the allocation has too few nodes with the CPUs it asks for);
* ``pilot.alive`` (:data:`ALIVE`) — touched by the pilot about every :data:`ALIVE_S` seconds:
  the controller asks Slurm about a started pilot only when this stops changing (or now and
  then), so a pilot's liveness costs no Slurm command per pass;
* ``pilot.end.json`` (:data:`RELEASED`) — written by the pilot when it releases the allocation
  because no controller follows it (below): the time and why. It starts nothing after it.

Packing: the pilot keeps the free CPUs of each node of the allocation and starts an attempt
on the first node where it fits (``srun --exact --overlap --nodelist=<node>``), in the order
the tasks arrived; a task that fits nowhere now waits while later, smaller tasks may go ahead.
An attempt of *k* nodes and *t* tasks per node of *c* CPUs each takes *t* x *c* CPUs on each
of the first *k* nodes that have them free, as one step (``srun --nodes=k
--ntasks-per-node=t --cpus-per-task=c --nodelist=a,b,...``, every task told the step's nodes
in ``DSE_NODES``); while it waits, the nodes it may use with the most CPUs free keep its share
from the tasks queued after it (:meth:`Pilot.hold`), so a stream of one-node attempts does not
starve it. One that can never fit (more nodes than the allocation has with *t* x *c* CPUs) is
``invalid``.
Warm steps: starting a step costs a third of a second or more (``srun``, slurmctld's step
record, the step's interpreter), so for each node the pilot starts the steps of the first
waiting one-node tasks that may run there *ahead* (up to one per CPU of the node, one per pass,
and :data:`WARM_AFTER_S` after it last let one go there; a step of several nodes is started
only once all its nodes have room), while the node's CPUs are still busy:
``--overlap``
lets Slurm start it at once, and its launcher (:data:`STEP_MARK`) blocks reading its standard
input (``srun`` forwards the pilot's pipe). When CPUs free on that node the pilot writes
``go`` to it (the node's freed CPUs go to its warm step first): the workload starts within
milliseconds, and only then do its claim, its ``.run``, its time limit and its CPUs count.
A warm step cancelled, or declined before it was let go, gets the end of its input and exits
75 without running anything; so does every warm step when the pilot dies. An
attempt whose time limit ends after the allocation does is declined, never started. The pilot
enforces each attempt's time limit itself (SIGTERM to ``srun``, which ends the step; SIGKILL
after a grace), and sends ``SIGUSR1`` its signal lead before it. It runs until Slurm ends the
allocation (the controller cancels it when it has nothing left for it, or its time runs out),
or until it releases the allocation itself: when the heartbeat has not changed for
GRACE_SECONDS (measured on the pilot's own clock, from its start or the last change, so the
clocks of the nodes need not agree), no step runs and no task waits, it writes
``pilot.end.json`` and exits 0, and Slurm frees the nodes. A controller that died (or lost its
login node) thus holds no nodes for long; a controller restarted within the grace finds the
pilot still there and hands it new attempts. Without GRACE_SECONDS it never releases itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import Any

POLL_S = 0.05
"""How often the pilot looks for ended steps and new tasks: a freed CPU takes the next task
within it (the directory is listed only when its modification time changed)."""
ALIVE = "pilot.alive"
"""The file whose modification time the pilot changes while it runs."""
ALIVE_S = 1.0
RELIST_S = 0.5
HEARTBEAT = "controller.alive"
"""The file whose modification time the controller changes on each pass."""
DRAINING = "draining"
"""Written by the controller once the pilot declined an attempt (it takes no new ones)."""
RELEASED = "pilot.end.json"
"""Written by the pilot when it releases the allocation, no controller following it."""
GRACE_S = 10.0
WARM_AFTER_S = 0.4
"""A node's next warm step is started this long after the pilot let one go there: starting it
(``srun``, the step's interpreter) takes CPU time the workload just let go needs to start."""
# Seconds kept free at the end of the allocation: an attempt whose time limit would end inside
# them is declined (starting a step and tearing it down take a moment).
MARGIN_S = 5.0

STEP_MARK = """\
import json, os, sys, time
mark = sys.argv[3]
if sys.stdin.readline() != "go\\n":
    sys.exit(75)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
if os.environ.get("SLURM_PROCID", "0") == "0":
    with open(mark + ".tmp", "w") as handle:
        json.dump({"node": os.environ.get("SLURMD_NODENAME"),
                   "nodes": os.environ.get("DSE_NODES", "").split(","),
                   "step": os.environ.get("SLURM_STEP_ID"), "started_at": time.time(),
                   "cpus": cpus}, handle)
    os.replace(mark + ".tmp", mark)
"""
"""Put before the manifest launcher in ``step.py``: waits for the pilot's ``go`` line on its
standard input (forwarded by ``srun`` to every task of the step; end of input without it: exit
75, the workload never ran), then the first task records where and when the step started, the
step's nodes (``DSE_NODES``, set by the pilot) and the CPUs it may use."""


def write_json(path: str, doc: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        json.dump(doc, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def hostnames(nodelist: str) -> list[str]:
    """``n[1-3]`` → ``["n1", "n2", "n3"]`` (through ``scontrol``; the pilot's node alone if
    that fails)."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, timeout=30,
                             check=True).stdout
        names = out.split()
    except (OSError, subprocess.SubprocessError):
        names = []
    return names or [os.environ.get("SLURMD_NODENAME", "localhost")]


def cpus_per_node(text: str, count: int) -> list[int]:
    """``SLURM_JOB_CPUS_PER_NODE`` (``"2(x3)"``, ``"4,2(x2)"``) → one count per node."""
    cpus: list[int] = []
    for part in text.split(","):
        value, _, times = part.partition("(x")
        try:
            cpus += [int(value)] * (int(times.rstrip(")")) if times else 1)
        except ValueError:
            return [1] * count
    return (cpus + [1] * count)[:count]


def allocation_end(job_id: str, fallback: float) -> float:
    """When Slurm will end the allocation (``squeue``'s EndTime), else *fallback*."""
    try:
        out = subprocess.run(["squeue", "--noheader", "--jobs=" + job_id, "--format=%e"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=30, check=True).stdout.strip()
        return datetime.strptime(out, "%Y-%m-%dT%H:%M:%S").timestamp()
    except (OSError, subprocess.SubprocessError, ValueError):
        return fallback


def span(task: dict[str, Any]) -> int:
    """The nodes *task*'s step spans."""
    return int(task.get("nodes") or 1)


def share(task: dict[str, Any]) -> int:
    """The CPUs *task*'s step takes on each of its nodes (its tasks there times their CPUs)."""
    return int(task.get("tasks_per_node") or 1) * int(task["cpus"])


class Warm:
    """An attempt's step started ahead (``srun --overlap``) on *nodes*: its launchers wait for
    the ``go`` line on their standard input before the workload runs."""

    def __init__(self, key: str, task: dict[str, Any], nodes: list[str],
                 proc: subprocess.Popen[bytes]) -> None:
        self.key = key
        self.task = task
        self.nodes = nodes
        self.proc = proc
        self.launched_at = time.time()

    def drop(self) -> None:
        """End the waiting step without running it (its launcher reads the end of input)."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()


class Step:
    """One attempt's ``srun`` started by this pilot."""

    def __init__(self, key: str, task: dict[str, Any], nodes: list[str],
                 proc: subprocess.Popen[bytes]) -> None:
        self.key = key
        self.nodes = nodes
        self.cpus = share(task)
        """CPUs it holds on each of its nodes."""
        self.proc = proc
        self.started_at = time.time()
        limit = task.get("time_limit")
        self.deadline = None if limit is None else self.started_at + float(limit)
        lead = task.get("signal_lead")
        self.usr1_at = None if self.deadline is None or not lead else self.deadline - lead
        self.kill_at: float | None = None
        self.cancelled = False
        self.timed_out = False

    def stop(self, now: float) -> None:
        with contextlib.suppress(OSError):
            self.proc.send_signal(signal.SIGTERM)
        self.kill_at = now + GRACE_S


class Pilot:
    def __init__(self, directory: str, seconds: float, python: str,
                 controller_grace: float | None = None) -> None:
        self.dir = directory
        self.python = python
        # Steps run under this very interpreter, found once here: a ``python3`` on PATH may
        # be a wrapper (pyenv's shim, a module's script) that takes a third of a second to
        # start, and -S skips site (the launcher needs only the standard library).
        self.step_python = [sys.executable, "-S"] if sys.executable else [python]
        self.wake = threading.Event()
        """Set when a step ended: the loop looks at once rather than at its next tick."""
        self.controller_grace = controller_grace
        self.heartbeat: int | None = None
        self.heard_at = time.time()
        self.job_id = os.environ.get("SLURM_JOB_ID", "")
        self.started_at = time.time()
        self.ends_at = allocation_end(self.job_id, self.started_at + seconds)
        self.nodes = hostnames(os.environ.get("SLURM_JOB_NODELIST", ""))
        self.cpus = dict(zip(self.nodes, cpus_per_node(
            os.environ.get("SLURM_JOB_CPUS_PER_NODE", "1"), len(self.nodes))))
        self.free = dict(self.cpus)
        self.seen: set[str] = set()
        self.queue: list[tuple[str, dict[str, Any]]] = []
        self.running: dict[str, Step] = {}
        self.warm: dict[str, Warm] = {}
        """The steps started ahead, by attempt key, in the order they were started; at most
        one per CPU of each node."""
        self.let_go: dict[str, float] = {}
        """Per node, when the pilot last let a warm step go there."""
        self.held: dict[str, int] = {}
        """CPUs per node kept for the waiting tasks of several nodes: tasks queued after
        them do not take them (and no step is started ahead on such a node), so a step of
        many nodes is not starved by a stream of one-node steps."""
        self.listed: int | None = None
        self.listed_at = 0.0
        self.cancels: set[str] = set()
        self.alive_at = 0.0
        write_json(self.path("pilot.json"), {
            "job_id": self.job_id, "started_at": self.started_at, "ends_at": self.ends_at,
            "nodes": self.nodes, "cpus": [self.cpus[n] for n in self.nodes],
            "node": os.environ.get("SLURMD_NODENAME"),
        })

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def finish(self, key: str, doc: dict[str, Any]) -> None:
        doc.setdefault("ended_at", time.time())
        write_json(self.path(key + ".exit.json"), doc)

    def beat(self, now: float) -> None:
        """Touch :data:`ALIVE` (at most every :data:`ALIVE_S`): the controller sees it live."""
        if now - self.alive_at < ALIVE_S:
            return
        self.alive_at = now
        path = self.path(ALIVE)
        try:
            os.utime(path)
        except OSError:
            with contextlib.suppress(OSError), open(path, "w"):
                pass

    def scan(self) -> set[str]:
        """Take new tasks in arrival order; return the keys asked to be cancelled."""
        try:
            mark: int | None = os.stat(self.dir).st_mtime_ns
        except OSError:
            mark = None
        now = time.time()
        # Unchanged since the last listing: nothing came or went. The time stamp is coarse (a
        # file written in the same tick as the listing leaves it equal), so a recent change,
        # or a listing older than RELIST_S, lists again all the same.
        if (mark is not None and mark == self.listed and now - self.listed_at < RELIST_S
                and now - mark / 1e9 > RELIST_S / 5):
            return self.cancels
        names = os.listdir(self.dir)
        self.listed, self.listed_at = mark, now
        cancels = {n[: -len(".cancel")] for n in names if n.endswith(".cancel")}
        self.cancels = cancels
        new = []
        for name in names:
            if not name.endswith(".task.json"):
                continue
            key = name[: -len(".task.json")]
            if key in self.seen:
                continue
            self.seen.add(key)
            if os.path.exists(self.path(key + ".exit.json")):
                continue
            task = read_json(self.path(name))
            if task is None:
                self.finish(key, {"invalid": "unreadable task file"})
                continue
            try:
                arrived = os.stat(self.path(name)).st_mtime
            except OSError:
                arrived = 0.0
            new.append((arrived, key, task))
        self.queue += [(key, task) for _, key, task in sorted(new, key=lambda t: t[:2])]
        return cancels

    def start(self, key: str, task: dict[str, Any], nodes: list[str]) -> Warm | None:
        """Start *task*'s step on *nodes* (``tasks_per_node`` tasks on each); its workload
        waits for :meth:`go`. ``--overlap``: Slurm starts it at once even while the nodes'
        CPUs run other steps (the pilot packs). A step of several tasks ends as a whole when
        one of them fails (``--kill-on-bad-exit``); each task learns the step's nodes, in
        Slurm's order (that of the allocation), from ``DSE_NODES``."""
        per_node = int(task.get("tasks_per_node") or 1)
        argv = ["srun", "--exact", "--overlap", f"--nodes={len(nodes)}",
                f"--ntasks={len(nodes) * per_node}", f"--cpus-per-task={task['cpus']}",
                f"--nodelist={','.join(nodes)}", f"--job-name={task['name']}"]
        if len(nodes) * per_node > 1:
            argv += [f"--ntasks-per-node={per_node}", "--kill-on-bad-exit=1"]
        if task.get("mem_mb"):
            argv.append(f"--mem={task['mem_mb']}M")
        if task.get("gpus"):
            argv.append(f"--gres=gpu:{task['gpus']}")
        argv += [*self.step_python, self.path("step.py"), self.path(key + ".jsonl"), "0",
                 self.path(key + ".run")]
        try:
            with open(self.path(key + ".srun.err"), "wb") as err:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=err, env=dict(os.environ, DSE_NODES=",".join(nodes)))
        except OSError as exc:
            self.finish(key, {"launch_error": f"cannot run srun: {exc}", "node": nodes[0],
                              "nodes": nodes})
            return None
        threading.Thread(target=self.notice_end, args=(proc,), daemon=True).start()
        return Warm(key, task, nodes, proc)

    def go(self, warm: Warm) -> None:
        """Let *warm*'s workload run now: its CPUs are taken and its time limit starts."""
        write_json(self.path(warm.key + ".claim"), {
            "started_at": time.time(), "node": warm.nodes[0], "nodes": warm.nodes,
            "launched_at": warm.launched_at})
        with contextlib.suppress(OSError, ValueError):
            assert warm.proc.stdin is not None
            warm.proc.stdin.write(b"go\n")
            warm.proc.stdin.close()
        now = time.time()
        for node in warm.nodes:
            self.free[node] -= share(warm.task)
            self.let_go[node] = now
        self.running[warm.key] = Step(warm.key, warm.task, warm.nodes, warm.proc)

    def launch(self, key: str, task: dict[str, Any], nodes: list[str]) -> None:
        warm = self.start(key, task, nodes)
        if warm is not None:
            self.go(warm)

    def notice_end(self, proc: subprocess.Popen[bytes]) -> None:
        """Wake the loop the moment *proc* (a step's srun) exits."""
        with contextlib.suppress(Exception):
            proc.wait()
        self.wake.set()

    def step_doc(self, step: Step | Warm, cancelled: bool, timed_out: bool) -> dict[str, Any]:
        """The exit document of a step whose ``srun`` ended."""
        try:
            with open(self.path(step.key + ".srun.err"), "rb") as handle:
                err = handle.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            err = ""
        return {"rc": step.proc.returncode, "cancelled": cancelled, "timed_out": timed_out,
                "node": step.nodes[0], "nodes": step.nodes, "srun_err": err}

    def ended(self, step: Step) -> None:
        self.finish(step.key, self.step_doc(step, step.cancelled, step.timed_out))
        for node in step.nodes:
            self.free[node] += step.cpus
        del self.running[step.key]

    def orphaned(self, now: float) -> bool:
        """Whether to release the allocation: nothing runs or waits, and the controller's
        heartbeat has not changed for the grace."""
        try:
            mark: int | None = os.stat(self.path(HEARTBEAT)).st_mtime_ns
        except OSError:
            mark = None
        if mark != self.heartbeat:
            self.heartbeat, self.heard_at = mark, now
        grace = self.controller_grace
        return (grace is not None and not self.running and not self.queue and not self.warm
                and now - self.heard_at >= grace)

    def release(self, now: float) -> None:
        why = (f"no word from the controller for {now - self.heard_at:.0f}s (grace"
               f" {self.controller_grace or 0:g}s) and nothing to run:"
               f" allocation {self.job_id} released")
        write_json(self.path(RELEASED), {"ended_at": now, "reason": why})
        print(why, flush=True)

    def refuse(self, task: dict[str, Any], now: float) -> dict[str, Any] | None:
        """Why *task* will not run in this allocation (an exit doc), or None."""
        need, count = share(task), span(task)
        limit = task.get("time_limit")
        if limit is not None and now + float(limit) > self.ends_at - MARGIN_S:
            why = (f"its time limit of {float(limit):g}s ends after allocation {self.job_id}"
                   f" does ({self.ends_at - now:.0f}s left)")
            return {"declined": why}
        if sum(1 for cpus in self.cpus.values() if cpus >= need) < count:
            asks = f"{need} CPUs" if count == 1 else f"{count} nodes of {need} CPUs each"
            why = (f"asks for {asks}; the {len(self.nodes)} node(s) of allocation"
                   f" {self.job_id} have {sorted(set(self.cpus.values()))} CPUs")
            return {"invalid": why}
        if len(self.usable(task)) < count:
            why = f"it avoids every node of allocation {self.job_id} that could hold it"
            if count > 1:
                why = (f"it avoids the nodes of allocation {self.job_id} it needs: fewer than"
                       f" {count} others could hold it")
            return {"declined": why}
        return None

    def usable(self, task: dict[str, Any]) -> list[str]:
        avoid = set(task.get("avoid") or ())
        return [n for n in self.nodes if n not in avoid and self.cpus[n] >= share(task)]

    def place(
        self, task: dict[str, Any], now: float
    ) -> tuple[list[str] | None, dict[str, Any] | None]:
        """The nodes to start *task* on now (the first ones, in the allocation's order, with
        its share free, not counting CPUs :attr:`held`), or why it will not run here (an exit
        doc)."""
        refusal = self.refuse(task, now)
        if refusal is not None:
            return None, refusal
        # A node's freed CPUs go first to its warm step.
        room = [n for n in self.usable(task)
                if self.warmed(n) == 0 and self.room(n) >= share(task)]
        count = span(task)
        return (room[:count], None) if len(room) >= count else (None, None)

    def room(self, node: str) -> int:
        """CPUs free on *node* for a task queued after those :attr:`held` CPUs there."""
        return self.free[node] - self.held.get(node, 0)

    def hold(self, task: dict[str, Any]) -> None:
        """Keep *task*'s share, as it waits, on the nodes it may use with the most room."""
        nodes = sorted(self.usable(task), key=lambda n: -self.room(n))[:span(task)]
        for node in nodes:
            self.held[node] = self.held.get(node, 0) + share(task)

    def release_warm(self, cancels: set[str], now: float) -> None:
        """Let go the steps started ahead whose node has room now; drop the cancelled ones,
        and note those whose ``srun`` ended before it was let go (it never ran the workload)."""
        for key, warm in list(self.warm.items()):
            refusal = {"cancelled": True, "rc": None} if key in cancels else None
            if warm.proc.poll() is not None:
                del self.warm[key]
                self.finish(key, refusal or self.step_doc(warm, False, False))
                continue
            refusal = refusal or self.refuse(warm.task, now)
            if refusal is not None:
                del self.warm[key]
                warm.drop()
                self.finish(key, refusal)
            elif all(self.room(node) >= share(warm.task) for node in warm.nodes):
                del self.warm[key]
                self.go(warm)

    def warmed(self, node: str) -> int:
        return sum(1 for warm in self.warm.values() if node in warm.nodes)

    def prepare(self, now: float) -> None:
        """Start ahead, on each node with fewer warm steps than CPUs and none
        :attr:`held`, the step of the first waiting one-node task it can hold (one per
        node and pass): when a CPU frees there the task's workload starts without a Slurm
        round trip. Steps of several nodes are not started ahead: they start when all their
        nodes have room."""
        for node in self.nodes:
            if (self.warmed(node) >= self.cpus[node] or self.held.get(node)
                    or now - self.let_go.get(node, 0.0) < WARM_AFTER_S):
                continue
            for index, (key, task) in enumerate(self.queue):
                if span(task) > 1:
                    continue
                if node in self.usable(task) and self.refuse(task, now) is None:
                    warm = self.start(key, task, [node])
                    del self.queue[index]
                    if warm is not None:
                        self.warm[key] = warm
                    break

    def step(self) -> None:
        cancels = self.scan()
        now = time.time()
        for key, step in list(self.running.items()):
            if step.proc.poll() is not None:
                self.ended(step)
                continue
            if key in cancels and not step.cancelled:
                step.cancelled = True
                step.stop(now)
            elif step.deadline is not None and now >= step.deadline and not step.timed_out:
                step.timed_out = True
                step.stop(now)
            if step.usr1_at is not None and now >= step.usr1_at:
                step.usr1_at = None
                with contextlib.suppress(OSError):
                    step.proc.send_signal(signal.SIGUSR1)
            if step.kill_at is not None and now >= step.kill_at:
                step.kill_at = None
                step.proc.kill()
        self.release_warm(cancels, now)
        waiting = []
        self.held = {}
        for key, task in self.queue:
            if key in cancels:
                self.finish(key, {"cancelled": True, "rc": None})
                continue
            nodes, refusal = self.place(task, now)
            if refusal is not None:
                self.finish(key, refusal)
            elif nodes is not None:
                self.launch(key, task, nodes)
            else:
                waiting.append((key, task))
                if span(task) > 1:
                    self.hold(task)
        self.queue = waiting
        self.prepare(now)


def main(argv: list[str]) -> int:
    controller_grace = float(argv[4]) if len(argv) > 4 else None
    pilot = Pilot(argv[1], float(argv[2]), argv[3], controller_grace)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    while True:
        pilot.wake.clear()
        pilot.step()
        now = time.time()
        pilot.beat(now)
        if pilot.orphaned(now):
            # Nothing started after the last scan; a task written since is never started
            # here, and the controller hands it to another pilot when it reads RELEASED.
            pilot.release(now)
            return 0
        pilot.wake.wait(POLL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
