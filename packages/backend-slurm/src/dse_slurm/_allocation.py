"""Allocation mode: one pilot job holds nodes, and attempts run inside it as job steps.

For short trials the queue wait of one job per attempt dominates the compute. In allocation
mode (``[backend.slurm] mode = "allocation"``) the campaign holds one allocation — a pilot job
of ``allocation_nodes`` nodes for at most ``allocation_time`` — and the pilot
(:mod:`dse_slurm._pilot`) starts each attempt as an ``srun`` step, packing them onto the
allocation's CPUs. How it talks to Slurm:

* **submit** — attempts wait in the backend until a pilot takes them. The first batch submits
  the pilot (one ``sbatch``); every attempt is handed over as a task file in the pilot's
  directory, ``<run_dir>/.slurm/<pilot name>/``, on the shared filesystem. No Slurm command is
  issued per attempt by the controller.
* **poll** — one ``squeue`` for the pilot job(s), plus reading the files the pilot and the steps
  write (a step's start and node, its end). A pilot that ended (its time limit, preemption, a
  node failure, a cancel from outside, vanished) ends every attempt that had started in it as
  an interruption (PREEMPTED, NODE_FAIL, CANCELLED, or LOST when the cause is unknown), which
  the engine retries; attempts it had not started yet wait for the next pilot. A new pilot is
  submitted when attempts wait and no pilot takes them.
* **time** — an attempt whose time limit ends after its pilot does is not started there: the
  pilot declines it, stops taking new attempts, and the attempt waits for the next pilot (the
  declining one is cancelled once its running attempts ended). An attempt whose time limit
  exceeds ``allocation_time`` itself is INVALID.
* **cancel** — a marker file per attempt; the pilot ends that step. ``shutdown`` cancels the
  pilot (one ``scancel``) once nothing it runs is still wanted.
* **restart** — each pass touches a heartbeat file in the directory of every live pilot. A
  controller that starts on a run (``reattach``, or its first ``submit``) adopts the pilots it
  finds in the run's ``.slurm/`` directory (their job id from ``pilot.id`` or the pilot's own
  ``pilot.json``): one still alive keeps running what it was handed — an attempt handed over as
  a task file and not started yet included — and takes new attempts again, unless it had
  declined one (the ``draining`` marker: it stays not accepting and is cancelled once its
  attempts ended). So a controller killed and restarted any number of times uses one pilot.
* **orphans** — a pilot whose heartbeat has not changed for ``allocation_grace`` (default 5
  minutes), with no step running and no task waiting, releases the allocation: it writes
  ``pilot.end.json`` and exits, and Slurm frees its nodes. That is no interruption: it only
  happens with nothing running, and an attempt handed to it after its last look is not started
  there and goes to the next pilot. A pilot that ended while no controller watched (its time,
  a cancel, vanished) ends what it had started as an interruption, as above.

Trials of several nodes or tasks run as one step across nodes of the allocation (the pilot
places it: :mod:`dse_slurm._pilot`); one that can never fit the allocation is INVALID, and
``mode = "auto"`` sizes the pilot for them (:func:`spanning_pilot`). A multi-node step that
did not succeed names no node to avoid (its reason names its nodes): none of them alone is to
blame.

Cost (:attr:`dse.JobStatus.usage` of each attempt): ``elapsed_s``, ``cpus`` (all its tasks')
and ``nodes`` of its step, and its share of the allocation: while steps run, the allocation's
CPUs are split among them by the CPUs each asked for, so an attempt running alone on a 6-CPU
allocation is charged 6 CPU-seconds per second and one of three 2-CPU steps 2
(``allocation_cpu_s``, and the same share of the allocation's node-seconds as
``allocation_node_s``, but at least its nodes times its run; :func:`allocation_share`). Time
when no step runs (the pilot starting, gaps between batches, its end) is charged to no
attempt. ``allocation_job`` is the pilot's
Slurm job id, also named in the attempt's reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import math
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from dse import Backend, ConfigError, JobSpec, JobState, JobStatus, Resources, stderr_tail
from dse_slurm._commands import (
    SLURM_DIR,
    TERMINAL_WORDS,
    Settled,
    SlurmCommandError,
    SlurmCommands,
    SubmitRefused,
    blame_nodes,
    signal_lead,
    write_atomic,
)
from dse_slurm._options import Allocation, SlurmTable, read_table
from dse_slurm._pilot import ALIVE, DRAINING, HEARTBEAT, MARGIN_S, RELEASED, STEP_MARK
from dse_slurm._script import (
    LAUNCHER,
    SlurmOptions,
    attempt_dir,
    launch_refusal,
    manifest_entry,
    render_pilot_script,
)
from dse_slurm._watch import DirectoryWatch, Liveness

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from dse_slurm._states import SqueueRow

__all__ = ["SlurmAllocationBackend", "allocation_share", "spanning_pilot", "spanning_table"]

log = logging.getLogger("dse.slurm")

PILOT_SOURCE = Path(__file__).with_name("_pilot.py")
_ID_PREFIX = "alloc."
_RELEASED_WORD = "RELEASED"
"""The end word of a pilot that released its allocation itself (no controller followed it)."""
_UP = frozenset({"idle", "mix", "alloc", "comp", "resv", "plnd"})
"""Node states (``sinfo``'s ``%t``, without a suffix but ``*``, not responding) in which a
node can be allocated."""
_INTERRUPTIONS = {
    "TIMEOUT": JobState.PREEMPTED,
    "DEADLINE": JobState.PREEMPTED,
    "PREEMPTED": JobState.PREEMPTED,
    "NODE_FAIL": JobState.NODE_FAIL,
    "BOOT_FAIL": JobState.BOOT_FAIL,
    "CANCELLED": JobState.CANCELLED,
}


def allocation_share(
    step: tuple[float, float, float],
    steps: Iterable[tuple[float, float, float]],
    allocation_cpus: float,
) -> float:
    """CPU-seconds of the allocation charged to *step*: ``(start, end, cpus)``.

    *steps* are every step of the allocation (*step* among them; a step still running has the
    end ``math.inf``). At each moment the allocation's *allocation_cpus* are split among the
    steps running then, in proportion to their CPUs; the result is the integral of *step*'s
    part over its run. Shares of all steps add up to the allocation's CPU-seconds while any
    step ran. A step is never charged less than its own CPUs: where the recorded runs of
    steps overlap by more than the allocation holds (the pilot starts a step only once CPUs
    are free, but a step's end and the next one's start are stamped by different processes,
    late on a loaded node), each is charged its own.
    """
    start, end, cpus = step
    if end <= start or cpus <= 0:
        return 0.0
    others = [s for s in steps if s[0] < end and s[1] > start]
    cuts = sorted({start, end, *(t for s in others for t in s[:2] if start < t < end)})
    total = 0.0
    for low, high in itertools.pairwise(cuts):
        busy = sum(c for s, e, c in others if s <= low and e >= high)
        total += (high - low) * cpus * max(allocation_cpus / max(busy, cpus), 1.0)
    return total


def spanning_pilot(resources: Resources, parallelism: int,
                   node_cpus: Sequence[int] | None) -> tuple[int, int, int]:
    """``(nodes, CPUs per node, trials)``: a pilot with room for *parallelism* trials of
    *resources* (the largest a trial of the campaign asks) that span several tasks, on nodes
    of *node_cpus* CPUs each (those of the partition that are up; ``None``: unknown).

    Each trial takes ``tasks_per_node x cpus`` CPUs (a share) on each of its ``nodes`` nodes,
    so the pilot asks for whole shares on every node: as many shares as the smallest node
    that holds one has room for, on as many nodes as *parallelism* trials need (never fewer
    than a trial spans, never more than the partition has up), and runs *trials* of the
    largest at once. Unknown nodes: room for one trial."""
    share = resources.tasks_per_node * resources.cpus
    fitting = [cpus for cpus in node_cpus or () if cpus >= share]
    if not fitting:
        return resources.nodes, share, 1
    slots = min(fitting) // share
    wanted = parallelism * resources.nodes
    nodes = min(max(resources.nodes, math.ceil(wanted / slots)),
                max(len(fitting), resources.nodes))
    per_node = min(slots, math.ceil(wanted / nodes))
    return nodes, per_node * share, max(1, min(parallelism, nodes * per_node // resources.nodes))


def spanning_table(table: SlurmTable, resources: Resources, parallelism: int,
                   slurm: SlurmCommands) -> tuple[SlurmTable, int]:
    """*table* with ``allocation_nodes`` and ``allocation_cpus`` sized by
    :func:`spanning_pilot` (``mode = "auto"`` for trials of several tasks; one ``sinfo``
    tells the CPUs of the partition's nodes that are up), and how many of the largest trials
    the pilot runs at once."""
    nodes, cpus, trials = spanning_pilot(resources, parallelism,
                                         _node_cpus(slurm, table.options.partition))
    sized = Allocation(**table.allocation)
    sized["allocation_nodes"], sized["allocation_cpus"] = nodes, cpus
    return dataclasses.replace(table, allocation=sized), trials


def _node_cpus(slurm: SlurmCommands, partition: str | None) -> list[int] | None:
    """The CPUs of each node of *partition* (``None``: the default one) that can be
    allocated, from one ``sinfo``; ``None`` when it fails."""
    try:
        proc = slurm.run(["sinfo", "--noheader", "--Node", "--format=%N %P %c %t"])
    except SlurmCommandError:
        return None
    if proc.returncode != 0:
        return None
    cpus: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        fields = line.split()
        if len(fields) != 4 or not fields[2].isdigit():
            continue
        node, name, count, state = fields
        if (name.rstrip("*") == partition or (partition is None and name.endswith("*"))) and (
                state.rstrip("~#!%$@^-+") in _UP):
            cpus[node] = int(count)
    return list(cpus.values())


@dataclass(slots=True)
class _Pilot:
    name: str
    dir: Path
    job_id: str | None
    accepting: bool = True
    ended: str | None = None
    """Slurm's end word for the pilot (``TIMEOUT``...), ``VANISHED``; ``None`` while alive."""
    info: dict[str, Any] | None = None
    cancelled: bool = False
    tasks: set[str] = field(default_factory=set)
    """Attempts handed to it and not ended."""
    steps: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """(start, end or inf, cpus) of every attempt that started in it, for cost shares."""

    def beat(self) -> None:
        """Tell the pilot a controller follows it (:data:`~dse_slurm._pilot.HEARTBEAT`)."""
        # Failing, the pilot may release its allocation once idle: the next one is submitted.
        with contextlib.suppress(OSError):
            (self.dir / HEARTBEAT).touch()

    def drain(self) -> None:
        """Take no new attempts, and say so to a controller that adopts the pilot later."""
        if self.accepting:
            self.accepting = False
            with contextlib.suppress(OSError):
                write_atomic(self.dir / DRAINING, "")


@dataclass(slots=True)
class _Task:
    job_id: str
    spec: JobSpec
    pilot: _Pilot | None = None
    cancel: bool = False
    started_at: float | None = None
    ended_at: float | None = None
    node: str | None = None
    """Where its step runs: the node, or the nodes (comma-separated) of a step of several."""

    @property
    def key(self) -> str:
        return f"{self.spec.trial_id}.{self.spec.attempt}"

    def file(self, suffix: str) -> Path:
        assert self.pilot is not None
        return self.pilot.dir / f"{self.key}{suffix}"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


class SlurmAllocationBackend(Backend):
    """The Slurm backend in allocation mode (``mode = "allocation"``; see the module doc).

    Options besides those of :class:`~dse_slurm.SlurmBackend`: ``allocation_nodes`` (nodes of
    the pilot job, default 1), ``allocation_time`` (its time limit, default ``"1h"``) and
    ``allocation_cpus`` (CPUs per node to ask for; default: whole nodes, ``--exclusive``) and
    ``allocation_grace`` (how long a pilot with nothing to run waits for word from a controller
    before it releases the allocation, default 5 minutes). ``array_throttle`` and
    ``exclusive`` do not apply. Attempt ids are ``alloc.<trial id>.<attempt>``; after a
    controller crash the pilot directories tell which pilot took an attempt and how it ended,
    and a pilot still alive is adopted, taking new attempts again. It runs its Slurm commands
    through the same :class:`~dse_slurm._commands.SlurmCommands` as the array backend, and is
    registered under the same name (``slurm``): :meth:`SlurmBackend.from_options` picks it.
    """

    name: ClassVar[str] = "slurm"
    spans_tasks: ClassVar[bool] = True
    version: ClassVar[str] = "0.1.0"
    default_poll_interval: ClassVar[tuple[float, float]] = (0.5, 5.0)
    overrun_s = 150.0
    """As in jobs mode (the pilot ends a step at its limit within seconds: generous)."""

    def __init__(
        self,
        *,
        options: SlurmOptions | None = None,
        allocation_nodes: int = 1,
        allocation_time: float = 3600.0,
        allocation_cpus: int | None = None,
        allocation_grace: float = 300.0,
        allocation_tasks: tuple[int, int] | None = None,
        sacct_lag: float = 20.0,
        command_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        if allocation_nodes < 1 or (allocation_cpus is not None and allocation_cpus < 1):
            msg = "backend.slurm: allocation_nodes and allocation_cpus must be >= 1"
            raise ConfigError(msg)
        if allocation_time <= 2 * MARGIN_S:
            msg = f"backend.slurm.allocation_time: more than {2 * MARGIN_S:g}s expected"
            raise ConfigError(msg)
        if allocation_grace <= 0:
            msg = "backend.slurm.allocation_grace: a duration of more than 0s expected"
            raise ConfigError(msg)
        self.options = options or SlurmOptions()
        self.sacct_lag = sacct_lag
        """Accepted as in jobs mode; attempts here end by the pilot's files, not sacct."""
        self.allocation_nodes = allocation_nodes
        self.allocation_time = allocation_time
        self.allocation_cpus = allocation_cpus
        self.allocation_grace = allocation_grace
        self.allocation_tasks = allocation_tasks
        """``(n, cpus)``: the pilot asks room for *n* attempts of *cpus* CPUs each, on as many
        nodes as Slurm needs (how ``mode = "auto"`` sizes it from ``max_parallelism``), instead
        of ``allocation_nodes`` and ``allocation_cpus``."""
        self.slurm = SlurmCommands(self, timeout=command_timeout)
        """Runs (and counts) this backend's Slurm commands."""
        self._settled = Settled()
        self._bin_dir = os.path.dirname(sys.executable)
        self._tasks: dict[str, _Task] = {}
        self._pilots: dict[Path, _Pilot] = {}
        self._searched: set[Path] = set()
        """Run directories whose pilots left by an earlier controller were looked for."""
        self._adopted = False
        """Whether a pilot of an earlier controller was adopted (its tasks may be handed again)."""
        self._watch = DirectoryWatch()
        self._liveness = Liveness()

    def refuse(self, resources: Resources) -> str | None:
        return super().refuse(resources) or _wider_than_pilot(self, resources)

    @property
    def command_timeout(self) -> float:
        """Seconds after which a Slurm command counts as failed."""
        return self.slurm.timeout

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: str = "<campaign>") -> Self:
        return cls.from_table(read_table(options, source, default_mode="allocation"),
                              source=source)

    @classmethod
    def from_table(cls, table: SlurmTable, *, source: str,
                   tasks: tuple[int, int] | None = None) -> Self:
        """Build from a checked ``[backend.slurm]`` table whose mode is ``"allocation"`` (or
        ``"auto"``, which chose it); *tasks*: see :attr:`allocation_tasks`."""
        if table.mode == "jobs":
            msg = f'{source}: backend.slurm.mode: "allocation" expected (got {table.mode!r})'
            raise ConfigError(msg)
        try:
            return cls(options=table.options, **table.timing, **table.allocation,
                       allocation_tasks=tasks)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @property
    def pilots(self) -> list[tuple[str | None, str | None]]:
        """``(job id, end word)`` of every pilot this backend submitted or adopted."""
        return [(p.job_id, p.ended) for p in self._pilots.values()]

    def job_id_for(self, job: JobSpec) -> str | None:
        return f"{_ID_PREFIX}{job.trial_id}.{job.attempt}"

    # -- submit -----------------------------------------------------------------------------

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        ids = []
        for spec in jobs:
            job_id = f"{_ID_PREFIX}{spec.trial_id}.{spec.attempt}"
            if not spec.argv:
                job_id = self._settled.new(
                    spec, JobState.INVALID, "the job has no command (set [environment] command)"
                )
            elif spec.time_limit is not None and (
                spec.time_limit > self.allocation_time - 2 * MARGIN_S
            ):
                job_id = self._settled.new(
                    spec, JobState.INVALID,
                    f"its time limit of {spec.time_limit:g}s does not fit in"
                    f" backend.slurm.allocation_time ({self.allocation_time:g}s)",
                )
            else:
                self._tasks[job_id] = task = _Task(job_id, spec)
                if self._adopted:
                    # Resubmitted after a restart (it waited for the pool): maybe handed over.
                    self._place(task)
            ids.append(job_id)
        self._dispatch()
        return ids

    def _dispatch(self) -> None:
        """Hand waiting attempts to the accepting pilot of their run (adopting one an earlier
        controller left, else submitting one), cancel draining pilots with nothing left to
        run, and touch the heartbeat of every live pilot."""
        waiting: dict[Path, list[_Task]] = {}
        for task in self._tasks.values():
            if task.pilot is None:
                waiting.setdefault(task.spec.trial_dir.parent, []).append(task)
        for run_dir, tasks in waiting.items():
            self._search(run_dir)
            pilot = next((p for p in self._pilots.values() if p.accepting and p.ended is None
                          and p.dir.parent.parent == run_dir), None)
            if pilot is None:
                pilot = self._submit_pilot(run_dir, tasks)
                if pilot is None:
                    continue
            for task in tasks:
                self._hand_over(task, pilot)
        idle = [p for p in self._pilots.values()
                if p.ended is None and not p.accepting and not p.cancelled and p.job_id
                and not any(j in self._tasks for j in p.tasks)]
        if idle:
            self._scancel(idle)
        for pilot in self._pilots.values():
            if pilot.ended is None and not pilot.cancelled:
                pilot.beat()
        self._watch.mark(p.dir for p in self._pilots.values() if p.ended is None and p.tasks)

    def _wait(self, timeout: float) -> bool:
        """Return once a pilot or a step wrote a file (an end, a start) or after *timeout*, with
        no Slurm command; ``False`` (the engine sleeps) when no pilot has attempts to watch."""
        return self._watch.watching and (self._watch.wait(self.clock, timeout) or True)

    def _hand_over(self, task: _Task, pilot: _Pilot) -> None:
        spec = task.spec
        doc = _task_doc(spec, self.options.signal_lead_s or signal_lead(spec))
        task.pilot = pilot
        try:
            write_atomic(task.file(".jsonl"), manifest_entry(spec, [self._bin_dir]) + "\n")
            write_atomic(task.file(".task.json"), json.dumps(doc))
        except OSError as exc:
            del self._tasks[task.job_id]
            self._settled.add(JobStatus(
                task.job_id, JobState.LAUNCH_ERROR, reason=f"{type(exc).__name__}: {exc}"
            ))
            return
        pilot.tasks.add(task.job_id)

    def _submit_pilot(self, run_dir: Path, tasks: Sequence[_Task]) -> _Pilot | None:
        first = tasks[0].spec
        name = f"dse.{first.trial_id.rsplit('-', 1)[0]}.pilot.{secrets.token_hex(4)}"
        pilot_dir = run_dir / SLURM_DIR / name
        avoid = {node for task in tasks for node in task.spec.avoid_nodes}
        try:
            pilot_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(pilot_dir / "pilot.py", PILOT_SOURCE.read_text(encoding="utf-8"))
            write_atomic(pilot_dir / "step.py", STEP_MARK + LAUNCHER)
            script = pilot_dir / "pilot.sh"
            write_atomic(script, render_pilot_script(
                self.options, job_name=name, pilot_dir=pilot_dir, nodes=self.allocation_nodes,
                time_s=self.allocation_time, cpus_per_node=self.allocation_cpus, exclude=avoid,
                grace_s=self.allocation_grace, tasks=self.allocation_tasks,
            ))
        except ConfigError as exc:
            self._end_waiting(tasks, JobState.INVALID, str(exc))
            return None
        except OSError as exc:
            self._end_waiting(tasks, JobState.LAUNCH_ERROR, f"{type(exc).__name__}: {exc}")
            return None
        try:
            job_id = self.slurm.sbatch(script, name)
        except SubmitRefused as exc:
            why = f"the allocation was refused: {exc.reason}" if exc.answered else exc.reason
            self._end_waiting(tasks, exc.state, why)
            return None
        with contextlib.suppress(OSError):
            write_atomic(pilot_dir / "pilot.id", job_id + "\n")
        log.debug("submitted pilot %s as %s", job_id, name)
        pilot = _Pilot(name, pilot_dir, job_id)
        self._pilots[pilot_dir] = pilot
        return pilot

    def _end_waiting(self, tasks: Sequence[_Task], state: JobState, reason: str) -> None:
        for task in tasks:
            del self._tasks[task.job_id]
            self._settled.add(JobStatus(
                task.job_id, state, reason=reason, ambiguous=state is JobState.LAUNCH_ERROR
            ))

    # -- poll -------------------------------------------------------------------------------

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        out: dict[str, JobStatus] = self._settled.take(job_ids)
        self._watch_pilots()
        handed = [t for t in map(self._tasks.get, job_ids) if t is not None and t.pilot]
        runs = {t.job_id: self._note_start(t) for t in handed}
        for task in handed:
            job_id = task.job_id
            status = self._check(task, runs[job_id])
            if status is None:
                continue
            out[job_id] = status
            if status.state.is_finished():
                del self._tasks[job_id]
        self._dispatch()
        out.update(blame_nodes(self.slurm, {j: st for j, st in out.items()
                                            if st.state.is_finished()}))
        return out

    def _watch_pilots(self, *, force: bool = False) -> None:
        """Learn which pilots ended: from their files every pass, from ``squeue`` when
        :class:`~dse_slurm._watch.Liveness` says so (or *force*)."""
        live = [p for p in self._pilots.values() if p.ended is None]
        for pilot in live:
            if (pilot.dir / RELEASED).exists():  # before squeue: it starts nothing after it
                pilot.ended = _RELEASED_WORD
            if pilot.info is None:
                pilot.info = _read_json(pilot.dir / "pilot.json")
        asked = [p for p in live if p.ended is None]
        now = self.clock.time()
        if not (force or self._liveness.due([p.dir for p in asked if p.info], now)):
            return
        ids = sorted({p.job_id for p in asked if p.job_id}, key=int)
        rows: dict[str, SqueueRow] = self.slurm.squeue(ids) if ids else {}
        self._liveness.asked(now)
        for pilot in asked:
            row = rows.get(pilot.job_id) if pilot.job_id else None
            if row is None:
                pilot.ended = "VANISHED"
            else:
                word = row.state.split(" ", 1)[0]
                if word in TERMINAL_WORDS:
                    pilot.ended = word
            if pilot.ended is not None:
                log.info("pilot %s ended: %s", pilot.job_id, pilot.ended)

    def _note_start(self, task: _Task) -> dict[str, Any] | None:
        """Read the step's own record of its start (node, time), if it started."""
        run = _read_json(task.file(".run"))
        if run is not None and task.started_at is None:
            assert task.pilot is not None
            task.started_at = float(run.get("started_at") or self.clock.time())
            nodes = [n for n in run.get("nodes") or () if n]
            task.node = ",".join(nodes) if len(nodes) > 1 else run.get("node")
            task.pilot.steps[task.job_id] = (
                task.started_at, math.inf, float(task.spec.resources.total_cpus)
            )
        return run

    def _check(self, task: _Task, run: Mapping[str, Any] | None) -> JobStatus | None:
        pilot = task.pilot
        assert pilot is not None
        doc = _read_json(task.file(".exit.json"))
        if doc is not None and not task.cancel and _lost_to_ending(doc, run, pilot):
            return _to_next_pilot(task, pilot)
        if doc is not None and not task.cancel and _fate_unknown(doc, run, pilot,
                                                                 self.clock.time()):
            # Cancelled outside dse, or never started: the step alone, or the whole
            # allocation? The pilot's next heartbeat (it lives on) or its end says which;
            # until then the attempt runs (or waits, if it never started).
            return JobStatus(task.job_id,
                             JobState.RUNNING if run is not None else JobState.PENDING,
                             node=task.node, started_at=task.started_at)
        if doc is not None:
            status = _ended(task, doc, run, self.clock.time())
            if status is None:  # declined: waits for the next pilot
                pilot.drain()
                pilot.tasks.discard(task.job_id)
                log.info("pilot %s declined %s: %s", pilot.job_id, task.key, doc["declined"])
                task.pilot = None
            return status
        if pilot.ended is not None:
            return _interrupted(task, pilot, self.clock.time())
        if run is not None:
            return JobStatus(task.job_id, JobState.RUNNING, node=task.node,
                             started_at=task.started_at)
        return None

    # -- cancel, reattach, shutdown ---------------------------------------------------------

    def _cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            task = self._tasks.get(job_id)
            if task is None:
                continue
            task.cancel = True
            if task.pilot is None:
                del self._tasks[job_id]
                self._settled.add(JobStatus(job_id, JobState.CANCELLED,
                                            reason="cancelled before a pilot took it"))
                continue
            try:
                write_atomic(task.file(".cancel"), "")
            except OSError as exc:
                log.warning("cannot cancel %s: %s", job_id, exc)

    def _scancel(self, pilots: Sequence[_Pilot]) -> None:
        for pilot in pilots:
            pilot.cancelled = True
        self.slurm.scancel([p.job_id for p in pilots if p.job_id])

    def _shutdown(self) -> None:
        # A pilot still running attempts nobody cancelled keeps them (shutdown without
        # cancel: a resumed campaign reattaches); every other pilot is released.
        done = [p for p in self._pilots.values()
                if p.ended is None and not p.cancelled and p.job_id
                and all(self._tasks[j].cancel for j in p.tasks if j in self._tasks)]
        if done:
            self._scancel(done)

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        for run_dir in {spec.trial_dir.parent for spec in jobs.values()}:
            self._search(run_dir)
        for job_id, spec in jobs.items():
            if not job_id.startswith(_ID_PREFIX):
                self._settled.add(JobStatus(
                    job_id, JobState.LOST, reason="not an allocation attempt id", ambiguous=True,
                ))
                continue
            task = _Task(job_id, spec)
            self._tasks[job_id] = task
            self._place(task)  # never handed out: the next dispatch does

    def _search(self, run_dir: Path) -> None:
        """Adopt the pilots an earlier controller left in *run_dir* (once), and ask Slurm
        which of them still live (one ``squeue``)."""
        if run_dir in self._searched:
            return
        self._searched.add(run_dir)
        left = [(d, job) for d, job in _left_pilots(run_dir) if d not in self._pilots]
        for pilot_dir, job in left:
            self._adopt(pilot_dir, job)
        if left:
            try:
                self._watch_pilots(force=True)
            except SlurmCommandError as exc:  # the next pass asks again
                log.warning("cannot ask Slurm about the pilots of %s: %s", run_dir, exc)

    def _place(self, task: _Task) -> None:
        """Give *task* back to the pilot it was last handed to, if an earlier controller did."""
        pilot_dir = _placed_in(task.spec)
        if pilot_dir is None:
            return
        pilot = self._pilots.get(pilot_dir) or self._adopt(pilot_dir)
        task.pilot = pilot
        pilot.tasks.add(task.job_id)

    def _adopt(self, pilot_dir: Path, job: str | None = None) -> _Pilot:
        """A pilot an earlier controller submitted, taking new attempts unless it drains."""
        job = job or _pilot_job(pilot_dir) or self.slurm.find_by_name(pilot_dir.name)
        ended = None if job else "VANISHED"
        if (pilot_dir / RELEASED).exists():
            ended = _RELEASED_WORD
        pilot = _Pilot(pilot_dir.name, pilot_dir, job, ended=ended,
                       accepting=not (pilot_dir / DRAINING).exists())
        self._pilots[pilot_dir] = pilot
        self._adopted = True
        log.info("adopted pilot %s (%s)", job, pilot_dir.name)
        return pilot


def _wider_than_pilot(backend: SlurmAllocationBackend, resources: Resources) -> str | None:
    """Why no trial of *resources* can run in *backend*'s pilots: more nodes than
    ``allocation_nodes`` gives them (a pilot sized by task count, ``mode = "auto"``'s, is
    checked per attempt)."""
    if backend.allocation_tasks is not None or resources.nodes <= backend.allocation_nodes:
        return None
    return (f"trials of up to {resources.nodes} nodes, but each allocation has"
            f" {backend.allocation_nodes} (backend.slurm.allocation_nodes); set"
            f' allocation_nodes = {resources.nodes}, or mode = "jobs"')


def _task_doc(spec: JobSpec, lead: int | None) -> dict[str, Any]:
    """What the pilot reads of an attempt (``<key>.task.json``): its resources, time limit,
    signal lead and nodes to avoid."""
    res = spec.resources
    return {
        "name": f"{spec.trial_id}.{spec.attempt}", "cpus": res.cpus, "nodes": res.nodes,
        "tasks_per_node": res.tasks_per_node, "mem_mb": res.memory_mb, "gpus": res.gpus,
        "time_limit": spec.time_limit, "signal_lead": lead, "avoid": sorted(spec.avoid_nodes),
    }


def _ended(task: _Task, doc: Mapping[str, Any], run: Mapping[str, Any] | None,
           now: float) -> JobStatus | None:
    """How the step of *task* ended, from its exit document *doc* (``None``: the pilot
    declined it, and it waits for the next pilot)."""
    if "declined" in doc:
        return None
    pilot = task.pilot
    assert pilot is not None
    pilot.tasks.discard(task.job_id)
    state, code, sig, ambiguous, reason = _step_end(
        doc, started=run is not None, spec=task.spec, pilot_job=pilot.job_id
    )
    if state is JobState.CANCELLED and not doc.get("cancelled") and pilot.ended is not None:
        reason = f"allocation {pilot.job_id} ended {pilot.ended} while the attempt ran"
    task.ended_at = float(doc.get("ended_at") or now)
    node, where = _where(task, doc)
    return JobStatus(
        task.job_id, state, exit_code=code, signal=sig, node=node,
        started_at=task.started_at, ended_at=task.ended_at,
        reason=f"{reason} ({where})" if reason else None, ambiguous=ambiguous,
        usage=_step_usage(task, pilot),
    )


def _interrupted(task: _Task, pilot: _Pilot, now: float) -> JobStatus | None:
    """*task* had no end when its pilot ended."""
    pilot.tasks.discard(task.job_id)
    started = task.started_at is not None or task.file(".claim").exists()
    # Cancelled by this controller, or by one before it (a reattaching controller knows it
    # from the mark in the pilot's directory: the shutdown that cancelled it released the
    # pilot before the step started).
    task.cancel = task.cancel or task.file(".cancel").exists()
    if not started and task.cancel:
        return JobStatus(task.job_id, JobState.CANCELLED, ended_at=now,
                         reason=f"cancelled before its step started in allocation"
                                f" {pilot.job_id}")
    if not started:
        task.pilot = None  # never ran there: the next pilot takes it
        return None
    word = pilot.ended or "VANISHED"
    state = _INTERRUPTIONS.get(word, JobState.LOST)
    if task.cancel:
        state = JobState.CANCELLED
    if state is JobState.LOST:
        why = (f"allocation {pilot.job_id} ended ({word}) while the attempt ran"
               f" (see {pilot.dir / 'pilot.err'})")
    elif word == "TIMEOUT":
        why = f"allocation {pilot.job_id} reached its time limit while the attempt ran"
    else:
        why = f"allocation {pilot.job_id} ended {word} while the attempt ran"
    node = task.node or ",".join((pilot.info or {}).get("nodes") or []) or None
    return JobStatus(task.job_id, state, node=node, started_at=task.started_at,
                     ended_at=now, reason=why, ambiguous=state is JobState.LOST,
                     usage={"allocation_job": float(pilot.job_id)} if pilot.job_id else None)


FATE_WAIT_S = 60.0
"""How long a step cancelled outside dse waits for its pilot's fate (a heartbeat after the
step's end, or the allocation's end) before it is reported as a step cancelled alone."""
FATE_BEAT_S = 2.0
"""A heartbeat this long after the step's end says the pilot outlived it (the heartbeat comes
every second; a cancelled allocation's signal ends the pilot well before that)."""


def _cancelled_outside(doc: Mapping[str, Any], run: Mapping[str, Any] | None) -> bool:
    """Whether the step of *doc* started and was cancelled by someone other than dse."""
    if doc.get("cancelled") or "declined" in doc:
        return False
    state = _step_state(doc, run is not None, 0.0, None)[0]
    return state is JobState.CANCELLED


def _fate_unknown(doc: Mapping[str, Any], run: Mapping[str, Any] | None, pilot: _Pilot,
                  now: float) -> bool:
    """Whether a step cancelled outside dse, or one ``srun`` could not start, cannot yet tell
    its own end from its allocation's: the pilot has neither ended nor beaten since the step
    ended (a cancelled allocation's pilot may write its step's end before Slurm's signal ends
    it, and ``srun`` in an allocation being cancelled fails in words of its own)."""
    if pilot.ended is not None or not (_cancelled_outside(doc, run)
                                       or _not_started(doc, run)):
        return False
    ended_at = float(doc.get("ended_at") or 0.0)
    if now - ended_at >= FATE_WAIT_S:
        return False
    try:
        beat = (pilot.dir / ALIVE).stat().st_mtime
    except OSError:
        beat = 0.0
    return beat <= ended_at + FATE_BEAT_S


def _not_started(doc: Mapping[str, Any], run: Mapping[str, Any] | None) -> bool:
    """Whether ``srun`` failed before the step of *doc* started (no note of the launcher's,
    no decline): its allocation ending, or a launch error of its own."""
    return (run is None and doc.get("rc") not in (0, None) and not doc.get("cancelled")
            and not any(key in doc for key in ("invalid", "launch_error", "declined")))


def _where(task: _Task, doc: Mapping[str, Any]) -> tuple[str | None, str]:
    """The node (or, for a step of several, the nodes: ``n1,n3``) a step that ended *state*
    reports, and words for its reason; :func:`~dse_slurm._commands.blame_nodes` then names
    only those of a failed step's nodes that Slurm shows failing."""
    assert task.pilot is not None
    node = task.node or ",".join(doc.get("nodes") or ()) or doc.get("node")
    return node, f"step of allocation {task.pilot.job_id}"


_ENDING_WORDS = ("already completing or completed", "Cancelled pending job step",
                 "DUE TO TIME LIMIT", "CANCELLED AT", "Job has been cancelled")
"""What ``srun`` prints when it cannot create a step because its allocation is ending."""


def _to_next_pilot(task: _Task, pilot: _Pilot) -> JobStatus | None:
    """Give *task* back to be handed to the next pilot: ``srun`` could not create its step
    because *pilot*'s allocation was ending (cancelled or timed out outside dse), so the
    attempt never ran, like one still waiting in a pilot that ended."""
    pilot.tasks.discard(task.job_id)
    log.info("%s did not start in ending pilot %s: to the next pilot", task.key, pilot.job_id)
    task.pilot = None
    return None


def _lost_to_ending(
    doc: Mapping[str, Any], run: Mapping[str, Any] | None, pilot: _Pilot
) -> bool:
    """Whether the step of exit document *doc* never started (no *run* record, ``srun``
    failed) because its pilot's allocation was ending: Slurm or dse already ended the pilot,
    or ``srun`` says the job is completing, cancelled or out of time. Such an attempt was
    never run; any other step that failed to start is a launch error."""
    if not _not_started(doc, run):
        return False
    if pilot.ended is not None or pilot.cancelled:
        return True
    err = str(doc.get("srun_err") or "")
    return any(word in err for word in _ENDING_WORDS)


def _step_end(
    doc: Mapping[str, Any], *, started: bool, spec: JobSpec, pilot_job: str | None
) -> tuple[JobState, int | None, int | None, bool, str | None]:
    """State, exit code, signal, ambiguity and reason of the step of *spec* from its exit
    document (what the pilot wrote: ``rc``, ``srun_err``, ``cancelled``...); INVALID where
    the launcher could not start the command (its note in the attempt's directory)."""
    state, code, sig, ambiguous, reason = _step_state(doc, started, spec.time_limit, pilot_job)
    refused = launch_refusal(attempt_dir(spec), state, code)
    if refused is not None:
        return JobState.INVALID, code, None, False, refused
    if state is JobState.FAILED:  # the command's own last words, when it left any
        reason = stderr_tail(attempt_dir(spec) / "stderr.log") or reason
    return state, code, sig, ambiguous, reason


def _step_state(
    doc: Mapping[str, Any], started: bool, time_limit: float | None, pilot_job: str | None
) -> tuple[JobState, int | None, int | None, bool, str | None]:
    """:func:`_step_end` from the exit document alone."""
    err = str(doc.get("srun_err") or "")
    last = next((line for line in reversed(err.splitlines()) if line.strip()), "")
    rc = doc.get("rc")
    if "invalid" in doc:
        return JobState.INVALID, None, None, False, str(doc["invalid"])
    if "launch_error" in doc:
        return JobState.LAUNCH_ERROR, None, None, False, str(doc["launch_error"])
    if doc.get("cancelled"):
        return JobState.CANCELLED, None, None, False, None
    if doc.get("timed_out"):
        return JobState.TIMEOUT, None, None, False, f"over its time limit of {time_limit:g}s"
    if "Out Of Memory" in err or "oom-kill" in err:
        return JobState.OUT_OF_MEMORY, None, None, False, None
    if not started and rc != 0:
        why = f"the step did not start (srun exited {rc}): {last}"
        return JobState.LAUNCH_ERROR, None, None, True, why
    if rc == 0:
        return JobState.SUCCEEDED, 0, None, False, None
    if "DUE TO TIME LIMIT" in err:
        why = f"allocation {pilot_job} reached its time limit while the attempt ran"
        return JobState.PREEMPTED, None, None, False, why
    if "CANCELLED" in err:
        return JobState.CANCELLED, None, None, False, f"step cancelled outside dse: {last}"
    if isinstance(rc, int) and rc > 128 and "Exited with exit code" not in err:
        why = f"Slurm reports the step ended by signal {rc - 128}: {last}"
        return JobState.KILLED, None, rc - 128, True, why
    code = rc if isinstance(rc, int) else None
    return JobState.FAILED, code, None, False, f"exit code {code}"


def _step_usage(task: _Task, pilot: _Pilot) -> dict[str, float] | None:
    """The usage of a step that ended: its own run, and its share of the allocation."""
    usage: dict[str, float] = {}
    if pilot.job_id:
        usage["allocation_job"] = float(pilot.job_id)
    if task.started_at is None or task.ended_at is None:
        return usage or None
    res = task.spec.resources
    elapsed = max(task.ended_at - task.started_at, 0.0)
    usage.update(elapsed_s=elapsed, cpus=float(res.total_cpus), nodes=float(res.nodes))
    if res.memory_mb is not None:
        usage["mem_mb"] = float(res.memory_mb * res.nodes)
    info = pilot.info or {}
    total = float(sum(info.get("cpus") or []))
    step = (task.started_at, task.ended_at, float(res.total_cpus))
    pilot.steps[task.job_id] = step
    if total > 0:
        share = allocation_share(step, pilot.steps.values(), total)
        usage["allocation_cpu_s"] = share
        # A step of several nodes holds each of them for its whole run, whatever its
        # share of the allocation's CPUs.
        usage["allocation_node_s"] = max(share * len(info.get("nodes") or [1]) / total,
                                         res.nodes * elapsed)
    return usage


def _pilot_job(pilot_dir: Path) -> str | None:
    """The Slurm job id of the pilot in *pilot_dir*, as its controller or the pilot wrote it."""
    with contextlib.suppress(OSError):
        job = (pilot_dir / "pilot.id").read_text().strip()
        if job:
            return job
    job = str((_read_json(pilot_dir / "pilot.json") or {}).get("job_id") or "")
    return job or None


def _left_pilots(run_dir: Path) -> list[tuple[Path, str]]:
    """The pilot directories of *run_dir* with a known job id and not released: pilots an
    earlier controller may have left running."""
    found = []
    with contextlib.suppress(OSError):
        for pilot_dir in sorted((run_dir / SLURM_DIR).glob("*.pilot.*")):
            job = _pilot_job(pilot_dir)
            if job and job.isdigit() and not (pilot_dir / RELEASED).exists():
                found.append((pilot_dir, job))
    return found


def _placed_in(spec: JobSpec) -> Path | None:
    """The pilot directory that last took *spec*'s attempt (not counting declines)."""
    key = f"{spec.trial_id}.{spec.attempt}"
    found: list[tuple[float, Path]] = []
    with contextlib.suppress(OSError):
        for path in (spec.trial_dir.parent / SLURM_DIR).glob(f"*/{key}.task.json"):
            doc = _read_json(path.with_name(f"{key}.exit.json"))
            if doc is not None and "declined" in doc:
                continue
            found.append((path.stat().st_mtime, path.parent))
    return max(found)[1] if found else None
