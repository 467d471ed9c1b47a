"""Allocation mode with trials of several nodes: the pilot places each as one step across
nodes of its allocation (placement and sizing first, without Slurm; then the real cluster)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dse import JobSpec, Resources
from dse_slurm._allocation import _node_cpus, _Pilot, _step_usage, _Task, spanning_pilot
from dse_slurm._pilot import Pilot, Warm
from support.campaign_record import attempts_by_trial, trials
from support.cli import run_dse, write_plugin
from support.slurm import queued_jobs, wait_for_an_idle_cluster

# -- placement in the pilot ------------------------------------------------------------------


@pytest.fixture
def pilot(tmp_path, monkeypatch) -> Pilot:
    """A pilot of three 2-CPU nodes, outside Slurm (its steps are recorded, not started)."""
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n1,n2,n3")
    monkeypatch.setenv("SLURM_JOB_CPUS_PER_NODE", "2(x3)")
    made = Pilot(str(tmp_path), 600.0, sys.executable)
    made.nodes = ["n1", "n2", "n3"]  # whatever scontrol made of the list
    made.cpus = dict.fromkeys(made.nodes, 2)
    made.free = dict(made.cpus)
    return made


def task(name: str, nodes: int = 1, tasks_per_node: int = 1, cpus: int = 1,
         **more: Any) -> dict[str, Any]:
    return {"name": name, "nodes": nodes, "tasks_per_node": tasks_per_node, "cpus": cpus,
            "time_limit": 60.0, **more}


def started(pilot: Pilot, monkeypatch) -> list[tuple[str, list[str]]]:
    """Record the steps *pilot* launches, taking their CPUs as a started step does."""
    launched: list[tuple[str, list[str]]] = []

    def launch(key: str, doc: dict[str, Any], nodes: list[str]) -> None:
        launched.append((key, nodes))
        for node in nodes:
            pilot.free[node] -= doc["tasks_per_node"] * doc["cpus"]

    monkeypatch.setattr(pilot, "launch", launch)
    monkeypatch.setattr(pilot, "prepare", lambda now: None)
    return launched


def test_a_step_of_k_nodes_takes_the_first_k_nodes_with_its_share_free(pilot):
    pilot.free["n1"] = 0
    assert pilot.place(task("a", nodes=2), 0.0) == (["n2", "n3"], None)
    assert pilot.place(task("b", nodes=3), 0.0) == (None, None)  # waits: n1 is busy
    pilot.free["n1"] = 1
    assert pilot.place(task("c", nodes=3, tasks_per_node=2), 0.0) == (None, None)
    assert pilot.place(task("d", nodes=3), 0.0) == (["n1", "n2", "n3"], None)


@pytest.mark.parametrize(("doc", "kind", "words"), [
    (task("a", nodes=4), "invalid", "asks for 4 nodes of 1 CPUs each; the 3 node(s)"),
    (task("b", nodes=2, tasks_per_node=3), "invalid", "2 nodes of 3 CPUs each"),
    (task("c", cpus=3), "invalid", "asks for 3 CPUs; the 3 node(s)"),
    (task("d", nodes=2, avoid=["n1", "n3"]), "declined", "fewer than 2 others could hold it"),
    (task("e", avoid=["n1", "n2", "n3"]), "declined", "avoids every node"),
])
def test_a_step_that_cannot_fit_is_refused_naming_why(pilot, doc, kind, words):
    refusal = pilot.refuse(doc, 0.0)
    assert refusal is not None
    assert list(refusal) == [kind]
    assert words in refusal[kind]
    assert pilot.place(doc, 0.0) == (None, refusal)


def test_a_waiting_step_of_several_nodes_keeps_its_share_from_later_one_node_steps(
    pilot, tmp_path, monkeypatch
):
    launched = started(pilot, monkeypatch)
    pilot.free.update(n1=0, n2=1, n3=2)  # one-node steps hold 2 + 1 CPUs
    pilot.queue = [("big", task("big", nodes=3)), ("one", task("one")),
                   ("two", task("two", cpus=2)), ("more", task("more"))]
    pilot.step()
    # "big" waits for n1; it keeps 1 CPU on each node, so "one" takes n3's second CPU and
    # "two" (2 CPUs) and "more" wait although n3 had room for them before "one" came.
    assert launched == [("one", ["n3"])]
    assert [key for key, _ in pilot.queue] == ["big", "two", "more"]
    assert pilot.held == {"n1": 1, "n2": 1, "n3": 1}
    pilot.free["n1"] = 2  # a step on n1 ended
    pilot.step()
    assert launched[1:] == [("big", ["n1", "n2", "n3"]), ("more", ["n1"])]


def test_a_step_across_nodes_takes_and_gives_back_its_cpus_on_each_and_says_where(pilot):
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    doc = task("w", nodes=2, tasks_per_node=2)
    pilot.go(Warm("w", doc, ["n1", "n3"], proc))
    assert pilot.free == {"n1": 0, "n2": 2, "n3": 0}
    claim = json.loads(Path(pilot.path("w.claim")).read_text())
    assert (claim["node"], claim["nodes"]) == ("n1", ["n1", "n3"])
    proc.wait(timeout=30)
    pilot.ended(pilot.running["w"])
    assert pilot.free == {"n1": 2, "n2": 2, "n3": 2}
    end = json.loads(Path(pilot.path("w.exit.json")).read_text())
    assert (end["rc"], end["nodes"]) == (0, ["n1", "n3"])


def test_srun_starts_one_task_per_node_and_cpu_share_across_the_chosen_nodes(
    pilot, monkeypatch
):
    calls: list[tuple[list[str], dict[str, str]]] = []

    class Popen:
        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            calls.append((argv, kwargs["env"]))
            self.stdin = None

        def wait(self) -> int:
            return 0

    monkeypatch.setattr("dse_slurm._pilot.subprocess.Popen", Popen)
    pilot.start("m", task("m", nodes=2, tasks_per_node=2, cpus=1, mem_mb=100), ["n1", "n3"])
    pilot.start("s", task("s", cpus=2), ["n2"])
    (multi, env), (single, one_env) = calls
    assert multi[:multi.index(sys.executable)] == [
        "srun", "--exact", "--overlap", "--nodes=2", "--ntasks=4", "--cpus-per-task=1",
        "--nodelist=n1,n3", "--job-name=m", "--ntasks-per-node=2", "--kill-on-bad-exit=1",
        "--mem=100M"]
    assert env["DSE_NODES"] == "n1,n3"
    assert single[:single.index(sys.executable)] == [
        "srun", "--exact", "--overlap", "--nodes=1", "--ntasks=1", "--cpus-per-task=2",
        "--nodelist=n2", "--job-name=s"]
    assert one_env["DSE_NODES"] == "n2"


def test_steps_of_several_nodes_are_not_started_ahead(pilot, monkeypatch):
    begun: list[str] = []
    monkeypatch.setattr(pilot, "start", lambda key, doc, nodes: begun.append(key))
    pilot.free = dict.fromkeys(pilot.nodes, 0)
    pilot.queue = [("big", task("big", nodes=2)), ("one", task("one"))]
    pilot.prepare(100.0)
    assert begun == ["one"]


# -- sizing and cost -------------------------------------------------------------------------


@pytest.mark.parametrize(("resources", "parallelism", "node_cpus", "expected"), [
    # three 2-CPU nodes: two 3-node trials at once, one CPU each on every node
    (Resources(nodes=3), 2, [2, 2, 2], (3, 2, 2)),
    (Resources(nodes=3), 1, [2, 2, 2], (3, 1, 1)),
    # 2-node trials of 2 tasks x 2 CPUs on 8-CPU nodes: 4 trials need 8 shares = 4 nodes x 2
    (Resources(nodes=2, tasks_per_node=2, cpus=2), 4, [8] * 10, (4, 8, 4)),
    # never fewer nodes than a trial spans, never more than the partition has up
    (Resources(nodes=2), 1, [4, 4, 4], (2, 1, 1)),
    (Resources(nodes=2), 8, [2, 2, 2], (3, 2, 3)),
    # unknown nodes, or none big enough: room for one trial (Slurm says whether it fits)
    (Resources(nodes=3, cpus=2), 4, None, (3, 2, 1)),
    (Resources(nodes=2, cpus=4), 2, [2, 2], (2, 4, 1)),
])
def test_auto_mode_sizes_the_pilot_for_its_largest_trials_in_whole_shares_of_nodes(
    resources, parallelism, node_cpus, expected
):
    assert spanning_pilot(resources, parallelism, node_cpus) == expected


class Sinfo:
    """Answers ``sinfo`` as a cluster whose default partition holds a drained node."""

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        out = ("n1 batch* 2 idle\nn1 wide 2 idle\nn2 batch* 4 mix\nn3 batch* 8 drain\n"
               "n4 batch* 2 alloc*\nn5 wide 16 idle\n")
        return subprocess.CompletedProcess(argv, 0, out, "")


@pytest.mark.parametrize(("partition", "cpus"), [
    (None, [2, 4]), ("batch", [2, 4]), ("wide", [2, 16]), ("other", []),
])
def test_the_cpus_of_a_partitions_usable_nodes_come_from_one_sinfo(partition, cpus):
    assert _node_cpus(Sinfo(), partition) == cpus  # type: ignore[arg-type]


def test_a_step_of_several_nodes_is_charged_at_least_its_nodes_for_its_run(tmp_path):
    pilot = _Pilot("p", tmp_path, "7", info={"nodes": ["n1", "n2", "n3"], "cpus": [2, 2, 2]})
    wide = _Task("alloc.c-1-0.1", JobSpec("c-1-0", 1, {}, tmp_path / "t0",
                                          resources=Resources(nodes=3, memory_mb=100)),
                 pilot=pilot, started_at=100.0, ended_at=110.0)
    one = _Task("alloc.c-1-1.1", JobSpec("c-1-1", 1, {}, tmp_path / "t1",
                                         resources=Resources(cpus=2)),
                pilot=pilot, started_at=100.0, ended_at=110.0)
    pilot.steps[one.job_id] = (100.0, 110.0, 2.0)
    usage = _step_usage(wide, pilot)
    assert usage is not None
    assert (usage["cpus"], usage["nodes"], usage["mem_mb"]) == (3.0, 3.0, 300.0)
    # 3 of the 5 busy CPUs: 6 x 10 x 3/5 CPU-seconds, but all 3 nodes for 10 s
    assert usage["allocation_cpu_s"] == pytest.approx(36.0)
    assert usage["allocation_node_s"] == pytest.approx(30.0)


# -- the real cluster ------------------------------------------------------------------------

RANKS = r"""
import os, time
from dse import trial

