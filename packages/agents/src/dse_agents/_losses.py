"""What an adapter tells its library of an observation: its losses, when it has finite ones."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection

    from dse import Observation, TrialStatus


def finite_losses(obs: Observation, objectives: int,
                  statuses: Collection[TrialStatus]) -> list[float] | None:
    """*obs*'s loss (or, with several *objectives*, each objective's), oriented so lower is
    better, when its status is one of *statuses* and every one is finite; else ``None``."""
    if obs.status not in statuses:
        return None
    values = obs.losses if objectives > 1 else (None if obs.loss is None else (obs.loss,))
    if values is None or len(values) != objectives or not all(math.isfinite(v) for v in values):
        return None
    return list(values)
