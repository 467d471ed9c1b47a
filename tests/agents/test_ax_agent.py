"""``agent = "ax"``: Ax's Client as a dse agent passes the contract every agent passes, tells
Ax what became of each trial as Ax's own API says it, and drives a real campaign (the one
docs/agents.md shows) whose rerun of the same seed proposes the same.

Ax fits a Gaussian process for each proposal once its start (a centre point and Sobol) is
done, 1.5 s on the contract's mixed space at load 3 on two cores (5-7 s at load 6-8): the
contract runs with a start of 20 trials, so the model proposes the last few of the checks
that ask for more (the two that run the agent in other processes, 24; the longest, 35-40),
and the other tests ask for a dozen."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import dse
from dse.testing.contracts import AgentContract

pytest.importorskip("ax")

from dse_agents._ax import AxAgent, ax_parameter, import_ax
from support.tiles import KERNEL

if TYPE_CHECKING:
    from collections.abc import Callable

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


class TestAx(AgentContract):
    @pytest.fixture
    def agent_factory(self) -> Callable[[dse.Space, int], dse.Agent]:
        return lambda space, seed: AxAgent(space, seed=seed, initialization_budget=20)


def _space() -> dse.Space:
    return dse.Space.from_dict({"x": {"type": "float", "low": -5, "high": 5},
                                "k": {"type": "int", "low": 1, "high": 64, "log": True},
                                "kind": ["a", "b", "c"]})


def _completed(params: dict[str, object], loss: float, number: int,
               direction: dse.Direction = dse.Direction.MINIMIZE) -> dse.Observation:
    return dse.Observation(params=params, status=dse.TrialStatus.COMPLETED, score=loss,
                           trial_number=number, proposal=number, direction=direction)


def test_ax_sees_the_results_it_is_told_as_its_trials_and_its_model_takes_over() -> None:
    agent = AxAgent(_space(), seed=3, initialization_budget=5)
    told = []
    for number in range(1, 11):
        (params,) = agent.propose(1, [])
        # Maximised: Ax is told the loss, the score negated.
        score = -((params["x"] - 1.0) ** 2) - (0.5 if params["kind"] != "b" else 0.0)
        told.append(-score)
        agent.observe([_completed(params, score, number, dse.Direction.MAXIMIZE)])
    agent.propose(1, [])  # hands the last result to Ax
    frame = agent.client.summarize()  # Ax's own table of its trials
    done = frame[frame["trial_status"] == "COMPLETED"].sort_values("trial_index")
    assert list(done["loss"]) == pytest.approx(told)
    assert list(done["generation_node"][:6]) == ["CenterOfSearchSpace"] + ["Sobol"] * 4 + ["MBM"]


def test_a_stopped_trial_is_early_stopped_at_its_step_a_failure_failed_with_its_reason() -> None:
    agent = AxAgent(_space(), seed=1)
    a, b, c = agent.propose(3, [])
    agent.observe([
        dse.Observation(params=a, status=dse.TrialStatus.STOPPED, score=2.0, step=3,
                        max_step=9, trial_number=1, proposal=1),
        dse.Observation(params=b, status=dse.TrialStatus.FAILED, trial_number=2, proposal=2,
                        failure=dse.FailureClass.NONZERO_EXIT),
        dse.Observation(params=c, status=None, rejected="constraint 'fits' is false",
                        proposal=3),
    ])
    agent.observe([dse.Observation(params=a, status=dse.TrialStatus.COMPLETED, score=1.5,
                                   max_step=9, trial_number=1, proposal=1)])  # promoted
    agent.propose(1, [])
    trials = agent.client._experiment.trials  # Ax keeps the reasons there (private)
    assert [trials[i].status.name for i in range(3)] == ["EARLY_STOPPED", "FAILED", "FAILED"]
    assert [trials[i].status_reason for i in (1, 2)] == [
        "failed: nonzero_exit", "rejected: constraint 'fits' is false"]
    data = agent.client._experiment.lookup_data(trial_indices=[0]).full_df
    assert sorted(zip(data["step"], data["mean"], strict=True)) == [(3, 2.0), (9, 1.5)]


def test_the_space_is_given_to_ax_as_its_own_parameters() -> None:
    ax = import_ax()
    space = dse.Space.from_dict({
        "tile": {"type": "int", "low": 16, "high": 250, "step": 16},
        "batch": {"type": "int", "low": 8, "high": 512, "step": 8, "log": True},
        "drop": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.1},
        "one": {"type": "int", "low": 3, "high": 3},
        "mixed": [1, "1", True],
    })
    tile, batch, drop, one, mixed = (ax_parameter(ax.configs, p) for p in space)
    assert tile.config.values == list(range(16, 241, 16))  # an ordered choice, as Ax makes
    assert tile.config.is_ordered
    assert (batch.config.bounds, batch.config.scaling) == ((8, 512), "log")  # snapped
    assert batch.decode(100.7) == 104
    assert drop.config.values == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert one.config.values == ["3"]  # fixed
    assert mixed.config.values == ["0: 1", "1: 1", "2: True"]
    assert [mixed.decode(v) for v in mixed.config.values] == [1, "1", True]
    assert [mixed.encode(v) for v in (1, "1", True)] == mixed.config.values


def test_a_pareto_campaign_is_two_objectives_of_ax_and_a_miscount_is_one_line() -> None:
    objectives = (dse.Objective("a"), dse.Objective("b", dse.Direction.MAXIMIZE))
    agent = AxAgent(_space(), seed=2, objectives=2, initialization_budget=3)
    for number in range(1, 5):
        (params,) = agent.propose(1, [])
        agent.observe([dse.Observation(
            params=params, status=dse.TrialStatus.COMPLETED, score=params["x"],
            scores=(params["x"], params["x"] ** 2), objectives=objectives,
            trial_number=number, proposal=number)])
    assert len(agent.propose(1, [])) == 1  # the model's (EHVI) first pick
    frame = agent.client.summarize()
    assert list(frame["loss_1"].dropna()[:4]) == pytest.approx(
        [-(x ** 2) for x in frame["x"][:4]])  # b maximised: its loss is -b
    single = AxAgent(_space(), seed=2)
    (params,) = single.propose(1, [])
    with pytest.raises(dse.ConfigError, match=re.escape(
            "agent.ax.objectives: the campaign optimises 2 objective(s), the agent 1;"
            " set objectives = 2 in [agent.ax]")):
        single.observe([dse.Observation(
            params=params, status=dse.TrialStatus.COMPLETED, score=1.0, scores=(1.0, 2.0),
            objectives=objectives, trial_number=1, proposal=1)])


@pytest.mark.parametrize(("option", "message"), [
    ("method = \"best\"", "agent.ax.method: expected one of ['fast', 'quality',"
                          " 'random_search'], got 'best'"),
    ("initialization_budget = 0", "agent.ax.initialization_budget: expected an integer >= 1,"
                                  " got 0"),
    ("objectives = true", "agent.ax.objectives: expected an integer >= 1, got True"),
])
def test_a_bad_option_stops_the_campaign_in_one_line(
    tmp_path: Path, option: str, message: str,
) -> None:
    campaign = _doc_campaign()
    campaign = campaign.replace("initialization_budget = 6", option)
    (tmp_path / "campaign.toml").write_text(campaign)
    refused = subprocess.run([sys.executable, "-m", "dse", "run", "campaign.toml"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert message in line


def _doc_campaign() -> str:
    """The campaign file docs/agents.md shows for ``agent = "ax"``."""
    text = DOC.read_text()
    section = text[text.index("## `ax`"):]
    return re.findall(r"```toml\n(.*?)```", section, flags=re.DOTALL)[0]


def test_the_example_of_the_docs_runs_and_a_rerun_of_its_seed_proposes_the_same(
    tmp_path: Path,
) -> None:
    trajectories = []
    for attempt in ("first", "second"):
        project = tmp_path / attempt
        project.mkdir()
        (project / "campaign.toml").write_text(_doc_campaign())
        (project / "kernel.py").write_text(KERNEL)
        done = subprocess.run([sys.executable, "-m", "dse", "run", "campaign.toml", "--json"],
                              cwd=project, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        db = sqlite3.connect(project / ".dse" / "dse.sqlite")
        try:
            rows = db.execute("SELECT params, status FROM trials ORDER BY number").fetchall()
            (agent,) = db.execute("SELECT agent FROM campaigns").fetchone()
        finally:
            db.close()
        assert agent == "ax==1"
        assert [status for _, status in rows] == ["completed"] * 12
        assert len({p for p, _ in rows}) == 12  # never the same config twice
        trajectories.append([json.loads(p) for p, _ in rows])
    assert trajectories[0] == trajectories[1]
    # Ax starts at the centre of the space: the middle value of each choice, lr 10^-2.5.
    assert trajectories[0][0] == {"tile": 144, "unroll": 4, "lr": pytest.approx(10 ** -2.5)}


def test_a_conditional_space_is_proposed_as_its_active_params_never_twice() -> None:
    tree = dse.Space.from_dict({
        "optimizer": ["sgd", "adam"],
        "momentum": {"type": "float", "low": 0.0, "high": 0.99,
                     "when": {"optimizer": ["sgd"]}},
        "beta": {"type": "int", "low": 1, "high": 3, "when": {"optimizer": ["adam"]}},
    })
    agent = AxAgent(tree, seed=4, initialization_budget=6)
    seen = []
    for number in range(1, 9):
        (params,) = agent.propose(1, [])
        assert set(params) == set(tree.active(params))
        assert params not in seen
        seen.append(params)
        loss = params.get("momentum", 0.5) + params.get("beta", 0)
        agent.observe([_completed(params, loss, number)])
    assert {p["optimizer"] for p in seen} == {"sgd", "adam"}
    # The tree has 3 points under adam: never proposed again once told.
    assert len([p for p in seen if p["optimizer"] == "adam"]) <= 3


def test_with_its_start_stopped_early_and_nothing_in_flight_it_proposes_a_seeded_point() -> None:
    # Ax's start waits for a completed trial (it counts no early-stopped one): with none in
    # flight it would wait forever, and dse would end the campaign.
    def run() -> list[dict[str, object]]:
        agent = AxAgent(_space(), seed=6, initialization_budget=3)
        first = agent.propose(3, [])
        agent.observe([dse.Observation(params=p, status=dse.TrialStatus.STOPPED, score=1.0,
                                       step=1, max_step=9, trial_number=i, proposal=i)
                       for i, p in enumerate(first, start=1)])
        (filler,) = agent.propose(2, [])  # Ax gives none: its start is waiting
        assert filler not in first
        agent.observe([_completed(filler, 0.5, 4)])
        (model,) = agent.propose(1, [])
        frame = agent.client.summarize()
        nodes = list(frame["generation_node"].fillna("attached"))
        assert nodes[3:] == ["attached", "MBM"]  # the point, then the model took over
        return [*first, filler, model]

    assert run() == run()
