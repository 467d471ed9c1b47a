"""dse-backend-local: run trials as real processes on this machine."""

from __future__ import annotations

from dse_local._backend import LocalBackend, attempt_dir, detect_gpus

__version__ = "0.1.0"
__all__ = ["LocalBackend", "__version__", "attempt_dir", "detect_gpus"]