adir = os.path.join(os.environ["DSE_TRIAL_DIR"], "attempt-" + os.environ["DSE_ATTEMPT"])
line = "%d %d %d %s %s\n" % (trial.rank(), trial.local_rank(), trial.node_rank(), trial.node(),
                             ",".join(trial.nodes()))
with open(os.path.join(adir, "ranks.txt"), "a") as handle:
    handle.write(line)
print("rank", trial.rank(), flush=True)
if trial.is_first():
    deadline = time.monotonic() + 60
    while True:
        with open(os.path.join(adir, "ranks.txt")) as handle:
            lines = handle.read().splitlines()
        if len(lines) >= trial.world_size() or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    ranks = [item.split() for item in lines]
    time.sleep(1)
    trial.report({"world": float(len(ranks)), "distinct": float(len({r[3] for r in ranks}))},
                 ranks=ranks, nodes=trial.nodes())
"""

CAMPAIGN = """
[campaign]
name = "{name}"
agent = "list"
backend = "slurm"
max_parallelism = {parallelism}
poll_interval = ["0.3s", "1s"]

[agent.list]
points = [{{nodes = 3, i = 0}}, {{nodes = 1, i = 1}}, {{nodes = 2, i = 2}}, {{nodes = 1, i = 3}},
          {{nodes = 2, i = 4}}, {{nodes = 3, i = 5}}]

