"""The loop: passes over one campaign or several sharing resources (:class:`Pool`,
:func:`drive`, :func:`run_pool`), each run driven through its per-pass API (:class:`Driven`),
the pool file (:class:`PoolConfig`), and the pure planning of fair share and reservations
(:class:`PoolScheduler`). Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.model._lazy import lazy_names

if TYPE_CHECKING:
    from dse.pool._driven import Driven, PoolTrial
    from dse.pool._pool import Pool, drive, run_pool
    from dse.pool._poolfile import PoolConfig, load_pool
    from dse.pool._scheduler import Plan, PoolScheduler, Request

_LAZY: dict[str, str] = {
    "Driven": "dse.pool._driven",
    "Plan": "dse.pool._scheduler",
    "Pool": "dse.pool._pool",
    "PoolConfig": "dse.pool._poolfile",
    "PoolScheduler": "dse.pool._scheduler",
    "PoolTrial": "dse.pool._driven",
    "Request": "dse.pool._scheduler",
    "drive": "dse.pool._pool",
    "load_pool": "dse.pool._poolfile",
    "run_pool": "dse.pool._pool",
}

__all__ = ["Driven", "Plan", "Pool", "PoolConfig", "PoolScheduler", "PoolTrial", "Request",
           "drive", "load_pool", "run_pool"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, __all__)
