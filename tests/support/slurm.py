"""The real local Slurm cluster for tests (``scripts/slurm-local.sh start`` brings it up).

Tests that use it import :func:`slurm_cluster` as a fixture and carry
``pytest.mark.xdist_group("slurm")``: they run one after another on one worker, because some
take a node down or preempt, which would disturb another test's jobs. Those nodes are the
partitions ``batch`` and ``urgent``; the partition ``aside`` has a node of its own, which none of
them touches, so a test that only waits out Slurm's clock (a one-minute time limit) runs there
in the group ``slurm-aside``, beside the others.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dse_slurm import expand_job_ids
from support.campaign_record import record
from support.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator


def run(argv: list[str], timeout: float = 30) -> str:
    """Run a Slurm command; fail the test if it fails."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


START_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-local.sh"
"""Starts the local cluster, and restarts whatever of it died (idempotent)."""
CLUSTER_LOCK = "dse-slurm-cluster.lock"
"""A file in the temp directory: whoever measures on or tests with the shared partitions holds
it (the ``slurm`` group's tests, ``benchmarks/slurm_throughput.py``)."""
SHARED = "batch,urgent"
"""The partitions the ``slurm`` group's tests use (the same nodes)."""


def node_states(partitions: str | None = SHARED) -> dict[str, str]:
    """Node of *partitions* (None: of every partition) → its sinfo state (``idle``, ``mix``,
    ``alloc``, ``down`` ...)."""
    where = [f"--partition={partitions}"] if partitions else []
    out = run(["sinfo", "--noheader", "--Node", *where, "--format=%N %t"])
    return dict(line.split()[:2] for line in out.splitlines() if line.strip())


def cluster_account(partitions: str | None = SHARED) -> str:
    """What a failed wait on the cluster saw: the jobs of *partitions*, each node's state (with
    Slurm's reason where it gives one), and whether each node's slurmd process still runs."""
    where = [f"--partition={partitions}"] if partitions else []
    jobs = subprocess.run(["squeue", "--noheader", *where, "--format=%i %j %T %r"],
                          capture_output=True, text=True, timeout=30, check=False)
    nodes = subprocess.run(["sinfo", "--noheader", "--Node", *where, "--format=%N %T %E"],
                           capture_output=True, text=True, timeout=30, check=False)
    daemons = []
    for node in sorted({line.split()[0] for line in nodes.stdout.splitlines() if line.strip()}):
        pid_file = Path(f"/run/slurmd-{node}.pid")
        try:
            alive = Path(f"/proc/{int(pid_file.read_text().strip())}").exists()
        except (OSError, ValueError):
            alive = False
        daemons.append(f"{node}:{'runs' if alive else 'GONE'}")
    return (f"jobs [{'; '.join(jobs.stdout.split(chr(10))).strip('; ') or 'none'}]"
            f" nodes [{'; '.join(sorted(set(nodes.stdout.strip().splitlines())))}]"
            f" slurmd [{' '.join(daemons)}]")


def wait_for_an_idle_cluster(timeout: float = 120.0) -> None:
    """Wait until no job is left in the shared partitions and every node of them is idle: jobs
    an earlier test cancelled may still be completing on a node, and a test that asserts where
    its trials ran needs every node free. (The ``aside`` partition may be busy.)

    The ``slurm`` group's tests run one at a time, so a job still queued in the shared
    partitions half a minute on is one a failed earlier test left (its pilot, say, waiting out
    its grace): it is cancelled, with a warning naming it, rather than failing every test
    after it; a node left down is resumed the same way."""
    def jobs() -> list[str]:
        out = run(["squeue", "--noheader", f"--partition={SHARED}", "--format=%i %j"])
        return [line for line in out.splitlines() if line.strip()]

    def idle() -> bool:
        # ``idle*`` is a node whose slurmd has not answered yet (just resumed, or busy): Slurm
        # places nothing there until it does.
        return not jobs() and all(state == "idle" for state in node_states().values())

    start = time.monotonic()
    with contextlib.suppress(pytest.fail.Exception):
        wait_until(idle, min(30.0, timeout / 2), "an idle cluster")
        return
    left = jobs()
    if left:
        warnings.warn(f"jobs an earlier test left in {SHARED} are cancelled: {left}",
                      stacklevel=2)
        run(["scancel", *(line.split()[0] for line in left)])
    for node, state in node_states().items():
        if state.startswith(("down", "drain")):
            warnings.warn(f"node {node} an earlier test left {state} is resumed", stacklevel=2)
            resume_node(node)
    wait_until(idle, max(1.0, timeout - (time.monotonic() - start)),
               "an idle cluster (no jobs left, every node idle)", seen=cluster_account)


