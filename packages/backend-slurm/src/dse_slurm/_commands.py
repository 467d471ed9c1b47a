"""What both Slurm backends share: Slurm's commands, run and counted, and the ends a backend
decides without asking Slurm.

:class:`SlurmCommands` is the one place a Slurm command (``sbatch``, ``squeue``, ``sacct``,
``scancel``) is run. It owns what the commands taught it — whether accounting answers, which
batch name went out as which job id — and counts every command through the backend's
:meth:`dse.Backend.count_command`. :class:`Settled` holds the ends decided without Slurm (a job
with no command, a refused ``sbatch``, an id that never reached Slurm) until the next poll.
The array backend (:mod:`dse_slurm._arrays`) and the allocation backend
(:mod:`dse_slurm._allocation`) each extend :class:`dse.Backend` and compose both; this module
imports neither.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import subprocess
import time
from typing import TYPE_CHECKING

from dse import JobState, JobStatus
from dse_slurm._script import MAX_SIGNAL_LEAD_S, parse_sbatch_output, sbatch_argv
from dse_slurm._states import (
    SACCT_ARGS,
    SQUEUE_ARGS,
    SacctRow,
    SqueueRow,
    expand_hostlist,
    node_is_failing,
    parse_exit_code,
    parse_sacct,
    parse_squeue,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from pathlib import Path

    from dse import Backend, JobSpec

__all__ = ["Settled", "SlurmCommandError", "SlurmCommands", "SubmitRefused"]

log = logging.getLogger("dse.slurm")

SLURM_DIR = ".slurm"
"""Directory (beside the trial directories of a run) holding manifests, scripts and logs."""
TERMINAL_WORDS = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED", "NODE_FAIL",
    "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT",
})
"""squeue's words for a job that ended."""
INVALID_JOB_ID = "Invalid job id specified"
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


_QUERIES = frozenset({"squeue", "sacct"})
"""The commands given up when the controller is asked to stop (they only ask)."""
_WAIT_SLICE = 0.2
"""How often a command's wait looks at whether the controller is stopping."""


class SlurmCommandError(RuntimeError):
    """A Slurm command failed or did not answer in time."""


class SubmitRefused(SlurmCommandError):
    """``sbatch`` did not submit a script; the attempts it carried end in :attr:`state`."""

    def __init__(self, state: JobState, reason: str, *, answered: bool) -> None:
        super().__init__(reason)
        self.state = state
        """``INVALID`` when the job itself was refused (it would be again), else
        ``LAUNCH_ERROR``."""
        self.reason = reason
        self.answered = answered
        """Whether sbatch itself said no (rather than failing to answer)."""


class SlurmCommands:
    """Runs Slurm's commands for *backend*, counting each through its
    :meth:`dse.Backend.count_command`.

    A command that cannot start or does not answer within *timeout* seconds raises
    :class:`SlurmCommandError`, and so does a query (``squeue``, ``sacct``) still waiting when
    the controller is asked to stop (:meth:`dse.Backend.interrupt`); each method says which
    exit statuses it judges itself.
    """

    def __init__(self, backend: Backend, *, timeout: float = 30.0) -> None:
        self.count: Callable[[str], None] = backend.count_command
        self.timeout = timeout
        self._backend = backend
        self.accounting = True
        """Whether ``sacct`` answers (False once it said accounting storage is disabled)."""
        self._by_name: dict[str, str | None] = {}
        self._partitions: dict[str | None, tuple[str, tuple[str, ...]]] | None = None

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run one Slurm command (counted); the caller judges its exit status."""
        self.count(argv[0])
        exe = shutil.which(argv[0])
        if exe is None:
            msg = f"{argv[0]} is not on PATH (is this a Slurm submit host?)"
            raise SlurmCommandError(msg)
        try:
            proc = subprocess.Popen([exe, *argv[1:]], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        except OSError as exc:
            raise SlurmCommandError(f"{argv[0]}: {exc}") from None
        with proc:
            out, err = self._wait(proc, argv[0], interruptible=argv[0] in _QUERIES)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def _wait(self, proc: subprocess.Popen[str], name: str, *, interruptible: bool
              ) -> tuple[str, str]:
        """*proc*'s output once it exits; killed when it does not answer within the timeout,
        or (a query) when the controller is asked to stop meanwhile."""
        began = time.monotonic()
        while True:
            left = began + self.timeout - time.monotonic()
            try:
                return proc.communicate(timeout=max(min(left, _WAIT_SLICE), 0.0))
            except subprocess.TimeoutExpired:
                # Asked to stop since (dse.Backend.interrupt): a query is given up.
                stop = self._backend.interrupted_at if interruptible else None
                if stop is None or stop < began:
                    if left > _WAIT_SLICE:
                        continue
                    why = f"{name} did not answer within {self.timeout:g}s"
                else:
                    why = f"{name} given up: the controller is stopping"
            proc.kill()
            proc.communicate()
            raise SlurmCommandError(why)

    @staticmethod
    def failure(proc: subprocess.CompletedProcess[str]) -> str:
        """One line saying how a command failed."""
        text = (proc.stderr or proc.stdout).strip().replace("\n", " | ")
        return f"{proc.args[0].rsplit('/', 1)[-1]} exited {proc.returncode}: {text}"

    def sbatch(self, script: Path, job_name: str) -> str:
        """Submit *script* (whose job name is *job_name*, unique per submission); return the
        job id. When sbatch does not answer, the job is looked for by its name: it may have
        been submitted all the same. :class:`SubmitRefused` when it was not submitted."""
        try:
            proc = self.run(sbatch_argv(script))
        except SlurmCommandError as exc:
            job_id = self.find_by_name(job_name)
            if job_id is None:
                raise SubmitRefused(JobState.LAUNCH_ERROR, str(exc), answered=False) from None
            return job_id
        if proc.returncode != 0:
            why = self.failure(proc)
            state = (JobState.INVALID if any(r in why for r in _REFUSED)
                     else JobState.LAUNCH_ERROR)
            raise SubmitRefused(state, why, answered=True)
        try:
            job_id = parse_sbatch_output(proc.stdout)
        except ValueError as exc:
            raise SubmitRefused(JobState.LAUNCH_ERROR, str(exc), answered=False) from None
        self._by_name[job_name] = job_id
        return job_id

    def find_by_name(self, job_name: str) -> str | None:
        """The job id of the job (or array) named *job_name*, from ``squeue``, else ``sacct``
        (the last 7 days); ``None`` when neither knows it or they fail. Remembered."""
        if job_name in self._by_name:
            return self._by_name[job_name]
        found: str | None = None
        with contextlib.suppress(SlurmCommandError):
            proc = self.run(["squeue", "--noheader", "--states=all", "--format=%F",
                             f"--name={job_name}"])
            ids = proc.stdout.split() if proc.returncode == 0 else []
            if not ids and self.accounting:
                proc = self.run(["sacct", "-X", "--noheader", "--parsable2",
                                 "--format=JobID", f"--name={job_name}", "--starttime=now-7days"])
                ids = [line.split("_", 1)[0] for line in proc.stdout.split()]
            found = ids[0] if ids and ids[0].isdigit() else None
        self._by_name[job_name] = found
        return found

    def squeue(self, job_ids: Iterable[str]) -> dict[str, SqueueRow]:
        """One ``squeue --states=all`` for *job_ids* (jobs or whole arrays): their rows by
        job id; empty when the controller knows none of them any more."""
        proc = self.run([*SQUEUE_ARGS, "--states=all", f"--jobs={','.join(job_ids)}"])
        if proc.returncode != 0:
            if INVALID_JOB_ID in proc.stderr:
                return {}  # every job asked for is gone from the controller
            raise SlurmCommandError(self.failure(proc))
        return parse_squeue(proc.stdout)

    def sacct(self, job_ids: Iterable[str]) -> dict[str, SacctRow]:
        """One ``sacct`` for *job_ids*: their accounting rows by job id. Empty, and
        :attr:`accounting` false from then on, when accounting storage is disabled."""
        proc = self.run([*SACCT_ARGS, f"--jobs={','.join(job_ids)}"])
        if proc.returncode == 0:
            return parse_sacct(proc.stdout)
        if "accounting storage is disabled" in proc.stderr.lower():
            log.warning("Slurm accounting is disabled: ends come from squeue alone"
                        " (no exit codes, no cost)")
            self.accounting = False
            return {}
        raise SlurmCommandError(self.failure(proc))

    def partition_cpus(self, partition: str | None) -> int | None:
        """The CPUs of *partition* (``None``: the default partition) that are not down or
        drained, from one ``sinfo``; ``None`` when sinfo fails or does not list it."""
        try:
            proc = self.run(["sinfo", "--noheader", "--format=%P %C"])
        except SlurmCommandError:
            return None
        for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
            name, _, cpus = line.partition(" ")
            if name == partition or (partition is None and name.endswith("*")):
                with contextlib.suppress(ValueError):
                    _allocated, _idle, other, total = (int(n) for n in cpus.split("/"))
                    return total - other
        return None

    def step_exit_codes(self, job_ids: Iterable[str]) -> dict[str, int]:
        """The exit status of the first step (``<id>.0``, the one srun ran) of each of
        *job_ids* whose step failed with one, from one ``sacct``; empty when it fails."""
        steps = [f"{job_id}.0" for job_id in job_ids]
        try:
            proc = self.run(["sacct", "--noheader", "--parsable2", "--format=JobID,ExitCode",
                             f"--jobs={','.join(steps)}"])
        except SlurmCommandError as exc:
            log.warning("sacct failed: %s", exc)
            return {}
        codes: dict[str, int] = {}
        for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
            step, _, exit_text = line.strip().partition("|")
            code, _ = parse_exit_code(exit_text)
            if step.endswith(".0") and code:
                codes[step[:-2]] = code
        return codes

    def partition_nodes(self, partition: str | None) -> tuple[str, tuple[str, ...]] | None:
        """*partition*'s name and nodes, whatever their state (``None``: the default
        partition), from one ``sinfo`` asked once: a partition's nodes do not change while a
        campaign runs. ``None`` when sinfo fails (asked again next time) or does not list
        it."""
        if self._partitions is None:
            try:
                proc = self.run(["sinfo", "--noheader", "--Node", "--format=%N|%P"])
            except SlurmCommandError:
                return None
            if proc.returncode != 0:
                return None
            self._partitions = _partitions(proc.stdout)
        return self._partitions.get(partition)

    def failing_nodes(self, nodes: Iterable[str]) -> set[str]:
        """Those of *nodes* that Slurm shows down, drained or failing now, from one
        ``sinfo``; empty when sinfo fails (nobody is blamed)."""
        asked = sorted(set(nodes))
        if not asked:
            return set()
        try:
            proc = self.run(["sinfo", "--noheader", "--Node", f"--nodes={','.join(asked)}",
                             "--format=%N|%t"])
        except SlurmCommandError as exc:
            log.warning("sinfo failed: %s", exc)
            return set()
        if proc.returncode != 0:
            log.warning("%s", self.failure(proc))
            return set()
        rows = (line.strip().split("|") for line in proc.stdout.splitlines())
        return {row[0] for row in rows if len(row) == 2 and node_is_failing(row[1])}

    def scancel(self, job_ids: Sequence[str]) -> None:
        """One ``scancel`` for *job_ids*; a failure is logged (later polls tell the ends)."""
        try:
            proc = self.run(["scancel", *job_ids])
        except SlurmCommandError as exc:
            log.warning("scancel failed: %s", exc)
            return
        if proc.returncode != 0 and INVALID_JOB_ID not in proc.stderr:
            log.warning("%s", self.failure(proc))


def _partitions(text: str) -> dict[str | None, tuple[str, tuple[str, ...]]]:
    """``sinfo --Node --format=%N|%P``'s lines as partition → (its name, its nodes in order);
    the default partition (``batch*``) under ``None`` as well."""
    nodes: dict[str, list[str]] = {}
    default = None
    for line in text.splitlines():
        node, _, partition = line.strip().partition("|")
        if not node or not partition:
            continue
        name = partition.rstrip("*")
        if partition.endswith("*"):
            default = name
        listed = nodes.setdefault(name, [])
        if node not in listed:
            listed.append(node)
    out: dict[str | None, tuple[str, tuple[str, ...]]] = {
        name: (name, tuple(listed)) for name, listed in nodes.items()
    }
    if default is not None:
        out[None] = out[default]
    return out


class Settled:
    """Ends a backend decided without asking Slurm, each reported once, by the next poll."""

    def __init__(self) -> None:
        self._statuses: dict[str, JobStatus] = {}
        self._made = 0

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._statuses

    def add(self, status: JobStatus) -> None:
        """Report *status* (for its job id) at the next poll."""
        self._statuses[status.job_id] = status

    def new(self, spec: JobSpec, state: JobState, reason: str) -> str:
        """An id for a job that never reached Slurm, ending in *state* at the next poll."""
        self._made += 1
        job_id = f"{state.value}-{self._made}-{spec.trial_id}.{spec.attempt}"
        self.add(JobStatus(job_id, state, reason=reason,
                           ambiguous=state is JobState.LAUNCH_ERROR))
        return job_id

    def take(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        """The settled statuses of *job_ids*, forgotten once handed out."""
        return {j: s for j in job_ids if (s := self._statuses.pop(j, None)) is not None}


def signal_lead(spec: JobSpec) -> int | None:
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


def write_atomic(path: Path, text: str) -> None:
    """Write *text* to *path* so that a reader on any node sees all of it or none."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def blame_nodes(slurm: SlurmCommands, ends: dict[str, JobStatus]) -> dict[str, JobStatus]:
    """*ends* with the node of each multi-node end named for the engine, which avoids the
    node of an unsuccessful end on retry: a success keeps its whole node list
    (``n1,n2,n3``); any other end names the nodes of it that Slurm now shows down, drained or
    failing (one ``sinfo`` for all of them), or none, and says in its reason where it ran.
    (A compact list such as ``n[1-3]`` there would avoid every node.)"""
    spans = {job_id: names for job_id, status in ends.items()
             if len(names := expand_hostlist(status.node or "")) > 1}
    suspects = {node for job_id, names in spans.items()
                if ends[job_id].state is not JobState.SUCCEEDED for node in names}
    failing = slurm.failing_nodes(suspects) if suspects else set()
    for job_id, names in spans.items():
        status = ends[job_id]
        if status.state is JobState.SUCCEEDED:
            ends[job_id] = dataclasses.replace(status, node=",".join(names))
            continue
        blamed = [node for node in names if node in failing]
        where = f"ran on {','.join(names)}" + (
            f"; Slurm shows {','.join(blamed)} down or failing" if blamed else "")
        ends[job_id] = dataclasses.replace(
            status, node=",".join(blamed) or None,
            reason=f"{status.reason}; {where}" if status.reason else where,
        )
    return ends