[environment]
command = ["python", "ranks.py"]
time_limit = "2m"
nodes = "{{nodes}}"

[backend.slurm]
partition = "batch"
python = "{python}"
allocation_time = "10m"
{backend}

[[objectives]]
metric = "world"

[space]
nodes = {{ type = "categorical", choices = [1, 2, 3] }}
i = {{ type = "int", low = 0, high = 9 }}
"""


def campaign_of_node_counts(tmp_path: Path, name: str, parallelism: int, backend: str) -> Path:
    write_plugin(tmp_path)
    (tmp_path / "ranks.py").write_text(RANKS)
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.format(
        name=name, parallelism=parallelism, python=sys.executable, backend=backend))
    return tmp_path


def assert_every_trial_ran_its_ranks_on_distinct_nodes_of_one_pilot(project: Path) -> dict:
    """The checks both modes share; returns the pilot's ``pilot.json``."""
    rows = trials(project)
    assert [row["status"] for row in rows.values()] == ["completed"] * 6
    attempts = attempts_by_trial(project)
    [pilot_dir] = [p for p in project.glob(".dse/*/run-*/.slurm/*.pilot.*") if p.is_dir()]
    info = json.loads((pilot_dir / "pilot.json").read_text())
    for number, row in rows.items():
        count = json.loads(row["params"])["nodes"]
        [attempt] = attempts[number]
        assert attempt["state"] == "succeeded"
        adir = Path(row["trial_dir"]) / "attempt-1"
        ranks = [line.split() for line in (adir / "ranks.txt").read_text().splitlines()]
        assert sorted(int(r[0]) for r in ranks) == list(range(count))
        nodes = {r[3] for r in ranks}
        assert len(nodes) == count, ranks
        assert nodes <= set(info["nodes"])
        for _rank, local, node_rank, node, listed in ranks:
            # DSE_NODES is the step's nodes in node-rank order, the same for every rank
            assert (local, listed.split(",")[int(node_rank)]) == ("0", node)
            assert set(listed.split(",")) == nodes
        result = json.loads((Path(row["trial_dir"]) / "result.json").read_text())
        assert result["metrics"] == {"world": count, "distinct": count}
        assert set(attempt["node"].split(",")) == nodes
        for rank in range(count):
            log = adir / ("stdout.log" if rank == 0 else f"stdout.{rank}.log")
            assert log.read_text() == f"rank {rank}\n"
        usage = json.loads(attempt["usage"])
        assert usage["allocation_job"] == float(info["job_id"])
        assert usage["nodes"] == count
        assert usage["allocation_node_s"] >= count * usage["elapsed_s"] - 1e-6
    return info


