"""dse-agents' plugin: registers its agents through the public hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dse
from dse_agents._grid import GridAgent
from dse_agents._random import RandomAgent

if TYPE_CHECKING:
    from dse import Agent


@dse.hookimpl
def dse_register_agents() -> list[type[Agent] | dse.Deferred]:
    # The Bayesian agent needs numpy and scipy: imported only when a campaign asks for it.
    bayesian = dse.Deferred("bayesian", "dse_agents._bayesian:BayesianAgent", version="0.3.0")
    # Optuna's samplers (dse-agents[optuna]): imported only by a campaign that names them.
    optuna = dse.Deferred("optuna", "dse_agents._optuna:OptunaAgent", version="1")
    # Ax's Client (dse-agents[ax]): torch and Ax take seconds to import.
    ax = dse.Deferred("ax", "dse_agents._ax:AxAgent", version="1")
    return [ax, bayesian, optuna, GridAgent, RandomAgent]
