"""``agent = "optuna"``: Optuna's samplers as dse agents pass the contract every agent passes,
drive a real campaign (its trials told back as Optuna trials), and a resumed run gets the same
proposals from a new study."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

import dse
from dse.testing.contracts import AgentContract

optuna = pytest.importorskip("optuna")

from dse_agents._optuna import OptunaAgent  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


class TestTPE(AgentContract):
    @pytest.fixture
    def agent_factory(self) -> Callable[[dse.Space, int], dse.Agent]:
        return lambda space, seed: OptunaAgent(space, seed=seed)


class TestRandomSampler(AgentContract):
    @pytest.fixture
    def agent_factory(self) -> Callable[[dse.Space, int], dse.Agent]:
        return lambda space, seed: OptunaAgent(space, seed=seed, sampler="RandomSampler")


class TestQMC(AgentContract):
    @pytest.fixture
    def agent_factory(self) -> Callable[[dse.Space, int], dse.Agent]:
        return lambda space, seed: OptunaAgent(space, seed=seed, sampler="QMCSampler",
                                               options={"scramble": True})


def _space() -> dse.Space:
    return dse.Space.from_dict({"x": {"type": "float", "low": -5, "high": 5},
                                "k": {"type": "int", "low": 1, "high": 64, "log": True},
                                "kind": ["a", "b", "c"]})


def test_a_sampler_sees_the_results_it_is_told_as_optunas_trials() -> None:
    agent = OptunaAgent(_space(), seed=3, options={"n_startup_trials": 5})
    told = []
    for number in range(1, 21):
        (params,) = agent.propose(1, [])
        loss = (params["x"] - 1.0) ** 2 + (0.5 if params["kind"] != "b" else 0.0)
        told.append(loss)
        agent.observe([dse.Observation(params=params, status=dse.TrialStatus.COMPLETED,
                                       score=loss, trial_number=number, proposal=number)])
    trials = agent.study.trials  # what the sampler learnt from
    assert [t.value for t in trials if t.state.name == "COMPLETE"] == told
    assert agent.study.best_value == min(told)
    # TPE past its startup exploits: the last ten are better than the first five.
    assert sorted(told[10:])[len(told[10:]) // 2] < sorted(told[:5])[2]


def test_a_stopped_trial_is_pruned_at_its_step_and_a_failure_is_left_out() -> None:
    agent = OptunaAgent(_space(), seed=1)
    a, b = agent.propose(2, [])
    agent.observe([
        dse.Observation(params=a, status=dse.TrialStatus.STOPPED, score=2.0, step=3,
                        max_step=9, trial_number=1, proposal=1),
        dse.Observation(params=b, status=dse.TrialStatus.FAILED, trial_number=2, proposal=2,
                        failure=dse.FailureClass.NONZERO_EXIT),
    ])
    first, second = agent.study.trials
    assert first.state.name == "PRUNED"
    assert first.intermediate_values == {3: 2.0}
    assert second.state.name == "FAIL"


def test_an_unknown_sampler_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CAMPAIGN.replace('sampler = "TPESampler"',
                                                      'sampler = "TPESamplr"'))
    (tmp_path / "quad.py").write_text(SCRIPT)
    refused = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert "'TPESamplr' is not a sampler class" in lines[0]


CAMPAIGN = """\
[campaign]
name = "tpe"
agent = "optuna"
backend = "probe"
max_parallelism = 4
max_trials = 24
seed = 5
poll_interval = "1ms"

[agent.optuna]
sampler = "TPESampler"
options = { n_startup_trials = 6, constant_liar = true }

[backend.probe]
script = "quad:script"

[[objectives]]
metric = "loss"

[space]
x = { type = "float", low = -5, high = 5 }
y = { type = "int", low = -5, high = 5 }
"""

SCRIPT = """\
from dse.testing import ProbeScript

def script(p):
    return ProbeScript(passes=1 + p["y"] % 2, metrics={"loss": (p["x"] - 1) ** 2 + p["y"] ** 2})
"""


def test_a_campaign_of_tpe_runs_and_a_rerun_of_the_same_seed_proposes_the_same(
    tmp_path: Path,
) -> None:
    trajectories = []
    for attempt in ("first", "second"):
        project = tmp_path / attempt
        project.mkdir()
        (project / "c.toml").write_text(CAMPAIGN)
        (project / "quad.py").write_text(SCRIPT)
        done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml", "--json"],
                              cwd=project, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        db = sqlite3.connect(project / ".dse" / "dse.sqlite")
        rows = db.execute("SELECT params, status FROM trials ORDER BY number").fetchall()
        (agent,) = db.execute("SELECT agent FROM campaigns").fetchone()
        assert agent == "optuna==1"
        assert len(rows) == 24
        assert len({p for p, _ in rows}) == 24  # never the same config twice
        trajectories.append([json.loads(p) for p, _ in rows])
    assert trajectories[0] == trajectories[1]
