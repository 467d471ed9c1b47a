"""dse-backend-unshare: run each dse trial in its own Linux PID and mount namespace."""

from __future__ import annotations

from dse_unshare._backend import UnshareBackend, attempt_dir

__version__ = "0.1.0"
__all__ = ["UnshareBackend", "__version__", "attempt_dir"]
