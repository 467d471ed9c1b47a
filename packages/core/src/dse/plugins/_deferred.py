"""A plugin class named without importing it (:class:`Deferred`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Deferred:
    """A plugin class named without importing it: registered by *name*, loaded from
    *target* (``"module:Class"``) only when a campaign asks for it. A plugin whose class
    needs heavy imports (numpy, scipy) returns this from its hook instead of the class, so
    that ``dse run`` of another agent and ``dse plugins`` never pay for them."""

    name: str
    """The registered name (the loaded class's ``name`` must match)."""
    target: str
    """``"module:Class"``, imported when the class is first needed."""
    version: str = ""
    """The class's ``version``, shown by ``dse plugins`` without loading it; when given, the
    loaded class must have the same (a :class:`~dse.PluginError` otherwise), since its own
    is the one the record stamps."""