@pytest.mark.xdist_group("slurm")
def test_allocation_mode_runs_steps_of_one_two_and_three_nodes_in_one_pilot(
    slurm_cluster, tmp_path
):
    wait_for_an_idle_cluster()
    project = campaign_of_node_counts(tmp_path, "spans", 3, 'mode = "allocation"\n'
                                                             "allocation_nodes = 3")
    proc = run_dse(project, "run", "campaign.toml", timeout=240)
    assert proc.returncode == 0, proc.stderr
    info = assert_every_trial_ran_its_ranks_on_distinct_nodes_of_one_pilot(project)
    assert sorted(info["nodes"]) == ["n1", "n2", "n3"]
    assert queued_jobs("dse.spans-1.") == []


@pytest.mark.xdist_group("slurm")
def test_auto_mode_sizes_its_pilot_for_the_largest_trial(slurm_cluster, tmp_path):
    wait_for_an_idle_cluster()
    project = campaign_of_node_counts(tmp_path, "autospans", 2, 'mode = "auto"')
    proc = run_dse(project, "run", "campaign.toml", timeout=240)
    assert proc.returncode == 0, proc.stderr
    info = assert_every_trial_ran_its_ranks_on_distinct_nodes_of_one_pilot(project)
    # two 3-node trials at once: a CPU on each of three nodes for each
    assert (sorted(info["nodes"]), info["cpus"]) == (["n1", "n2", "n3"], [2, 2, 2])


def test_an_allocation_narrower_than_the_trials_is_refused_in_one_line(tmp_path):
    """``mode = "allocation"`` with fewer ``allocation_nodes`` than a trial may span: refused
    before anything runs (no pilot, no trial), naming the key to set, rather than every wide
    trial failing ``invalid_job``."""
    project = campaign_of_node_counts(tmp_path, "narrow", 2, 'mode = "allocation"\n'
                                                             "allocation_nodes = 2")
    proc = run_dse(project, "run", "campaign.toml", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "dse: error: campaign.toml: environment: trials of up to 3 nodes, but each allocation"
        " has 2 (backend.slurm.allocation_nodes); set allocation_nodes = 3, or mode = \"jobs\""]
    assert not list(project.glob(".dse/*/run-*/.slurm"))
