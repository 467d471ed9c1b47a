"""Placeholder: this backend is not registered until it works (see the issues)."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
