"""The Slurm backend: arrays out with one ``sbatch`` per batch, one ``squeue`` per pass back.

How a pass talks to Slurm (DESIGN.md, "Backend"; the administrator's view):

* **submit** — the attempts of one batch that share resources go out as one job array:
  one manifest file and one ``sbatch`` call per group (one per batch when every trial asks
  for the same thing). Task *i* runs line *i* + 1 of the manifest.
* **poll** — one ``squeue --states=all --jobs=<array ids>`` call for every outstanding
  attempt, whatever their number. Attempts that left the queue (a terminal state in squeue,
  or no row at all) get one batched ``sacct`` call for their exit codes and accounting;
  ``sacct`` lags the controller by a few seconds, so an attempt it still shows as running is
  asked again on the next pass, up to ``sacct_lag`` seconds, after which squeue's own end
  state decides. A finished attempt is never queried again.
* **cancel** — one ``scancel`` call with every id.

A command that fails (a socket time-out, ``slurm_load_jobs error``) is logged and retried at
the next pass; it never fails a trial. Every command is counted (:attr:`Backend.commands`),
and the engine records the count of each pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar, cast

from dse import Backend, ConfigError, JobSpec, JobState, JobStatus, Resources, stderr_tail
from dse_slurm._allocation import SlurmAllocationBackend, spanning_table
from dse_slurm._commands import (
    SLURM_DIR,
    TERMINAL_WORDS,
    Settled,
    SlurmCommands,
    SubmitRefused,
    blame_nodes,
    signal_lead,
    write_atomic,
)
from dse_slurm._options import SlurmTable, read_table
from dse_slurm._script import (
    SlurmOptions,
    attempt_dir,
    group_for_arrays,
    launch_refusal,
    render_array_script,
    render_manifest,
    spare_exclusion,
)
from dse_slurm._states import SacctRow, SqueueRow, expand_hostlist, to_job_state

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = ["SlurmBackend", "auto_choice", "usage_from_sacct"]

log = logging.getLogger("dse.slurm")


@dataclass(slots=True)
class _Leaving:
    """An attempt that left the queue and waits for sacct's word on how it ended."""

    since: float
    row: SqueueRow | None


def usage_from_sacct(row: SacctRow) -> dict[str, float]:
    """The accounting of one attempt as :attr:`dse.JobStatus.usage` (``elapsed_s``, ``cpus``,
    ``gpus``, ``nodes``, ``mem_mb``, ``billing``); absent values are left out."""
    usage: dict[str, float] = {}
    if row.elapsed_s is not None:
        usage["elapsed_s"] = float(row.elapsed_s)
    tres = row.alloc_tres
    for key, name in (("cpu", "cpus"), ("node", "nodes"), ("billing", "billing")):
        with contextlib.suppress(KeyError, ValueError):
            usage[name] = float(tres[key])
    gpus = tres.get("gres/gpu")
    if gpus is not None:
        with contextlib.suppress(ValueError):
            usage["gpus"] = float(gpus)
    mem = tres.get("mem")
    if mem:
        scale = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}
        unit = mem[-1].upper()
        with contextlib.suppress(ValueError):
            usage["mem_mb"] = float(mem[:-1]) * scale[unit] if unit in scale else float(mem)
    return usage


def _array_of(job_id: str) -> str:
    """``"123_4"`` → ``"123"`` (the id squeue takes for a whole array)."""
    return job_id.split("_", 1)[0]


