"""Trials that span nodes, as Slurm job arrays on the real local cluster, driven by `dse run`.

Each trial runs ``allreduce.py``: every rank writes what the trial contract told it, then the
ranks sum one value each over TCP (rank 0 listens, writes its host and port in the attempt
directory — a file system every node shares — and sends the sum back), and rank 0 reports the
time it took and where every rank ran. A test checks where the tasks really ran against what
the record says. The node-down test takes a node of the ``wide`` partition down, so these run
in the ``slurm`` group, one after another.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dse import JobSpec, JobState, Resources
from dse.testing.contracts import contract_job, wait_for
from dse_slurm import SlurmBackend, SlurmOptions
from support.campaign_record import attempts_by_trial, trials
from support.cli import run_dse, start_dse, write_plugin
from support.slurm import (
    node_states,
    queued_jobs,
    resume_node,
    run,
    wait_for_an_idle_cluster,
    wait_until,
)

pytestmark = [pytest.mark.xdist_group("slurm"), pytest.mark.usefixtures("slurm_cluster")]

ALLREDUCE = r"""
import json, os, socket, sys, time
from dse import trial

rank, size, node = trial.rank(), trial.world_size(), trial.node()
project = os.path.dirname(os.path.abspath(__file__))
adir = os.path.join(str(trial.trial_dir()), "attempt-" + os.environ["DSE_ATTEMPT"])
seen = {"rank": rank, "size": size, "node": node, "nodes": trial.nodes(),
        "local_rank": trial.local_rank(), "node_rank": trial.node_rank()}
with open(os.path.join(adir, "rank-%d.json" % rank), "w") as handle:
    json.dump(seen, handle)
print("rank %d of %d on %s" % (rank, size, node))
value = 10 * (rank + 1)
rendezvous = os.path.join(adir, "rendezvous.json")
began = time.monotonic()
if rank == 0:
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen(size)
    server.settimeout(120)
    with open(rendezvous + ".tmp", "w") as handle:
        json.dump({"host": socket.gethostname(), "port": server.getsockname()[1]}, handle)
    os.rename(rendezvous + ".tmp", rendezvous)
    peers, ranks = [], [[0, node]]
    for _ in range(size - 1):
        conn, _ = server.accept()
        message = json.loads(conn.makefile().readline())
        peers.append(conn)
        ranks.append([message["rank"], message["node"]])
        value += message["value"]
    for conn in peers:
        conn.sendall(b"%d\n" % value)
        conn.close()
    total = value
else:
    deadline = time.monotonic() + 120
    while not os.path.exists(rendezvous):
        if time.monotonic() > deadline:
            sys.exit("rank %d: no rendezvous file" % rank)
        time.sleep(0.1)
    with open(rendezvous) as handle:
        where = json.load(handle)
    conn = socket.create_connection((where["host"], where["port"]), timeout=120)
    conn.sendall((json.dumps({"rank": rank, "node": node, "value": value}) + "\n").encode())
    total = int(conn.makefile().readline())
took = time.monotonic() - began
if total != 10 * size * (size + 1) // 2:
    sys.exit("rank %d: wrong sum %d" % (rank, total))
if rank == 0:
    open(os.path.join(adir, "ready"), "w").close()
# Long enough for Slurm's accounting (whole seconds) to charge each trial some time.
time.sleep(max(0.0, 2.5 - (time.monotonic() - began)))
# The node-down test holds the trial here until the node it took down was seen failing.
while os.path.exists(os.path.join(project, "hold")):
    time.sleep(0.2)
trial.report({"allreduce_s": took, "sum": total},
             ranks=sorted(ranks) if rank == 0 else None)
"""

CAMPAIGN = """
[campaign]
name = "{name}"
agent = "grid"
backend = "slurm"
max_parallelism = 3
poll_interval = ["0.3s", "1s"]

[environment]
command = ["python", "allreduce.py"]
time_limit = "5m"
nodes = "{{nodes}}"
tasks_per_node = 1
cpus = 1
memory_mb = 300

[backend.slurm]
mode = "jobs"
partition = "{partition}"

[backend.slurm.price]
node_hour = 1.0

[[objectives]]
metric = "allreduce_s"

