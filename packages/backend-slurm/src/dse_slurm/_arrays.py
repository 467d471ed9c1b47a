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
import math
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar, cast

from dse import Backend, ConfigError, JobSpec, JobState, JobStatus, parse_duration
from dse_slurm._script import (
    MAX_SIGNAL_LEAD_S,
    SlurmOptions,
    group_for_arrays,
    parse_sbatch_output,
    render_array_script,
    render_manifest,
    sbatch_argv,
)
from dse_slurm._states import (
    SACCT_ARGS,
    SQUEUE_ARGS,
    SacctRow,
    SqueueRow,
    parse_sacct,
    parse_squeue,
    to_job_state,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = ["SlurmBackend", "SlurmCommandError", "usage_from_sacct"]

log = logging.getLogger("dse.slurm")

SLURM_DIR = ".slurm"
"""Directory (beside the trial directories of a run) holding manifests, scripts and logs."""
_TERMINAL_WORDS = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED", "NODE_FAIL",
    "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT",
})
_INVALID_JOB_ID = "Invalid job id specified"
# sbatch refusals that the job itself causes: it would be refused the same way again.
_REFUSED = (
    "Requested node configuration is not available",
    "Invalid partition name",
    "Invalid account",
    "Invalid qos",
    "Invalid feature specification",
    "Invalid generic resource",
    "More processors requested than permitted",
    "Memory required by task is not available",
    "Requested time limit is invalid",
    "Node count specification invalid",
    "Invalid directive",
    "unrecognized option",
    "invalid option",
)
_ALLOCATION_KEYS = ("allocation_nodes", "allocation_time", "allocation_cpus")
_OPTION_KEYS = frozenset({
    "partition", "account", "qos", "constraint", "exclusive", "extra_sbatch", "setup",
    "signal_lead", "array_throttle", "python", "sacct_lag", "command_timeout",
    "mode", *_ALLOCATION_KEYS,
})


class SlurmCommandError(RuntimeError):
    """A Slurm command failed or did not answer in time."""


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


