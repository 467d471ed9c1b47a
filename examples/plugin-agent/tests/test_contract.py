"""The local-search agent passes dse's AgentContract, and finds a good point."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from dse_local_search import LocalSearchAgent

import dse
from dse.testing.contracts import AgentContract

if TYPE_CHECKING:
    from collections.abc import Callable


class TestLocalSearchAgent(AgentContract):
    @pytest.fixture
    def agent_factory(self) -> Callable[[dse.Space, int], dse.Agent]:
        return lambda space, seed: LocalSearchAgent(space, seed=seed)


def test_it_gets_closer_to_the_optimum_than_its_random_start() -> None:
    space = dse.Space.from_dict({f"x{i}": {"type": "float", "low": -5.0, "high": 5.0}
                                 for i in range(3)})
    agent = LocalSearchAgent(space, seed=0)
    losses = []
    for number in range(1, 61):
        (params,) = agent.propose(1)
        loss = sum((params[f"x{i}"] - 1.0) ** 2 for i in range(3))
        losses.append(loss)
        agent.observe([dse.Observation(params=params, status=dse.TrialStatus.COMPLETED,
                                       metrics={"loss": loss}, score=loss,
                                       trial_number=number)])
    assert min(losses[8:]) < min(losses[:8]) / 4


def test_an_unknown_option_is_one_clear_error() -> None:
    space = dse.Space.from_dict({"x": {"type": "int", "low": 1, "high": 4}})
    with pytest.raises(dse.ConfigError, match="unknown option 'radious'"):
        LocalSearchAgent(space, seed=0, radious=0.3)