@pytest.fixture(autouse=True)
def one_slurm_test_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Run the tests of each ``slurm…`` group one at a time across all xdist workers.

    ``--dist loadgroup`` sends them to one worker, but only where pytest-xdist can mark their
    node ids: pytest 9.2 ignores that mark (xdist 3.8), and the group's tests then ran side by
    side (a preemption test preempted another test's trial, a node taken down under another's
    jobs). A file lock in the session's shared temp root holds them apart whatever the
    scheduler does; with a working loadgroup it is never contended."""
    group = request.node.get_closest_marker("xdist_group")
    if group is None or not str(group.args[0]).startswith("slurm"):
        yield
        return
    root = tmp_path_factory.getbasetemp()
    if root.name.startswith("popen-gw"):  # an xdist worker: the session's root is one up
        root = root.parent
    with contextlib.ExitStack() as held:
        paths = [root / f"{group.args[0]}-tests.lock"]
        if group.args[0] == "slurm":
            # The partitions' nodes are shared with benchmarks/slurm_throughput.py (and the
            # test sessions of other worktrees), which hold this lock while they measure.
            paths.append(Path(tempfile.gettempdir()) / CLUSTER_LOCK)
        for path in paths:
            lock = held.enter_context(open(path, "w"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="module")
def slurm_cluster() -> str:
    """The usable nodes of the shared partitions (comma-separated), once the cluster answers;
    skips (saying why) where there is none, and resumes nodes an earlier test left down."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        pytest.skip("no Slurm here: start one with `bash scripts/slurm-local.sh start`")
    try:
        proc = subprocess.run(["sinfo", "--noheader", "--Node", f"--partition={SHARED}",
                               "--format=%N %t"],
                              capture_output=True, text=True, timeout=15, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("sinfo did not answer within 15 s: is slurmctld running?")
    if proc.returncode != 0:
        pytest.skip(f"no Slurm cluster answers: {proc.stderr.strip()}")
    states = dict(line.split()[:2] for line in proc.stdout.splitlines() if line.strip())
    if any(state.startswith(("down", "drain")) for state in states.values()):
        # A test of another worker (or worktree) may have taken the node down on purpose and
        # be waiting for its jobs to fail: resume it only once no such test runs.
        with open(Path(tempfile.gettempdir()) / CLUSTER_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for node, state in node_states().items():
                if state.startswith(("down", "drain")):
                    resume_node(node)
    usable = sorted(
        n for n, s in node_states().items() if s.rstrip("*") in ("idle", "mix", "alloc")
    )
    if not usable:
        pytest.skip(f"no usable node: {proc.stdout.strip()}")
    return ",".join(usable)


@pytest.fixture(scope="module")
def slurm_aside(slurm_cluster: str) -> str:
    """The nodes of the ``aside`` partition (comma-separated), resumed if a test left them
    down; skips where the cluster has no such partition (``DSE_SLURM_ASIDE=0``)."""
    states = node_states("aside")
    if not states:
        pytest.skip("the cluster has no `aside` partition: start it with DSE_SLURM_ASIDE=1")
    for node, state in states.items():
        if state.startswith(("down", "drain")):
            resume_node(node)
    return ",".join(sorted(states))


def resume_node(node: str) -> None:
    """Bring *node* back after a test set it down; wait until it takes jobs. A node that does
    not come back within a minute is one whose slurmd is gone or no longer answers: the
    cluster's own start script (which restarts what died and resumes what is down) is run
    once, with a warning saying what was seen, before the test fails."""
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"],
                   capture_output=True, timeout=15, check=False)

    def back() -> bool:
        return node_states(None).get(node, "") in ("idle", "mix", "alloc")

    with contextlib.suppress(pytest.fail.Exception):
        wait_until(back, 60, f"node {node} to come back")
        return
    account = cluster_account(None)
    warnings.warn(f"node {node} did not come back within 60 s ({account}): restarting what"
                  " of the cluster is down", stacklevel=2)
    subprocess.run(["bash", str(START_SCRIPT), "start"], capture_output=True, timeout=300,
                   check=False)
    wait_until(back, 60, f"node {node} to come back and its slurmd to answer",
               seen=lambda: f"{cluster_account(None)}; a minute before: {account}")


def queued_jobs(name_prefix: str) -> list[str]:
    """Ids of jobs still queued or running whose name starts with *name_prefix* (a job that
    ended and only cleans up its nodes — state CG, "completing" — is not running)."""
    out = run(["squeue", "--noheader", "--format=%i %j %t"])
    return [job_id for line in out.splitlines()
            if len(line.split()) == 3 and line.split()[1].startswith(name_prefix)
            and line.split()[2] != "CG"
            for job_id in expand_job_ids(line.split()[0])]


def pass_commands(project: Path) -> list[dict[str, int]]:
    """The Slurm commands of each polling pass of the last run, as the engine recorded them."""
    rows = record(project, "SELECT data FROM events WHERE kind = 'backend_commands' AND"
                  " campaign_id = (SELECT MAX(id) FROM campaigns) ORDER BY id")
    return [json.loads(row["data"])["commands"] for row in rows]
