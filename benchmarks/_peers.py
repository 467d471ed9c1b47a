"""What the benchmarks share: their error, dse's plugins loaded once, Optuna imported quietly,
and their tables."""

from __future__ import annotations

import functools
import logging
import warnings
from typing import TYPE_CHECKING, Any

import dse

if TYPE_CHECKING:
    from collections.abc import Sequence


class BenchmarkError(Exception):
    """The benchmark could not run or its result is not valid."""


@functools.cache
def plugins() -> dse.PluginManager:
    """dse's plugin manager (its agents, rules and backends), loaded once per process."""
    return dse.PluginManager()


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


def table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([cells[0].ljust(widths[0]), *rest])

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, body)])
