"""What the benchmarks share: their error, and Optuna imported quietly."""

from __future__ import annotations

import logging
import warnings
from typing import Any


class BenchmarkError(Exception):
    """The benchmark could not run or its result is not valid."""


def import_optuna(install: str = "optuna") -> Any:
    """Optuna with its logging and warnings silenced, or a :class:`BenchmarkError` naming
    what to install (*install*: the pip arguments this benchmark needs)."""
    try:
        import optuna
    except ImportError:
        raise BenchmarkError(
            f"optuna is not installed; this benchmark needs it: `.venv/bin/pip install {install}`"
        ) from None
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.logging.disable_default_handler()
    for name in ("optuna", "alembic"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="optuna")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna
