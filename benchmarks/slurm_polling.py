"""Slurm polling cost: commands and wall time of one pass over 100 jobs, dse against its peers.

What is measured (one process, the running Slurm cluster, one run after the other):

* **dse**: ``dse_slurm.SlurmBackend`` submits 100 real jobs (``sleep 600``, 1 CPU) as four job
  arrays of 40, 30, 20 and 10, then polls them. Commands per pass come from the backend's own
  count (``backend.last_pass_commands``); the wall time of a pass is the median of several
  ``poll()`` calls. A wave of 32 more trials is then submitted in one ``submit()`` call and its
  ``sbatch`` calls are counted (``backend.commands``). Last, the running jobs are cancelled and
  the passes that collect their ends are counted and timed (``squeue`` + one batched ``sacct``).
* **CloudAI's pattern** (cloudai#363; CloudAI itself is not installable here): every pass, for
  each outstanding job, the three ``sacct -j <id>`` calls of ``SlurmSystem.is_job_running``,
  ``is_job_completed`` and ``get_job_status``, with their exact formats, on the same 100 jobs.
  Its submission is one ``sbatch`` per trial. The calls run without CloudAI's bash wrapper,
  which only flatters the peer.
* **submitit's pattern** (``SlurmInfoWatcher``): one ``sacct -o JobID,State,NodeList
  --parsable2 -j <array> ...`` for every outstanding array per pass; ``map_array`` submits one
  array. Both peers' 32-trial submissions are made for real (held, so they never take a CPU)
  and cancelled at once.

Each array runs at most one task at a time (``%1``), so 4 jobs run and 96 pend while the
benchmark leaves CPUs to anyone else sharing the cluster. Everything submitted is cancelled
at the end, whatever happens. Work files live in ``benchmarks/.work/slurm_polling/<run>/``.

Usage::

    python benchmarks/slurm_polling.py           # about two and a half minutes
    python benchmarks/slurm_polling.py --quick   # under a minute (one CloudAI-pattern pass)

Needs ``sbatch``, ``squeue``, ``scancel`` and ``sacct`` talking to a cluster with accounting;
without them it prints one line and exits 2. The last line printed is one JSON object:
commands_per_pass_100_jobs, sbatch_calls_32_trials, pass_wall_s, the peers' figures and the
ratios (``*_ratio_to_peer``: dse's figure divided by the CloudAI pattern's; below 1 is better).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _peers import table

import dse
from dse import JobSpec, JobState, Resources
from dse_slurm import SlurmBackend, SlurmOptions

WORK_DIR = Path(__file__).resolve().parent / ".work" / "slurm_polling"
ARRAYS = (40, 30, 20, 10)
WAVE = 32
COMMANDS_TARGET = 2
SBATCH_TARGET = 1
COMMAND_TIMEOUT_S = 30.0
# CloudAI's three per-job queries, verbatim (SlurmSystem.is_job_running, is_job_completed,
# get_job_status); the first two are the same command.
CLOUDAI_QUERIES = (
    ("--format=State", "--noheader"),
    ("--format=State", "--noheader"),
    ("--format=JobID,JobName,State,ExitCode,Start,End,ElapsedRAW,SubmitLine",
     "--delimiter=|", "-p", "--noheader"),
)
PEER_JOB_NAME = "dse-bench-slurm-polling-peer"


class ClusterUnavailable(RuntimeError):
    """No Slurm cluster to measure against."""


@dataclass(frozen=True, slots=True)
class Row:
    method: str
    commands: float
    sbatch: int | None
    wall_s: float
    note: str = ""


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False,
                          timeout=COMMAND_TIMEOUT_S)


def check_cluster() -> str:
    """The Slurm version if a cluster with accounting answers, else :class:`ClusterUnavailable`."""
    missing = [c for c in ("sbatch", "squeue", "scancel", "sacct") if shutil.which(c) is None]
    if missing:
        msg = f"{', '.join(missing)} not found on PATH: this benchmark needs a Slurm cluster"
        raise ClusterUnavailable(msg)
    try:
        queue = _run(["squeue", "--noheader", "--format=%i"])
        acct = _run(["sacct", "-X", "--noheader", "--starttime=now-1minutes"])
    except subprocess.TimeoutExpired:
        raise ClusterUnavailable("the Slurm controller does not answer") from None
    if queue.returncode != 0:
        raise ClusterUnavailable(f"squeue failed: {queue.stderr.strip().splitlines()[-1:]}")
    if acct.returncode != 0:
        msg = f"sacct failed (the peers need accounting): {acct.stderr.strip().splitlines()[-1:]}"
        raise ClusterUnavailable(msg)
    return _run(["sinfo", "--version"]).stdout.strip() or "slurm (unknown version)"


# -- the peers' polling and submission patterns ----------------------------------------------

def cloudai_pass(job_ids: list[str]) -> tuple[int, float]:
    """One CloudAI-style pass: three ``sacct -j <id>`` calls per job. (commands, seconds)"""
    commands = 0
    start = time.perf_counter()
    for job_id in job_ids:
        for query in CLOUDAI_QUERIES:
            _run(["sacct", "-j", job_id, *query])
            commands += 1
    return commands, time.perf_counter() - start


def submitit_pass(job_ids: list[str]) -> tuple[int, float]:
    """One submitit-style pass: one ``sacct`` naming every outstanding array. (commands, s)"""
    arrays = sorted({j.split("_", 1)[0] for j in job_ids}, key=int)
    argv = ["sacct", "-o", "JobID,State,NodeList", "--parsable2"]
    for array in arrays:
        argv += ["-j", array]
    start = time.perf_counter()
    proc = _run(argv)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise ClusterUnavailable(f"sacct failed: {proc.stderr.strip()}")
    return 1, wall


def peer_submissions(submitted: list[str]) -> tuple[int, float, int, float]:
    """Submit 32 trials CloudAI's way (one sbatch each) and submitit's (one array); held, so
    they never run. Their ids go into *submitted* for the final scancel.
    (cloudai calls, cloudai seconds, submitit calls, submitit seconds)"""
    base = ["sbatch", "--parsable", "--hold", f"--job-name={PEER_JOB_NAME}", "--mem=64M",
            "--time=15", "--output=/dev/null"]
    start = time.perf_counter()
    for _ in range(WAVE):
        proc = _run([*base, "--wrap", "sleep 600"])
        if proc.returncode == 0:
            submitted.append(proc.stdout.strip().split(";")[0])
    cloudai_s = time.perf_counter() - start
    start = time.perf_counter()
    proc = _run([*base, f"--array=0-{WAVE - 1}", "--wrap", "sleep 600"])
    submitit_s = time.perf_counter() - start
    if proc.returncode == 0:
        submitted.append(proc.stdout.strip().split(";")[0])
    _run(["scancel", *submitted])
    return WAVE, cloudai_s, 1, submitit_s


# -- dse ---------------------------------------------------------------------------------------

def specs(run_dir: Path, run: str, first: int, count: int) -> list[JobSpec]:
    out = []
    for number in range(first, first + count):
        trial_dir = run_dir / f"{number:06d}"
        trial_dir.mkdir(parents=True)
        out.append(JobSpec(
            trial_id=f"bench-{run}-{number:06d}", attempt=1, params={"n": number},
            trial_dir=trial_dir, argv=("sleep", "600"),
            # 64 MiB, not the cluster's 3 GiB per CPU default: leave the nodes to others.
            resources=Resources(cpus=1, memory_mb=64), time_limit=900.0,
        ))
    return out


def total(commands: dict[str, int]) -> int:
    return sum(commands.values())


def timed_poll(backend: SlurmBackend, states: dict[str, JobState]) -> tuple[float, dict[str, int]]:
    start = time.perf_counter()
    changed = backend.poll()
    wall = time.perf_counter() - start
    for status in changed:
        states[status.job_id] = status.state
    return wall, dict(backend.last_pass_commands)


def wait_for_ends(
    backend: SlurmBackend, states: dict[str, JobState], ids: list[str], timeout: float
) -> tuple[list[tuple[float, dict[str, int], int]], float | None]:
    """Poll every 0.5 s until every id in *ids* is reported finished. Returns the passes
    (wall, commands, ends reported) and the seconds until the last end (None: timed out)."""
    passes: list[tuple[float, dict[str, int], int]] = []
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        before = sum(states[j].is_finished() for j in ids)
        wall, commands = timed_poll(backend, states)
        ended = sum(states[j].is_finished() for j in ids)
        passes.append((wall, commands, ended - before))
        if ended == len(ids):
            return passes, time.perf_counter() - start
        time.sleep(0.5)
    return passes, None


def _table(rows: list[Row], dse_row: Row) -> str:
    header = ("method", "commands/pass (100 jobs)", "sbatch (32 trials)", "pass wall s",
              "commands vs dse", "wall vs dse")
    body = [
        (
            r.method,
            f"{r.commands:g}" + (f" ({r.note})" if r.note else ""),
            "-" if r.sbatch is None else str(r.sbatch),
            f"{r.wall_s:.4f}",
            f"{r.commands / dse_row.commands:.0f}x" if r.sbatch is not None else "-",
            f"{r.wall_s / dse_row.wall_s:.1f}x" if r.sbatch is not None else "-",
        )
        for r in rows
    ]
    return table(header, body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="fewer passes (one CloudAI-pattern pass), under a minute")
    args = parser.parse_args(argv)
    try:
        version = check_cluster()
    except ClusterUnavailable as exc:
        print(f"slurm_polling: {exc}", file=sys.stderr)
        return 2
    # A SIGTERM (nox, CI) unwinds through the finally below, which cancels every job.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    dse_passes, cloudai_passes, submitit_passes = (15, 1, 10) if args.quick else (30, 3, 30)

    run = time.strftime("%Y%m%d-%H%M%S")
    run_dir = WORK_DIR / run
    run_dir.mkdir(parents=True)
    # One running task per array: the benchmark needs jobs that run and jobs that pend, not
    # the whole cluster.
    backend = SlurmBackend(options=SlurmOptions(array_throttle=1))
    states: dict[str, JobState] = {}
    peer_ids: list[str] = []
    try:
        print(f"submitting {sum(ARRAYS)} jobs as {len(ARRAYS)} arrays ...", file=sys.stderr)
        ids: list[str] = []
        for count in ARRAYS:
            ids += backend.submit(specs(run_dir, run, len(ids), count))
        bad = [j for j in ids if not j.split("_", 1)[0].isdigit()]
        if bad:
            print(f"slurm_polling: dse could not submit: {bad[:3]}", file=sys.stderr)
            return 1
        states.update(dict.fromkeys(ids, JobState.PENDING))
        setup_commands = dict(backend.commands)
        # Settle: the first passes report PENDING -> RUNNING and carry the submissions.
        deadline = time.monotonic() + 5
        timed_poll(backend, states)
        while (sum(s is JobState.RUNNING for s in states.values()) < len(ARRAYS)
               and time.monotonic() < deadline):
            time.sleep(0.5)
            timed_poll(backend, states)
        running = sum(s is JobState.RUNNING for s in states.values())
        pending = sum(s is JobState.PENDING for s in states.values())
        print(f"  {running} running, {pending} pending", file=sys.stderr)

        print(f"dse: {dse_passes} passes ...", file=sys.stderr)
        dse_walls, dse_counts = [], []
        for _ in range(dse_passes):
            wall, commands = timed_poll(backend, states)
            dse_walls.append(wall)
            dse_counts.append(total(commands))
        # The mix the passes saw (others' jobs on a shared cluster may hold the CPUs).
        running = sum(s is JobState.RUNNING for s in states.values())
        pending = sum(s is JobState.PENDING for s in states.values())
        if len(backend.outstanding) != len(ids):
            print(f"slurm_polling: {len(ids) - len(backend.outstanding)} jobs ended early",
                  file=sys.stderr)

        print(f"CloudAI pattern: {cloudai_passes} pass(es) of 3 sacct per job ...",
              file=sys.stderr)
        cloudai = [cloudai_pass(ids) for _ in range(cloudai_passes)]
        print(f"submitit pattern: {submitit_passes} passes ...", file=sys.stderr)
        submitit = [submitit_pass(ids) for _ in range(submitit_passes)]

        print(f"dse: a wave of {WAVE} trials ...", file=sys.stderr)
        before = dict(backend.commands)
        start = time.perf_counter()
        wave_ids = backend.submit(specs(run_dir, run, len(ids), WAVE))
        dse_submit_s = time.perf_counter() - start
        sbatch_calls = backend.commands.get("sbatch", 0) - before.get("sbatch", 0)
        wave_commands = {k: v - before.get(k, 0) for k, v in backend.commands.items()
                         if v != before.get(k, 0)}
        states.update(dict.fromkeys(wave_ids, JobState.PENDING))
        timed_poll(backend, states)
        cloudai_sbatch, cloudai_submit_s, submitit_sbatch, submitit_submit_s = (
            peer_submissions(peer_ids)
        )

        print("dse: cancelling the running jobs, collecting their ends ...", file=sys.stderr)
        leaving = [j for j, s in states.items() if s is JobState.RUNNING]
        backend.cancel(leaving)
        end_passes, ends_after = wait_for_ends(
            backend, states, leaving, timeout=10.0 if args.quick else 20.0
        )
        collecting = [p for p in end_passes if p[2] > 0] or end_passes
        # The cancel's own scancel is counted in the next pass; it is not a query.
        scancel_calls = sum(p[1].get("scancel", 0) for p in end_passes)
        leave_commands = max(
            ({k: v for k, v in p[1].items() if k != "scancel"} for p in collecting), key=total
        )
        leave_wall = statistics.median(p[0] for p in collecting)
        pending_cancel: dict[str, object] | None = None
        if not args.quick:
            # Tasks cancelled before they ever ran: sacct keeps them only as the array's range
            # row (123_[5-39%1]), so this times how long the backend takes to report them.
            never_ran = [j for j in wave_ids[-5:] if states[j] is JobState.PENDING]
            print(f"dse: cancelling {len(never_ran)} pending tasks, collecting their ends ...",
                  file=sys.stderr)
            backend.cancel(never_ran)
            passes, seconds = wait_for_ends(backend, states, never_ran,
                                            timeout=backend.sacct_lag + 15)
            pending_cancel = {
                "jobs": len(never_ran),
                "reported_after_s": None if seconds is None else round(seconds, 2),
                "passes": len(passes),
                "sacct_calls": sum(p[1].get("sacct", 0) for p in passes),
                "states": sorted({states[j].value for j in never_ran}),
            }
    finally:
        backend.shutdown(cancel=True, wait=False)
        arrays = sorted({j.split("_", 1)[0] for j in states if j.split("_", 1)[0].isdigit()})
        if arrays or peer_ids:
            _run(["scancel", *arrays, *peer_ids])
        shutil.rmtree(run_dir, ignore_errors=True)

    dse_wall = statistics.median(dse_walls)
    dse_cmds = max(dse_counts)
    cloudai_cmds = max(c for c, _ in cloudai)
    cloudai_wall = statistics.median(w for _, w in cloudai)
    submitit_cmds = max(c for c, _ in submitit)
    submitit_wall = statistics.median(w for _, w in submitit)
    dse_row = Row("dse (SlurmBackend)", dse_cmds, sbatch_calls, dse_wall,
                  "squeue" if dse_cmds == 1 else f"mean {statistics.mean(dse_counts):g}")
    leave_note = ", ".join(f"{k} {v}" for k, v in sorted(leave_commands.items()))
    rows = [
        dse_row,
        Row(f"dse, pass with {len(leaving)} ends", total(leave_commands), None, leave_wall,
            leave_note),
        Row("CloudAI pattern (3 sacct/job)", cloudai_cmds, cloudai_sbatch, cloudai_wall),
        Row("submitit pattern (1 sacct)", submitit_cmds, submitit_sbatch, submitit_wall),
    ]
    print(f"slurm polling: {sum(ARRAYS)} jobs outstanding ({running} running, {pending} pending"
          f" in {len(ARRAYS)} arrays), {version}, Python {sys.version.split()[0]},"
          f" dse {dse.__version__}")
    print(_table(rows, dse_row))
    print(f"passes: dse {dse_passes} (commands per pass {dse_counts[0]}..{max(dse_counts)}),"
          f" CloudAI pattern {cloudai_passes}, submitit pattern {submitit_passes};"
          f" setup {setup_commands}; wave of {WAVE}: {wave_commands} in {dse_submit_s:.3f} s"
          f" (CloudAI pattern {cloudai_submit_s:.3f} s, submitit {submitit_submit_s:.3f} s)")
    leaving_states = sorted({states[j].value for j in leaving})
    print(f"ends: {len(leaving)} cancelled running jobs reported after"
          f" {'-' if ends_after is None else f'{ends_after:.1f} s'} in {len(end_passes)} passes"
          f" (cancelled with {scancel_calls} scancel), as {leaving_states}")
    if pending_cancel is not None:
        print(f"ends: {pending_cancel['jobs']} cancelled pending array tasks reported after"
              f" {pending_cancel['reported_after_s']} s in {pending_cancel['passes']} passes"
              f" ({pending_cancel['sacct_calls']} sacct calls), as {pending_cancel['states']}")
    met_cmds = dse_cmds <= COMMANDS_TARGET and total(leave_commands) <= COMMANDS_TARGET
    met_sbatch = sbatch_calls <= SBATCH_TARGET
    print(f"targets: <= {COMMANDS_TARGET} commands per pass: {'met' if met_cmds else 'NOT met'}"
          f" ({dse_cmds}; {total(leave_commands)} with ends); {SBATCH_TARGET} sbatch per"
          f" {WAVE}-trial wave: {'met' if met_sbatch else 'NOT met'} ({sbatch_calls});"
          f" CloudAI pattern: {cloudai_cmds} commands, {cloudai_wall / dse_wall:,.0f}x dse's"
          f" pass wall time")
    print(json.dumps({
        "commands_per_pass_100_jobs": dse_cmds,
        "sbatch_calls_32_trials": sbatch_calls,
        "pass_wall_s": round(dse_wall, 5),
        "commands_per_pass_with_ends": total(leave_commands),
        "commands_with_ends": leave_commands,
        "pass_with_ends_wall_s": round(leave_wall, 5),
        "scancel_calls": scancel_calls,
        "submit_32_wall_s": round(dse_submit_s, 4),
        "peer_commands_per_pass_100_jobs": cloudai_cmds,
        "peer_sbatch_calls_32_trials": cloudai_sbatch,
        "peer_pass_wall_s": round(cloudai_wall, 3),
        "peer_submit_32_wall_s": round(cloudai_submit_s, 4),
        "commands_ratio_to_peer": round(dse_cmds / cloudai_cmds, 5),
        "sbatch_ratio_to_peer": round(sbatch_calls / cloudai_sbatch, 5),
        "pass_wall_ratio_to_peer": round(dse_wall / cloudai_wall, 6),
        "submitit_commands_per_pass_100_jobs": submitit_cmds,
        "submitit_sbatch_calls_32_trials": submitit_sbatch,
        "submitit_pass_wall_s": round(submitit_wall, 4),
        "pass_wall_ratio_to_submitit": round(dse_wall / submitit_wall, 4),
        "cancelled_pending_tasks": pending_cancel,
        "jobs": {"outstanding": len(ids), "running": running, "pending": pending,
                 "arrays": len(ARRAYS)},
        "passes": {"dse": dse_passes, "cloudai": cloudai_passes, "submitit": submitit_passes},
        "quick": args.quick,
        "targets_met": met_cmds and met_sbatch,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