[space]
nodes = {{ type = "categorical", choices = {choices} }}
"""


def project(tmp_path: Path, name: str, choices: list[int], partition: str = "batch") -> Path:
    """A project whose campaign runs one all-reduce trial per node count of *choices*."""
    write_plugin(tmp_path)
    (tmp_path / "allreduce.py").write_text(ALLREDUCE)
    (tmp_path / "campaign.toml").write_text(
        CAMPAIGN.format(name=name, partition=partition, choices=json.dumps(choices))
    )
    return tmp_path


def ranks_seen(attempt_dir: Path) -> list[dict[str, object]]:
    """What each rank of an attempt was told, in rank order."""
    return [json.loads(path.read_text())
            for path in sorted(attempt_dir.glob("rank-*.json"), key=lambda p: p.name)]


@pytest.fixture(scope="module")
def allreduce(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A campaign of trials of 1, 2 and 3 nodes in partition batch, run to its end."""
    wait_for_an_idle_cluster()
    root = project(tmp_path_factory.mktemp("allreduce"), "allreduce", [1, 2, 3])
    proc = run_dse(root, "run", "campaign.toml", timeout=300)
    assert proc.returncode == 0, proc.stderr
    return root


def test_trials_of_k_nodes_run_k_ranks_on_k_nodes_that_sum_over_tcp(allreduce):
    rows = trials(allreduce)
    assert {row["status"] for row in rows.values()} == {"completed"}, {
        n: (r["status"], r["message"]) for n, r in rows.items()}
    attempts = attempts_by_trial(allreduce)
    widths = set()
    for number, row in rows.items():
        k = json.loads(row["params"])["nodes"]
        widths.add(k)
        (attempt,) = attempts[number]
        recorded = attempt["node"].split(",")
        result = json.loads((Path(row["trial_dir"]) / "result.json").read_text())
        ranks = result["ranks"]
        # k ranks, one per node, on k distinct nodes: the nodes the record says it ran on.
        assert [r for r, _ in ranks] == list(range(k))
        assert len({n for _, n in ranks}) == k
        assert [n for _, n in ranks] == recorded
        assert result["metrics"]["sum"] == 10 * k * (k + 1) // 2
        assert 0 <= result["metrics"]["allreduce_s"] < 120  # the sockets' time-out
        adir = Path(row["trial_dir"]) / "attempt-1"
        seen = ranks_seen(adir)
        assert [(s["rank"], s["size"], s["node"], s["local_rank"], s["node_rank"])
                for s in seen] == [(r, k, n, 0, r) for r, n in ranks]
        assert all(s["nodes"] == recorded for s in seen)
        # Rank 0's output in stdout.log, every other rank's in its own file.
        assert (adir / "stdout.log").read_text() == f"rank 0 of {k} on {recorded[0]}\n"
        for r in range(1, k):
            assert (adir / f"stdout.{r}.log").read_text() == f"rank {r} of {k} on {recorded[r]}\n"
        assert not (adir / f"stdout.{k}.log").exists()
    assert widths == {1, 2, 3}


def test_every_node_of_a_trial_is_charged(allreduce):
    rows = trials(allreduce)
    for number, attempts in attempts_by_trial(allreduce).items():
        k = json.loads(rows[number]["params"])["nodes"]
        usage = json.loads(attempts[0]["usage"])
        spend = json.loads(attempts[0]["spend"])
        assert (usage["nodes"], usage["cpus"]) == (k, k)
        assert usage["elapsed_s"] >= 2  # every trial runs 2.5 s at least
        # node_hour = 1.0: every node's hours, at Slurm's elapsed time.
        assert spend["node_s"] == pytest.approx(k * usage["elapsed_s"])
        assert spend["money"] == pytest.approx(k * usage["elapsed_s"] / 3600)


def take_a_node_down(root: Path, pick: Callable[[list[str]], str]) -> tuple[str, list[str]]:
    """Run *root*'s campaign of one 3-node trial to its end, taking down the node *pick* chooses
    of the nodes its first attempt ran on once its all-reduce ran (the workload holds until
    that attempt ended), and bringing it back after; return the node and those nodes."""
    (root / "hold").touch()
    victim = None
    dse = start_dse(root, "run", "campaign.toml")
    try:
        ready = wait_until(lambda: list(root.glob(".dse/*/run-*/*/attempt-1/ready")), 120,
                           "the 3-node trial to run its all-reduce")
        first = [seen["node"] for seen in ranks_seen(ready[0].parent)]
        victim = pick(first)
        run(["scontrol", "update", f"nodename={victim}", "state=down", "reason=dse-test"])
        wait_until(lambda: any(a["state"] not in ("running", "submitted") for tries in
                               attempts_by_trial(root).values() for a in tries),
                   120, "the first attempt to end")
        (root / "hold").unlink()
        _, err = dse.communicate(timeout=240)
    finally:
        if dse.poll() is None:
            dse.kill()
        dse.communicate(timeout=30)
        if victim is not None:
            resume_node(victim)
    assert dse.returncode == 0, err
    return victim, first


