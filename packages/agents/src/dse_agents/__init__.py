"""dse-agents: search agents for dse (grid and random), registered through the ``dse`` hooks.

The public API is re-exported here; implementation lives in private modules.
"""

from __future__ import annotations

from dse_agents._grid import GridAgent
from dse_agents._random import RandomAgent

__version__ = "0.1.0"

__all__ = ["GridAgent", "RandomAgent", "__version__"]
