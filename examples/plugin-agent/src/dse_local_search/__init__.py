"""dse-agent-local-search: a seeded local search around the best configuration found."""

from __future__ import annotations

from dse_local_search._agent import LocalSearchAgent

__version__ = "0.1.0"
__all__ = ["LocalSearchAgent", "__version__"]