def test_a_node_down_under_a_3_node_trial_is_avoided_by_its_retry(tmp_path):
    wait_for_an_idle_cluster()
    assert set(node_states("wide")) == {"n1", "n2", "n3", "n5"}
    root = project(tmp_path, "nodedown", [3], partition="wide")

    def pick(nodes: list[str]) -> str:
        assert "n2" in nodes, nodes  # batch nodes first: it runs on n[1-3]
        return "n2"

    take_a_node_down(root, pick)
    (row,) = trials(root).values()
    assert row["status"] == "completed"
    (attempts,) = attempts_by_trial(root).values()
    assert [a["state"] for a in attempts] == ["node_fail", "succeeded"]
    # The failing node is named, so the retry avoided it; where it ran is in the reason.
    assert attempts[0]["node"] == "n2"
    assert "ran on n1,n2,n3" in attempts[0]["reason"]
    assert attempts[1]["node"] == "n1,n3,n5"
    result = json.loads((Path(row["trial_dir"]) / "result.json").read_text())
    assert result["ranks"] == [[0, "n1"], [1, "n3"], [2, "n5"]]
    (retry,) = [path.read_text() for path in root.glob(".dse/*/run-*/.slurm/*.sh")
                if "trials=1.2" in path.read_text()]
    assert "\n#SBATCH --exclude=n2\n" in retry


def test_a_space_wider_than_the_partition_is_refused_in_one_line(tmp_path):
    root = project(tmp_path, "toowide", [1, 4])
    proc = run_dse(root, "run", "campaign.toml", timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "dse: error: campaign.toml: environment: 4 nodes asked, but the Slurm partition batch"
        " has 3 (n1,n2,n3)"
    ]
    assert not queued_jobs("dse.toowide")


def spec(root: Path, name: str, nodes: int, *, outcome: str = "succeed",
         avoid: tuple[str, ...] = ()) -> JobSpec:
    """A contract job of *nodes* nodes, one task each, avoiding *avoid*."""
    return dataclasses.replace(contract_job(root, name, outcome),
                               resources=Resources(nodes=nodes), avoid_nodes=avoid)


def test_an_attempt_wider_than_the_partition_is_invalid_without_sbatch(tmp_path):
    backend = SlurmBackend(options=SlurmOptions(partition="batch"))
    try:
        (job_id,) = backend.submit([spec(tmp_path / "run", "wide", 4)])
        (status,) = wait_for(backend, [job_id]).values()
    finally:
        backend.shutdown()
    assert status.state is JobState.INVALID
    assert status.reason == "4 nodes asked, but the Slurm partition batch has 3 (n1,n2,n3)"
    assert backend.commands == {"sinfo": 1}


def test_an_exclusion_never_leaves_the_partition_too_few_nodes(tmp_path):
    wait_for_an_idle_cluster()
    backend = SlurmBackend(options=SlurmOptions(partition="wide"), sacct_lag=10)
    try:
        # Three nodes out of four: only one can be spared, the first avoided by name.
        (job_id,) = backend.submit([spec(tmp_path / "run", "avoid", 3, avoid=("n2", "n1,n5"))])
        (status,) = wait_for(backend, [job_id], timeout=120).values()
    finally:
        backend.shutdown()
    assert (status.state, status.node) == (JobState.SUCCEEDED, "n2,n3,n5")
    script = next((tmp_path / "run" / ".slurm").glob("*.sh")).read_text()
    assert "#SBATCH --exclude=n1\n" in script


def test_a_failed_multi_node_attempt_blames_no_healthy_node(tmp_path):
    wait_for_an_idle_cluster()
    backend = SlurmBackend(options=SlurmOptions(partition="batch"), sacct_lag=10)
    try:
        ids = backend.submit([spec(tmp_path / "run", "fail", 2, outcome="fail"),
                              spec(tmp_path / "run", "ok", 2)])
        final = wait_for(backend, ids, timeout=120)
    finally:
        backend.shutdown()
    failed, succeeded = (final[job_id] for job_id in ids)
    assert (failed.state, failed.exit_code, failed.node) == (JobState.FAILED, 3, None)
    assert re.fullmatch(r"exit code 3; ran on n[1-3],n[1-3]", failed.reason or ""), failed
    assert succeeded.state is JobState.SUCCEEDED
    assert len(succeeded.node.split(",")) == 2
    # One sinfo for the partition's nodes (asked once), one for the failed attempt's nodes.
    assert backend.commands["sinfo"] == 2


