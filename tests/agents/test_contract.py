"""dse-agents' agents pass the contract every agent must pass, and register as plugins."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

import dse
import dse_agents
from dse.testing.contracts import AgentContract
from dse_agents import GridAgent, RandomAgent

if TYPE_CHECKING:
    from collections.abc import Callable


class TestGridAgent(AgentContract):
    @pytest.fixture
    def agent_factory(self) -> Callable[[dse.Space, int], dse.Agent]:
        return lambda space, seed: GridAgent(space, seed=seed)


class TestRandomAgent(AgentContract):
    @pytest.fixture
    def agent_factory(self) -> Callable[[dse.Space, int], dse.Agent]:
        return lambda space, seed: RandomAgent(space, seed=seed)


def test_both_agents_register_through_the_entry_point():
    agents = dse.PluginManager(autoload=True).agents

    assert agents["grid"].cls is GridAgent
    assert agents["random"].cls is RandomAgent
    for name in ("grid", "random"):
        assert agents[name].kind == "agent"
        assert agents[name].plugin == "agents"
        assert agents[name].distribution == "dse-agents"
        assert agents[name].version == dse_agents.__version__


def test_agent_versions_follow_the_distribution():
    assert GridAgent.version == RandomAgent.version == dse_agents.__version__ == "0.1.0"


def test_the_bayesian_agent_is_registered_without_importing_numpy() -> None:
    # `dse run` of a grid campaign and `dse plugins` do not pay for numpy and scipy.
    # It is listed with the version its class has (the one the record stamps).
    code = ("import sys; from dse import PluginManager; p = PluginManager();"
            " assert 'bayesian' in p.agents; assert 'numpy' not in sys.modules, 'numpy';"
            " listed = p.agents['bayesian'].class_version; cls = p.agent_class('bayesian');"
            " assert cls.name == 'bayesian'; assert listed == cls.version == '0.3.0', listed")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