def _signal_lead(spec: JobSpec) -> int | None:
    """``--signal`` lead from the trial's checkpoint cadence: the trial is told at least
    one cadence (never under Slurm's 60 s resolution) before its time limit, so it can write
    a last checkpoint; never more than half the limit."""
    every = spec.env.get("DSE_CHECKPOINT_EVERY")
    if every is None or spec.time_limit is None:
        return None
    try:
        cadence = float(every)
    except ValueError:
        return None
    lead = min(max(60, math.ceil(cadence)), int(spec.time_limit // 2), MAX_SIGNAL_LEAD_S)
    return lead if lead > 0 else None


class SlurmBackend(Backend):
    """Runs attempts as Slurm job arrays, with the Slurm commands only (any Slurm version).

    Options (the ``[backend.slurm]`` table): ``partition``, ``account``, ``qos``,
    ``constraint``, ``exclusive``, ``extra_sbatch`` (list of sbatch options), ``setup``
    (list of shell lines run before each trial: ``module load``, activating an environment),
    ``signal_lead`` (a duration: ``SIGUSR1`` that long before the time limit; default: from
    the campaign's ``checkpoint_every``), ``array_throttle`` (``%P`` on every array),
    ``python`` (interpreter on the nodes, default ``python3``), ``sacct_lag`` (how long sacct
    may lag behind squeue, default 20 s) and ``command_timeout`` (default 30 s). With
    ``mode = "allocation"`` (default ``"jobs"``) :meth:`from_options` returns a
    :class:`~dse_slurm.SlurmAllocationBackend` instead: one pilot job, attempts as its steps.

    The trial directories must be on a filesystem the compute nodes share with the
    controller: the manifest, the logs, ``result.json`` and checkpoints live there. As with
    the local backend, the directory of the controller's Python comes first on the trials'
    ``PATH`` (after the setup lines ran), so ``python`` in a command is the controller's
    environment when the nodes see it.
    """

    name: ClassVar[str] = "slurm"
    version: ClassVar[str] = "0.1.0"
    default_poll_interval: ClassVar[tuple[float, float]] = (2.0, 60.0)
    overrun_s = 150.0
    """Slurm checks time limits about every 30 s and waits KillWait (30 s by default) before
    SIGKILL; 150 s covers both with a margin."""

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
        self.command_timeout = command_timeout
        self.accounting = True
        """Whether ``sacct`` answers (False once it said accounting storage is disabled)."""
        self._finals: dict[str, JobStatus] = {}
        self._leaving: dict[str, _Leaving] = {}
        self._last_rows: dict[str, SqueueRow] = {}
        self._cancelled: set[str] = set()
        self._invalid = 0
        self._lookups: dict[str, str | None] = {}
        self._bin_dir = os.path.dirname(sys.executable)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: str = "<campaign>") -> Self:
        where = f"{source}: backend.slurm"
        unknown = sorted(set(options) - _OPTION_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown option(s) {unknown}")
        values: dict[str, Any] = {}
        for key in ("partition", "account", "qos", "constraint", "python"):
            if key in options:
                if not isinstance(options[key], str):
                    raise ConfigError(f"{where}.{key}: expected a string")
                values[key] = options[key]
        if "exclusive" in options:
            if not isinstance(options["exclusive"], bool):
                raise ConfigError(f"{where}.exclusive: expected true or false")
            values["exclusive"] = options["exclusive"]
        for key in ("extra_sbatch", "setup"):
            if key in options:
                items = options[key]
                if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                    raise ConfigError(f"{where}.{key}: expected a list of strings")
                values[key] = tuple(items)
        if "array_throttle" in options:
            throttle = options["array_throttle"]
            if not isinstance(throttle, int) or isinstance(throttle, bool):
                raise ConfigError(f"{where}.array_throttle: expected an integer")
            values["array_throttle"] = throttle
        if "signal_lead" in options:
            values["signal_lead_s"] = math.ceil(
                parse_duration(options["signal_lead"], f"{where}.signal_lead")
            )
        timing = {
            key: parse_duration(options[key], f"{where}.{key}")
            for key in ("sacct_lag", "command_timeout") if key in options
        }
        mode = options.get("mode", "jobs")
        if mode not in ("jobs", "allocation"):
            raise ConfigError(f'{where}.mode: expected "jobs" or "allocation" (got {mode!r})')
        allocation = {key: options[key] for key in _ALLOCATION_KEYS if key in options}
        if allocation and mode != "allocation":
            raise ConfigError(f'{where}: {sorted(allocation)} need mode = "allocation"')
        try:
            if mode == "allocation":
                from dse_slurm._allocation import SlurmAllocationBackend

                return cast("Self", SlurmAllocationBackend.with_options(
                    SlurmOptions(**values), allocation, where=where, **timing,
                ))
            return cls(options=SlurmOptions(**values), **timing)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    # -- running Slurm commands -------------------------------------------------------------

    def _run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run one Slurm command (counted); :class:`SlurmCommandError` if it cannot start
        or does not answer in time. The caller judges the exit status."""
        self.count_command(argv[0])
        exe = shutil.which(argv[0])
        if exe is None:
            msg = f"{argv[0]} is not on PATH (is this a Slurm submit host?)"
            raise SlurmCommandError(msg)
        try:
            return subprocess.run(
                [exe, *argv[1:]], capture_output=True, text=True, check=False,
                timeout=self.command_timeout,
            )
        except subprocess.TimeoutExpired:
            msg = f"{argv[0]} did not answer within {self.command_timeout:g}s"
            raise SlurmCommandError(msg) from None
        except OSError as exc:
            raise SlurmCommandError(f"{argv[0]}: {exc}") from None

    @staticmethod
    def _failure(proc: subprocess.CompletedProcess[str]) -> str:
        text = (proc.stderr or proc.stdout).strip().replace("\n", " | ")
        return f"{proc.args[0].rsplit('/', 1)[-1]} exited {proc.returncode}: {text}"

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
            array = self._array_by_name(manifest.stem)
            return None if array is None else f"{array}_{index}"
        return None

    def _array_by_name(self, job_name: str) -> str | None:
        if job_name in self._lookups:
            return self._lookups[job_name]
        found: str | None = None
        with contextlib.suppress(SlurmCommandError):
            proc = self._run(["squeue", "--noheader", "--states=all", "--format=%F",
                              f"--name={job_name}"])
            ids = proc.stdout.split() if proc.returncode == 0 else []
            if not ids and self.accounting:
                proc = self._run(["sacct", "-X", "--noheader", "--parsable2",
                                  "--format=JobID", f"--name={job_name}", "--starttime=now-7days"])
                ids = [line.split("_", 1)[0] for line in proc.stdout.split()]
            found = ids[0] if ids and ids[0].isdigit() else None
        self._lookups[job_name] = found
        return found

    def _submit(self, jobs: Sequence[JobSpec]) -> Sequence[str]:
        ids: dict[int, str] = {}
        runnable: list[tuple[int, JobSpec]] = []
        for index, spec in enumerate(jobs):
            if not spec.argv:
                ids[index] = self._final(spec, JobState.INVALID,
                                         "the job has no command (set [environment] command)")
            else:
                runnable.append((index, spec))
        position = {id(spec): index for index, spec in runnable}
        for group in group_for_arrays(spec for _, spec in runnable):
            for spec, job_id in zip(group, self._submit_array(group), strict=True):
                ids[position[id(spec)]] = job_id
        return [ids[index] for index in range(len(jobs))]

    def _final(self, spec: JobSpec, state: JobState, reason: str) -> str:
        """A job that never reached Slurm: its end is reported by the next poll."""
        self._invalid += 1
        job_id = f"{state.value}-{self._invalid}-{spec.trial_id}.{spec.attempt}"
        self._finals[job_id] = JobStatus(job_id, state, reason=reason,
                                         ambiguous=state is JobState.LAUNCH_ERROR)
        return job_id

    def _submit_array(self, group: Sequence[JobSpec]) -> list[str]:
        first = group[0]
        run_dir = first.trial_dir.parent
        slurm_dir = run_dir / SLURM_DIR
        # The job name is unique per batch: it finds the array again after a crash.
        job_name = f"dse.{first.trial_id.rsplit('-', 1)[0]}.{secrets.token_hex(4)}"
        trials = ",".join(f"{s.trial_id.rsplit('-', 1)[-1]}.{s.attempt}" for s in group)
        comment = f"dse trials={trials}"
        if len(comment) > 200:
            comment = comment[:197] + "..."
        options = self.options
        if options.signal_lead_s is None:
            options = dataclasses.replace(options, signal_lead_s=_signal_lead(first))
        try:
            slurm_dir.mkdir(parents=True, exist_ok=True)
            manifest = slurm_dir / f"{job_name}.jsonl"
            script = slurm_dir / f"{job_name}.sh"
            _write_atomic(manifest, render_manifest(group, [self._bin_dir]))
            _write_atomic(script, render_array_script(
                group, options, job_name=job_name, comment=comment, manifest_path=manifest,
            ))
        except ConfigError as exc:
            return [self._final(spec, JobState.INVALID, str(exc)) for spec in group]
        except OSError as exc:
            return [self._final(spec, JobState.LAUNCH_ERROR, f"{type(exc).__name__}: {exc}")
                    for spec in group]
        try:
            proc = self._run(sbatch_argv(script))
        except SlurmCommandError as exc:
            # It may have been submitted all the same: look for it by its name.
            array = self._array_by_name(job_name)
            if array is None:
                return [self._final(spec, JobState.LAUNCH_ERROR, str(exc)) for spec in group]
        else:
            if proc.returncode != 0:
                why = self._failure(proc)
                state = (JobState.INVALID if any(r in why for r in _REFUSED)
                         else JobState.LAUNCH_ERROR)
                return [self._final(spec, state, why) for spec in group]
            try:
                array = parse_sbatch_output(proc.stdout)
            except ValueError as exc:
                return [self._final(spec, JobState.LAUNCH_ERROR, str(exc)) for spec in group]
        self._lookups[job_name] = array
        log.debug("submitted array %s (%d tasks) as %s", array, len(group), job_name)
        return [f"{array}_{index}" for index in range(len(group))]

    # -- poll -------------------------------------------------------------------------------

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        now = time.monotonic()
        queued: list[str] = []
        for job_id in job_ids:
            final = self._finals.pop(job_id, None)
            if final is not None:
                out[job_id] = final
            elif job_id not in self._leaving:
                queued.append(job_id)
        if queued:
            rows = self._squeue(queued)
            for job_id in queued:
                row = rows.get(job_id)
                if row is None or row.state.split(" ", 1)[0] in _TERMINAL_WORDS:
                    self._leaving[job_id] = _Leaving(now, row or self._last_rows.get(job_id))
                    continue
                self._last_rows[job_id] = row
                state, _, _, _ = to_job_state(row.state, queued=True)
                out[job_id] = JobStatus(job_id, state, node=row.nodes, reason=row.reason)
        if self._leaving:
            out.update(self._collect_ends(now))
        return out

    def _squeue(self, job_ids: Sequence[str]) -> dict[str, SqueueRow]:
        arrays = sorted({_array_of(j) for j in job_ids}, key=int)
        proc = self._run([*SQUEUE_ARGS, "--states=all", f"--jobs={','.join(arrays)}"])
        if proc.returncode != 0:
            if _INVALID_JOB_ID in proc.stderr:
                return {}  # every job asked for is gone from the controller
            raise SlurmCommandError(self._failure(proc))
        return _single_tasks(parse_squeue(proc.stdout))

    def _collect_ends(self, now: float) -> dict[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        rows: dict[str, SacctRow] = {}
        if self.accounting:
            # A task that never ran has no row of its own in sacct, only the array's range
            # row (``123_[4-9]``, expanded by parse_sacct): ask for its array as well.
            asked = list(self._leaving) + sorted({
                _array_of(j) for j, leaving in self._leaving.items() if not _ran(leaving.row)
            })
            proc = self._run([*SACCT_ARGS, f"--jobs={','.join(asked)}"])
            if proc.returncode == 0:
                rows = _single_tasks(parse_sacct(proc.stdout))
            elif "accounting storage is disabled" in proc.stderr.lower():
                log.warning("Slurm accounting is disabled: ends come from squeue alone"
                            " (no exit codes, no cost)")
                self.accounting = False
            else:
                raise SlurmCommandError(self._failure(proc))
        for job_id, leaving in list(self._leaving.items()):
            status = self._end_from_sacct(job_id, rows.get(job_id))
            if status is None and job_id in self._cancelled and not _ran(leaving.row):
                # Cancelled while pending: Slurm drops such an array task without a trace.
                status = JobStatus(job_id, JobState.CANCELLED,
                                   reason="cancelled by dse before it started")
            if status is None and (not self.accounting or now - leaving.since >= self.sacct_lag):
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
        return JobStatus(
            job_id, state, exit_code=code, signal=sig, node=row.nodes,
            started_at=row.started_at, ended_at=row.ended_at, reason=reason,
            ambiguous=ambiguous, usage=usage_from_sacct(row) or None,
        )

    def _end_from_squeue(self, job_id: str, row: SqueueRow | None) -> JobStatus:
        if row is None or row.state.split(" ", 1)[0] not in _TERMINAL_WORDS:
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
        return JobStatus(job_id, state, exit_code=code, signal=sig, node=row.nodes,
                         reason=reason, ambiguous=ambiguous)

    # -- cancel, reattach -------------------------------------------------------------------

    def _cancel(self, job_ids: Sequence[str]) -> None:
        slurm_ids = [j for j in job_ids if j not in self._finals]
        if not slurm_ids:
            return
        self._cancelled.update(slurm_ids)
        try:
            proc = self._run(["scancel", *slurm_ids])
        except SlurmCommandError as exc:
            log.warning("scancel failed: %s", exc)
            return
        if proc.returncode != 0 and _INVALID_JOB_ID not in proc.stderr:
            log.warning("%s", self._failure(proc))

    def _reattach(self, jobs: Mapping[str, JobSpec]) -> None:
        for job_id in jobs:
            if not _array_of(job_id).isdigit():
                # Never reached Slurm (an INVALID or a launch error id): nothing to adopt.
                self._finals[job_id] = JobStatus(
                    job_id, JobState.LOST, reason="not a Slurm job id", ambiguous=True,
                )


_Row = TypeVar("_Row", SqueueRow, SacctRow)


def _single_tasks(rows: dict[str, _Row]) -> dict[str, _Row]:
    """Key the row of a one-task array that never ran under its task id as well: Slurm
    shows such a task as the bare array id (``123``, not ``123_0``)."""
    arrays = {job_id.split("_", 1)[0] for job_id in rows if "_" in job_id}
    for job_id in [j for j in rows if "_" not in j and j not in arrays]:
        rows.setdefault(f"{job_id}_0", rows[job_id])
    return rows


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


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
