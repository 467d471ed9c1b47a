"""dse-agents' plugin: registers its agents through the public hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dse
from dse_agents._grid import GridAgent
from dse_agents._random import RandomAgent

if TYPE_CHECKING:
    from dse import Agent


@dse.hookimpl
def dse_register_agents() -> list[type[Agent]]:
    from dse_agents._bayesian import BayesianAgent  # numpy and scipy: only when asked

    return [BayesianAgent, GridAgent, RandomAgent]
