"""One campaign run: the parts that hold its state (live trials, budget gate, retries,
feedback to the agent, claims, trial directories...), the workers that move a trial between
them (dispatch, collect, results, resume), and :class:`Engine`, which composes them and
offers the per-pass API. Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.model._lazy import lazy_names

if TYPE_CHECKING:
    from dse.engine._engine import Engine, EngineListener

_LAZY: dict[str, str] = {
    "Engine": "dse.engine._engine",
    "EngineListener": "dse.engine._engine",
}

__all__ = ["Engine", "EngineListener"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, __all__)
