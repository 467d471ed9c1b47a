"""Ray nodes as dse names them: one word a person reads in ``dse show`` and a retry avoids.

Ray names a node by its IP address unless it was started with ``--node-name``; on one machine
(or one Kubernetes host network) several nodes share an address, so such a node is named
``<address>-<first 8 hex digits of its node id>``: stable for the node's life, distinct from
every other node's. Nothing here calls Ray: the callers pass ``ray.nodes()`` entries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


def node_label(entry: Mapping[str, Any]) -> str:
    """The name dse gives the node of one ``ray.nodes()`` *entry*."""
    name = str(entry.get("NodeName") or "")
    address = str(entry.get("NodeManagerAddress") or "")
    node_id = str(entry.get("NodeID") or "")
    if name and name != address:
        return name
    return f"{address or 'node'}-{node_id[:8]}"


def labels(entries: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node id (hex) → dse's name of it, for every node Ray knows (dead ones too)."""
    return {str(e["NodeID"]): node_label(e) for e in entries}


def fits(total: Mapping[str, float], ask: Mapping[str, float]) -> bool:
    """Whether a node whose total resources are *total* can ever hold *ask*."""
    return all(total.get(key, 0.0) >= value for key, value in ask.items() if value > 0)


def room(entries: Iterable[Mapping[str, Any]], ask: Mapping[str, float]) -> list[str]:
    """The names of the alive nodes that can ever hold *ask*."""
    return [node_label(e) for e in entries
            if e.get("Alive") and fits(e.get("Resources") or {}, ask)]