USR1 = r"""
import os, signal, sys, time
rank = os.environ["DSE_RANK"]
adir = os.path.join(os.environ["DSE_TRIAL_DIR"], "attempt-1")
def told(signum, frame):
    open(os.path.join(adir, "usr1-" + rank), "w").close()
    sys.exit(0)
signal.signal(signal.SIGUSR1, told)
open(os.path.join(adir, "ready-" + rank), "w").close()
time.sleep(120)
sys.exit(5)
"""


def test_the_time_limit_warning_reaches_every_task(tmp_path):
    # --signal=B:USR1@lead signals the batch shell, which is srun: srun passes it on.
    wait_for_an_idle_cluster()
    backend = SlurmBackend(options=SlurmOptions(partition="batch", signal_lead_s=60),
                           sacct_lag=10)
    job = dataclasses.replace(spec(tmp_path / "run", "usr1", 2),
                              argv=(sys.executable, "-c", USR1))
    adir = job.trial_dir / "attempt-1"
    try:
        (job_id,) = backend.submit([job])
        wait_until(lambda: len(list(adir.glob("ready-*"))) == 2, 60, "both tasks to start")
        run(["scancel", "--batch", "--signal=USR1", job_id])
        (status,) = wait_for(backend, [job_id], timeout=60).values()
    finally:
        backend.shutdown()
    assert sorted(p.name for p in adir.glob("usr1-*")) == ["usr1-0", "usr1-1"]
    assert status.state is JobState.SUCCEEDED


TOLD = (
    "import json, os; print(json.dumps({k[4:].lower(): os.environ[k] for k in ('DSE_RANK',"
    " 'DSE_LOCAL_RANK', 'DSE_NODE_RANK', 'DSE_WORLD_SIZE', 'DSE_NODE', 'DSE_NODES')}))"
)


def test_two_tasks_on_each_of_two_nodes_are_told_their_places(tmp_path):
    wait_for_an_idle_cluster()
    backend = SlurmBackend(options=SlurmOptions(partition="batch"), sacct_lag=10)
    job = dataclasses.replace(spec(tmp_path / "run", "two", 2), argv=(sys.executable, "-c", TOLD),
                              resources=Resources(nodes=2, tasks_per_node=2))
    try:
        (job_id,) = backend.submit([job])
        (status,) = wait_for(backend, [job_id], timeout=120).values()
    finally:
        backend.shutdown()
    assert status.state is JobState.SUCCEEDED
    first, second = status.node.split(",")
    adir = job.trial_dir / "attempt-1"
    told = [json.loads((adir / name).read_text()) for name in
            ("stdout.log", "stdout.1.log", "stdout.2.log", "stdout.3.log")]
    # srun's block distribution: ranks 0 and 1 on the first node, 2 and 3 on the second.
    assert told == [
        {"rank": str(rank), "local_rank": str(rank % 2), "node_rank": str(rank // 2),
         "world_size": "4", "node": (first, second)[rank // 2], "nodes": status.node}
        for rank in range(4)
    ]
    assert (status.usage or {}).get("cpus") == 4


def test_a_node_down_under_a_3_node_step_of_an_allocation_is_avoided_by_its_retry(tmp_path):
    """Allocation mode: the node failure ends the pilot and the step it ran; the step's end
    names the node Slurm shows down (not the three, not none), and the retry's pilot avoids
    it."""
    wait_for_an_idle_cluster()
    root = project(tmp_path, "allocdown", [3], partition="wide")
    text = (root / "campaign.toml").read_text().replace(
        'mode = "jobs"', f'mode = "allocation"\nallocation_nodes = 3\nallocation_cpus = 1\n'
                         f'allocation_time = "10m"\npython = "{sys.executable}"')
    (root / "campaign.toml").write_text(text)
    victim, first = take_a_node_down(root, lambda nodes: nodes[1])
    (row,) = trials(root).values()
    assert row["status"] == "completed"
    (attempts,) = attempts_by_trial(root).values()
    assert len(attempts) == 2, [(a["state"], a["node"], a["reason"]) for a in attempts]
    assert attempts[0]["state"] != "succeeded"
    assert attempts[0]["node"] == victim, attempts[0]["reason"]
    assert f"ran on {','.join(first)}" in attempts[0]["reason"]
    retried = json.loads((Path(row["trial_dir"]) / "result.json").read_text())["ranks"]
    assert victim not in [node for _, node in retried]
    assert len({node for _, node in retried}) == 3
