"""Helpers for people who test dse or write plugins for it.

* :class:`ProbeBackend` — an in-memory backend whose jobs' durations (in polling passes) and
  ends (and, with trial directories, learning curves: :class:`ProbePoint`) are scripted per
  params; registered as ``probe`` through the public hooks.
* :class:`ScriptedAgent` — proposes a fixed list (or an endless iterator) of params.
* :class:`FakeClock` — a clock that advances when the engine sleeps.
* :class:`BackendContract`, :class:`AgentContract` and :class:`StorageContract` — pytest
  suites a plugin author subclasses, overriding one fixture (imported lazily: pytest is an
  optional extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.testing._agents import FakeClock, ScriptedAgent
from dse.testing._probe import (
    ProbeBackend,
    ProbeCluster,
    ProbePoint,
    ProbeScript,
    default_script,
)

if TYPE_CHECKING:
    from dse.testing.contracts import AgentContract, BackendContract, StorageContract

__all__ = [
    "AgentContract",
    "BackendContract",
    "FakeClock",
    "ProbeBackend",
    "ProbeCluster",
    "ProbePoint",
    "ProbeScript",
    "ScriptedAgent",
    "StorageContract",
    "default_script",
]


def __getattr__(name: str) -> Any:
    if name in ("AgentContract", "BackendContract", "StorageContract"):
        from dse.testing import contracts

        return getattr(contracts, name)
    raise AttributeError(f"module 'dse.testing' has no attribute {name!r}")
