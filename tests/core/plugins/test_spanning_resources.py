"""Trials that span nodes, as the core sees them: the campaign file's keys, what a trial holds
and is charged, the identity of one-task trials, and the trial side (``dse.trial``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dse.trial
from dse import CommandEnvironment, ConfigError, Resources, load_campaign
from dse.model._budget import Price
from dse.plugins._protocols import TrialInfo

CAMPAIGN = """
[campaign]
name = "span"
backend = "probe"
max_trials = 4

[[objectives]]
metric = "loss"

[environment]
command = ["python", "step.py"]
time_limit = "10m"
{resources}

[space]
nodes = {{ type = "categorical", choices = [1, 2, 3] }}
tpn = {{ type = "int", low = 1, high = 4 }}
"""


def load(tmp_path: Path, resources: str):
    path = tmp_path / "campaign.toml"
    path.write_text(CAMPAIGN.format(resources=resources))
    return load_campaign(path)


def prepare(tmp_path: Path, campaign, params):
    env = CommandEnvironment(campaign.environment, campaign.objectives,
                             param_names=campaign.space.names)
    trial_dir = tmp_path / "trial"
    trial_dir.mkdir(exist_ok=True)
    return env, env.prepare(TrialInfo("span-1-1", 1, 1, params, trial_dir))


def test_node_count_and_tasks_are_searched_and_budgets_see_the_largest(tmp_path: Path) -> None:
    c = load(tmp_path, 'nodes = "{nodes}"\ntasks_per_node = "{tpn}"\ncpus_per_task = 2\n'
                       "gpus_per_node = 1")
    largest = c.environment.resources
    assert (largest.nodes, largest.tasks_per_node, largest.cpus, largest.gpus) == (3, 4, 2, 1)
    assert (largest.tasks, largest.total_cpus, largest.total_gpus) == (12, 24, 3)
    _, spec = prepare(tmp_path, c, {"nodes": 2, "tpn": 3})
    assert spec.resources == Resources(cpus=2, gpus=1, nodes=2, tasks_per_node=3)
    # The trial contract: every task starts as rank 0 of the world; a backend that starts
    # several tasks sets each one's own rank and node.
    assert {k: spec.env[k] for k in ("DSE_RANK", "DSE_WORLD_SIZE", "DSE_NUM_NODES",
                                     "DSE_TASKS_PER_NODE")} == {
        "DSE_RANK": "0", "DSE_WORLD_SIZE": "6", "DSE_NUM_NODES": "2", "DSE_TASKS_PER_NODE": "3"}


@pytest.mark.parametrize(("resources", "message"), [
    ("nodes = 0", "environment.nodes: expected an integer >= 1, got 0"),
    ("tasks_per_node = 0", "environment.tasks_per_node: expected an integer >= 1"),
    ('nodes = "many"', "environment.nodes: expected an integer or '{param}'"),
    ("cpus = 2\ncpus_per_task = 2", "give cpus or cpus_per_task, not both"),
    ("gpus = 1\ngpus_per_node = 1", "give gpus or gpus_per_node, not both"),
    ('nodes = "{zz}"', "environment.nodes: {zz} is not a parameter of the space"),
])
def test_bad_resource_keys_are_one_line_naming_the_key(
    tmp_path: Path, resources: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, resources)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_node_count_param_must_take_positive_integers(tmp_path: Path) -> None:
    path = tmp_path / "campaign.toml"
    path.write_text(CAMPAIGN.format(resources='nodes = "{nodes}"').replace(
        "choices = [1, 2, 3]", "choices = [0, 2]"))
    with pytest.raises(ConfigError, match="parameter 'nodes' must take only integers >= 1"):
        load_campaign(path)


def test_one_task_trials_keep_their_identity(tmp_path: Path) -> None:
    """Results recorded before trials could span nodes are still reused: the identity of a
    one-task trial names no node count."""
    one = load(tmp_path, "cpus = 2")
    env, _ = prepare(tmp_path, one, {"nodes": 1, "tpn": 1})
    assert env.identity()["resources"] == {"cpus": 2, "gpus": 0, "memory_mb": None}
    spread = load(tmp_path, 'cpus = 2\nnodes = "{nodes}"')
    env, _ = prepare(tmp_path, spread, {"nodes": 1, "tpn": 1})
    assert env.identity()["resources"] == {"cpus": 2, "gpus": 0, "memory_mb": None,
                                           "nodes": "{nodes}"}
    fixed = load(tmp_path, "cpus = 2\ntasks_per_node = 4")
    env, _ = prepare(tmp_path, fixed, {"nodes": 1, "tpn": 1})
    assert env.identity()["resources"]["tasks_per_node"] == 4


def test_every_node_of_a_trial_is_charged() -> None:
    price = Price(cpu_hour=0.5, gpu_hour=2.0, node_hour=10.0)
    three = Resources(cpus=2, gpus=1, nodes=3, tasks_per_node=2)
    spend = price.charge(3600.0, three)
    assert (spend.cpu_s, spend.gpu_s, spend.node_s) == (12 * 3600.0, 3 * 3600.0, 3 * 3600.0)
    assert spend.money == pytest.approx(12 * 0.5 + 3 * 2.0 + 3 * 10.0)
    assert price.per_second(three) * 3600 == pytest.approx(spend.money)
    # The backend's accounting, when it has one, is what was charged.
    told = price.charge(3600.0, three, {"elapsed_s": 1800.0, "nodes": 3.0, "cpus": 6.0})
    assert told.node_s == 3 * 1800.0
    assert told.cpu_s == 6 * 1800.0


def test_trial_side_reads_its_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSE_TRIAL_DIR", str(tmp_path))
    monkeypatch.setenv("DSE_RANK", "2")
    monkeypatch.setenv("DSE_LOCAL_RANK", "0")
    monkeypatch.setenv("DSE_NODE_RANK", "1")
    monkeypatch.setenv("DSE_WORLD_SIZE", "4")
    monkeypatch.setenv("DSE_NODE", "n2")
    monkeypatch.setenv("DSE_NODES", "n1,n2")
    assert (dse.trial.rank(), dse.trial.local_rank(), dse.trial.node_rank()) == (2, 0, 1)
    assert (dse.trial.world_size(), dse.trial.node(), dse.trial.nodes()) == (4, "n2",
                                                                            ["n1", "n2"])
    assert not dse.trial.is_first()
    # Only the first rank writes the result; every rank may run the same code.
    path = dse.trial.report({"loss": 1.0})
    assert path == tmp_path / "result.json"
    assert not path.exists()
    monkeypatch.setenv("DSE_RANK", "0")
    dse.trial.report({"loss": 1.0})
    assert json.loads(path.read_text())["metrics"] == {"loss": 1.0}
    monkeypatch.setenv("DSE_WORLD_SIZE", "zero")
    with pytest.raises(dse.trial.TrialContextError, match="DSE_WORLD_SIZE"):
        dse.trial.world_size()


def test_one_task_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DSE_RANK", "DSE_WORLD_SIZE", "DSE_NODE", "DSE_NODES"):
        monkeypatch.delenv(name, raising=False)
    assert (dse.trial.rank(), dse.trial.world_size(), dse.trial.is_first()) == (0, 1, True)
    assert dse.trial.nodes() == [dse.trial.node()]
