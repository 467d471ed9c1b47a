"""The version of dse-core (all four distributions share it while dse is before 1.0)."""

from __future__ import annotations

__version__ = "0.1.0"
"""dse-core's version; also its built-in scorers' (``default``, ``ratio``), recorded with
their scores."""
