"""dse-agents: search agents for dse (grid, random and bayesian), registered through the
``dse`` hooks.

The public API is re-exported here; implementation lives in private modules.
"""

from __future__ import annotations

from dse_agents._grid import GridAgent
from dse_agents._random import RandomAgent

__version__ = "0.1.0"

__all__ = ["BayesianAgent", "GridAgent", "RandomAgent", "__version__"]


def __getattr__(name: str) -> object:
    # The Bayesian agent needs numpy and scipy: imported when first asked for.
    if name == "BayesianAgent":
        from dse_agents._bayesian import BayesianAgent

        return BayesianAgent
    raise AttributeError(f"module 'dse_agents' has no attribute {name!r}")