class SlurmBackend(Backend):
    """Runs attempts as Slurm job arrays, with the Slurm commands only (any Slurm version).

    Options (the ``[backend.slurm]`` table): ``partition``, ``account``, ``qos``,
    ``constraint``, ``exclusive``, ``extra_sbatch`` (list of sbatch options), ``setup``
    (list of shell lines run before each trial: ``module load``, activating an environment),
    ``signal_lead`` (a duration: ``SIGUSR1`` that long before the time limit; default: from
    the campaign's ``checkpoint_every``), ``array_throttle`` (``%P`` on every array),
    ``python`` (interpreter on the nodes, default ``python3``), ``sacct_lag`` (how long sacct
    may lag behind squeue, default 20 s) and ``command_timeout`` (default 30 s). With
    ``mode = "allocation"`` :meth:`from_options` returns a
    :class:`~dse_slurm.SlurmAllocationBackend` instead: one pilot job, attempts as its steps;
    with ``mode = "auto"`` (the default) :meth:`for_trials` picks one of the two once the
    campaign's time limit is known. ``mode = "jobs"`` always runs job arrays.

    The trial directories must be on a filesystem the compute nodes share with the
    controller: the manifest, the logs, ``result.json`` and checkpoints live there. A trial's
    stdout and stderr are appended to ``<trial_dir>/attempt-<n>/stdout.log`` and
    ``stderr.log`` (another rank's to ``stdout.<rank>.log``...). It inherits the environment
    ``sbatch`` passes its job (no ``--export`` is given: by Slurm's default, the
    controller's), with what the setup lines export and the job's variables set over it. As
    with the local backend, the directory of the controller's Python comes first on the
    trials' ``PATH`` (after the setup lines ran), so ``python`` in a command is the
    controller's environment when the nodes see it.
    """

    name: ClassVar[str] = "slurm"
    spans_tasks: ClassVar[bool] = True
    version: ClassVar[str] = "0.1.0"
    default_poll_interval: ClassVar[tuple[float, float]] = (2.0, 60.0)
    overrun_s = 150.0
    """Slurm checks time limits about every 30 s and waits KillWait (30 s by default) before
    SIGKILL; 150 s covers both with a margin."""

    def placement(self) -> Mapping[str, Any]:
        """Where and in what software environment a trial runs: the partition, the node
        constraint, exclusive nodes, the extra sbatch options and the setup lines (a result
        measured on one partition, or after other ``module load`` lines, is not reused on
        another). Account and QOS change who pays and when it starts, not the result."""
        o = self.options
        return {"partition": o.partition, "constraint": o.constraint, "exclusive": o.exclusive,
                "extra_sbatch": list(o.extra_sbatch), "setup": list(o.setup)}

    def __init__(
        self,
        *,
        options: SlurmOptions | None = None,
        sacct_lag: float = 20.0,
        command_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        self.options = options or SlurmOptions()
        self.sacct_lag = sacct_lag
        self.slurm = SlurmCommands(self, timeout=command_timeout)
        """Runs (and counts) this backend's Slurm commands."""
        self._settled = Settled()
        self._leaving: dict[str, _Leaving] = {}
        self._last_rows: dict[str, SqueueRow] = {}
        self._cancelled: set[str] = set()
        self._tasks: dict[str, int] = {}
        """Job id → tasks, for the attempts of several tasks (srun ran them)."""
        self._attempt_dirs: dict[str, Path] = {}
        """Job id → its attempt's directory (where the launcher leaves ``LAUNCH_NOTE``), for
        the jobs Slurm has, until their end is reported (as ``_tasks``)."""
        self._bin_dir = os.path.dirname(sys.executable)
        self.auto: tuple[SlurmTable, str] | None = None
        """``mode = "auto"``: the table and the file it came from, for :meth:`for_trials`."""

    @property
    def command_timeout(self) -> float:
        """Seconds after which a Slurm command counts as failed."""
        return self.slurm.timeout

    @property
    def accounting(self) -> bool:
        """Whether ``sacct`` answers (False once it said accounting storage is disabled)."""
        return self.slurm.accounting

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: str = "<campaign>") -> Self:
        table = read_table(options, source)
        if table.mode == "allocation":
            # One registered name, two modes: the table picks the class (not a subclass).
            allocation = SlurmAllocationBackend.from_table(table, source=source)
            return cast("Self", allocation)
        backend = cls(options=table.options, **table.timing)
        if table.mode == "auto":
            backend.auto = (table, source)
        return backend

    def for_trials(
        self, *, time_limit: float | None, resources: Resources, parallelism: int
    ) -> Backend:
        """``mode = "auto"``: the allocation (a :class:`~dse_slurm.SlurmAllocationBackend`)
        when every trial has a time limit of at most ``auto_threshold`` (default 10 minutes)
        and asks for no GPU, else this backend (job arrays). The allocation holds room for
        ``max_parallelism`` trials at once (``--ntasks=max_parallelism
        --cpus-per-task=<the trial's CPUs>``, fewer when the partition has fewer CPUs up, as
        one ``sinfo`` tells; for trials of several tasks, whole shares of nodes for the
        largest: :func:`~dse_slurm._allocation.spanning_pilot`) unless the table sets
        ``allocation_nodes`` or ``allocation_cpus``; such a pilot takes as many attempts
        again as it has room for (:attr:`dse.Backend.queue_ahead`), queued in its directory.
        Other modes: this backend."""
        if self.auto is None:
            return self
        table, source = self.auto
        why = auto_choice(table, time_limit, resources)
        if why is not None:
            log.info("backend.slurm mode auto: job arrays (%s)", why)
            return self
        sized = "allocation_nodes" in table.allocation or "allocation_cpus" in table.allocation
        tasks = None
        ahead = None
        if not sized and resources.tasks > 1:
            table, ahead = spanning_table(table, resources, parallelism, self.slurm)
        elif not sized:
            cpus = self.slurm.partition_cpus(self.options.partition)
            fit = parallelism if cpus is None else max(1, cpus // max(resources.cpus, 1))
            tasks = (min(parallelism, fit), resources.cpus)
            ahead = tasks[0]
        log.info("backend.slurm mode auto: allocation (time limit %gs <= auto_threshold %gs)",
                 time_limit, table.auto_threshold)
        allocation = SlurmAllocationBackend.from_table(table, source=source, tasks=tasks)
        for name, count in self.commands.items():  # the sinfo above: counted where it runs
            allocation.commands[name] = allocation.commands.get(name, 0) + count
        if ahead is not None:
            # The pilot runs at most that many (<= max_parallelism) trials at once: it may
            # be handed a second round, which it starts the moment a step ends.
            allocation.queue_ahead = ahead
        return allocation

    # -- submit -----------------------------------------------------------------------------

    def job_id_for(self, job: JobSpec) -> str | None:
        """Find an attempt submitted just before a controller crash, by its batch's job name:
        the manifest that holds the attempt names the batch, ``squeue``/``sacct`` the array."""
        slurm_dir = job.trial_dir.parent / SLURM_DIR
        try:
            manifests = sorted(slurm_dir.glob("*.jsonl"))
        except OSError:
            return None
        for manifest in manifests:
            index = _index_in_manifest(manifest, job.trial_id, job.attempt)
            if index is None:
                continue
            array = self.slurm.find_by_name(manifest.stem)
            return None if array is None else f"{array}_{index}"
        return None

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        ids: dict[int, str] = {}
        runnable: list[tuple[int, JobSpec]] = []
        for index, spec in enumerate(jobs):
            why = ("the job has no command (set [environment] command)" if not spec.argv
                   else self._too_wide(spec.resources))
            if why is not None:
                ids[index] = self._settled.new(spec, JobState.INVALID, why)
            else:
                runnable.append((index, spec))
        position = {id(spec): index for index, spec in runnable}
        for group in group_for_arrays(spec for _, spec in runnable):
            for spec, job_id in zip(group, self._submit_array(group), strict=True):
                ids[position[id(spec)]] = job_id
        return [ids[index] for index in range(len(jobs))]

    def refuse(self, resources: Resources) -> str | None:
        """Why no attempt asking for *resources* can run in the partition: more nodes than
        it has (Slurm would accept the job and keep it pending for ever)."""
        return super().refuse(resources) or self._too_wide(resources)

    def _too_wide(self, resources: Resources) -> str | None:
        if resources.nodes <= 1:
            return None
        known = self.slurm.partition_nodes(self.options.partition)
        if known is None or resources.nodes <= len(known[1]):
            return None
        name, nodes = known
        return (f"{resources.nodes} nodes asked, but the Slurm partition {name} has"
                f" {len(nodes)} ({','.join(nodes)})")

    def _spare(self, group: Sequence[JobSpec]) -> Sequence[JobSpec]:
        """*group* avoiding only as many of its nodes as its partition can spare (one
        ``sinfo``, asked once): Slurm refuses a job whose ``--exclude`` leaves too few."""
        first = group[0]
        known = self.slurm.partition_nodes(self.options.partition) if first.avoid_nodes else None
        if known is None:
            return group
        name, nodes = known
        excluded, kept = spare_exclusion(first.avoid_nodes, nodes, first.resources.nodes)
        if kept:
            log.warning("trials %s need %d of the %d nodes of partition %s: not avoiding %s",
                        ", ".join(s.trial_id for s in group), first.resources.nodes,
                        len(nodes), name, ", ".join(kept))
        return [dataclasses.replace(spec, avoid_nodes=tuple(excluded)) for spec in group]

    def _submit_array(self, group: Sequence[JobSpec]) -> list[str]:
        group = self._spare(group)
        first = group[0]
        slurm_dir = first.trial_dir.parent / SLURM_DIR
        # The job name is unique per batch: it finds the array again after a crash.
        job_name = f"dse.{first.trial_id.rsplit('-', 1)[0]}.{secrets.token_hex(4)}"
        trials = ",".join(f"{s.trial_id.rsplit('-', 1)[-1]}.{s.attempt}" for s in group)
        comment = f"dse trials={trials}"
        if len(comment) > 200:
            comment = comment[:197] + "..."
        options = self.options
        if options.signal_lead_s is None:
            options = dataclasses.replace(options, signal_lead_s=signal_lead(first))
        try:
            slurm_dir.mkdir(parents=True, exist_ok=True)
            manifest = slurm_dir / f"{job_name}.jsonl"
            script = slurm_dir / f"{job_name}.sh"
            write_atomic(manifest, render_manifest(group, [self._bin_dir]))
            write_atomic(script, render_array_script(
                group, options, job_name=job_name, comment=comment, manifest_path=manifest,
            ))
        except ConfigError as exc:
            return [self._settled.new(spec, JobState.INVALID, str(exc)) for spec in group]
        except OSError as exc:
            why = f"{type(exc).__name__}: {exc}"
            return [self._settled.new(spec, JobState.LAUNCH_ERROR, why) for spec in group]
        try:
            array = self.slurm.sbatch(script, job_name)
        except SubmitRefused as exc:
            return [self._settled.new(spec, exc.state, exc.reason) for spec in group]
        log.debug("submitted array %s (%d tasks) as %s", array, len(group), job_name)
        ids = [f"{array}_{index}" for index in range(len(group))]
        self._attempt_dirs.update(zip(ids, map(attempt_dir, group), strict=True))
        if first.resources.tasks > 1:
            self._tasks.update(dict.fromkeys(ids, first.resources.tasks))
        return ids

    # -- poll -------------------------------------------------------------------------------

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        out: dict[str, JobStatus] = self._settled.take(job_ids)
        now = self.clock.time()
        queued = [j for j in job_ids if j not in out and j not in self._leaving]
        if queued:
            rows = _single_tasks(self.slurm.squeue(
                sorted({_array_of(j) for j in queued}, key=int)
            ))
            for job_id in queued:
                row = rows.get(job_id)
                if row is None or row.state.split(" ", 1)[0] in TERMINAL_WORDS:
                    self._leaving[job_id] = _Leaving(now, row or self._last_rows.get(job_id))
                    continue
                self._last_rows[job_id] = row
                state, _, _, _ = to_job_state(row.state, queued=True)
                out[job_id] = JobStatus(job_id, state, node=_listed(row.nodes),
                                        reason=row.reason)
        if self._leaving:
            ends = _spanning(self.slurm, self._collect_ends(now), self._tasks)
            for job_id in ends:
                self._tasks.pop(job_id, None)
                self._attempt_dirs.pop(job_id, None)
            out.update(ends)
        return out

    def _collect_ends(self, now: float) -> dict[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        rows: dict[str, SacctRow] = {}
        if self.slurm.accounting:
            # A task that never ran has no row of its own in sacct, only the array's range
            # row (``123_[4-9]``, expanded by parse_sacct): ask for its array as well.
            asked = list(self._leaving) + sorted({
                _array_of(j) for j, leaving in self._leaving.items() if not _ran(leaving.row)
            })
            rows = _single_tasks(self.slurm.sacct(asked))
        for job_id, leaving in list(self._leaving.items()):
            status = self._end_from_sacct(job_id, rows.get(job_id))
            if status is None and job_id in self._cancelled and not _ran(leaving.row):
                # Cancelled while pending: Slurm drops such an array task without a trace.
                status = JobStatus(job_id, JobState.CANCELLED,
                                   reason="cancelled by dse before it started")
            waited = now - leaving.since >= self.sacct_lag
            if status is None and (not self.slurm.accounting or waited):
                status = self._end_from_squeue(job_id, leaving.row)
            if status is not None:
                out[job_id] = status
                del self._leaving[job_id]
                self._last_rows.pop(job_id, None)
                self._cancelled.discard(job_id)
        return out

    def _end_from_sacct(self, job_id: str, row: SacctRow | None) -> JobStatus | None:
        if row is None:
            return None
        exit_text = None if row.exit_code is None else f"{row.exit_code}:{row.signal or 0}"
        state, code, sig, ambiguous = to_job_state(row.state, exit_text)
        if not state.is_finished():
            return None  # sacct lags behind the controller: ask again next pass
        reason = _reason(state, row.state, row.cancelled_by, code, sig)
        refused = self._refused(job_id, state, code)
        if refused is not None:
            state, reason = JobState.INVALID, refused
        elif state is JobState.FAILED:
            reason = self._last_words(job_id) or reason
        return JobStatus(
            job_id, state, exit_code=code, signal=sig, node=row.nodes,
            started_at=row.started_at, ended_at=row.ended_at, reason=reason,
            ambiguous=ambiguous, usage=usage_from_sacct(row) or None,
        )

    def _refused(self, job_id: str, state: JobState, code: int | None) -> str | None:
        """Why the launcher could not start the command of *job_id* (see
        :func:`launch_refusal`); ``None`` if it could."""
        where = self._attempt_dirs.get(job_id)
        return None if where is None else launch_refusal(where, state, code)

    def _last_words(self, job_id: str) -> str | None:
        """The end of the ``stderr.log`` a failed *job_id* left in its attempt's directory
        (:func:`dse.stderr_tail`), or ``None``."""
        where = self._attempt_dirs.get(job_id)
        return None if where is None else stderr_tail(where / "stderr.log")

    def _end_from_squeue(self, job_id: str, row: SqueueRow | None) -> JobStatus:
        if row is None or row.state.split(" ", 1)[0] not in TERMINAL_WORDS:
            why = ("neither squeue nor sacct knows it any more" if row is None
                   else f"it left the queue while {row.state}; sacct has no end for it")
            return JobStatus(job_id, JobState.LOST, node=row.nodes if row else None,
                             reason=f"job vanished: {why}", ambiguous=True)
        state, code, sig, ambiguous = to_job_state(row.state)
        if state is JobState.SUCCEEDED:
            code = 0
        reason = _reason(state, row.state, None, code, sig)
        if state is JobState.FAILED:
            reason = f"FAILED ({row.reason or 'no reason'}; exit code unknown without sacct)"
            said = self._last_words(job_id)
            reason += f": {said}" if said else ""
        refused = self._refused(job_id, state, 127)  # squeue has no exit status: the note
        if refused is not None:
            state, reason = JobState.INVALID, refused
        return JobStatus(job_id, state, exit_code=code, signal=sig, node=row.nodes,
                         reason=reason, ambiguous=ambiguous)

    # -- cancel, reattach -------------------------------------------------------------------

    def _cancel(self, job_ids: Sequence[str]) -> None:
        slurm_ids = [j for j in job_ids if j not in self._settled]
        if slurm_ids:
            self._cancelled.update(slurm_ids)
            self.slurm.scancel(slurm_ids)

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        self._tasks.update({job_id: spec.resources.tasks for job_id, spec in jobs.items()
                            if spec.resources.tasks > 1})
        self._attempt_dirs.update({job_id: attempt_dir(spec) for job_id, spec in jobs.items()
                                   if _array_of(job_id).isdigit()})
        for job_id in jobs:
            if not _array_of(job_id).isdigit():
                # Never reached Slurm (an INVALID or a launch error id): nothing to adopt.
                self._settled.add(JobStatus(
                    job_id, JobState.LOST, reason="not a Slurm job id", ambiguous=True,
                ))


def auto_choice(table: SlurmTable, time_limit: float | None, resources: Resources
                ) -> str | None:
    """Why ``mode = "auto"`` runs job arrays for trials of *time_limit* and *resources*, or
    ``None`` when it runs them in an allocation."""
    if time_limit is None:
        return "the trials have no campaign-wide time limit"
    if time_limit > table.auto_threshold:
        return f"time limit {time_limit:g}s > auto_threshold {table.auto_threshold:g}s"
    if resources.gpus:
        return "the trials ask for GPUs"
    return None


_Row = TypeVar("_Row", SqueueRow, SacctRow)


def _single_tasks(rows: dict[str, _Row]) -> dict[str, _Row]:
    """Key the row of a one-task array that never ran under its task id as well: Slurm
    shows such a task as the bare array id (``123``, not ``123_0``)."""
    arrays = {job_id.split("_", 1)[0] for job_id in rows if "_" in job_id}
    for job_id in [j for j in rows if "_" not in j and j not in arrays]:
        rows.setdefault(f"{job_id}_0", rows[job_id])
    return rows


def _spanning(slurm: SlurmCommands, ends: dict[str, JobStatus], tasks: Mapping[str, int]
              ) -> dict[str, JobStatus]:
    """*ends* with what srun hides of the attempts it ran: the exit status of a failed one
    is srun's — a task it ended for another's failure shows as the signal's number — so the
    step's own (the highest of its tasks) is asked for, in one ``sacct``; and the nodes of a
    multi-node one are named (:func:`~dse_slurm._commands.blame_nodes`)."""
    failed = [job_id for job_id, status in ends.items()
              if job_id in tasks and status.state is JobState.FAILED]
    if failed and slurm.accounting:
        for job_id, code in slurm.step_exit_codes(failed).items():
            said = ends[job_id].reason  # the command's last words, kept when it left any
            ends[job_id] = dataclasses.replace(ends[job_id], exit_code=code, reason=(
                said if said and not said.startswith("exit code") else f"exit code {code}"))
    return blame_nodes(slurm, ends)


def _listed(nodes: str | None) -> str | None:
    """Slurm's compact node list as names (``n[1-2]`` → ``n1,n2``), ``None`` for none."""
    return (",".join(expand_hostlist(nodes)) or None) if nodes else None


def _ran(row: SqueueRow | None) -> bool:
    """Whether squeue ever showed the job on a node (a task cancelled while pending has none)."""
    return row is not None and row.nodes is not None


def _reason(
    state: JobState, word: str, cancelled_by: int | None, code: int | None, sig: int | None
) -> str | None:
    if state is JobState.CANCELLED:
        return f"CANCELLED by uid {cancelled_by}" if cancelled_by is not None else "CANCELLED"
    if state is JobState.TIMEOUT:
        return "Slurm ended it at its time limit (TIMEOUT)"
    if state is JobState.KILLED:
        return f"Slurm reports {word} by signal {sig}"
    if state is JobState.FAILED:
        return f"exit code {code}" if code is not None else None
    if state is JobState.SUCCEEDED:
        return None
    return f"Slurm reports {word}"


def _index_in_manifest(manifest: Path, trial_id: str, attempt: int) -> int | None:
    try:
        with manifest.open(encoding="utf-8") as handle:
            for index, line in enumerate(handle):
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if entry.get("trial_id") == trial_id and entry.get("attempt") == attempt:
                        return index
    except OSError:
        return None
    return None

