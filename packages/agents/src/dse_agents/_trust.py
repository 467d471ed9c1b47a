"""A trust region for many parameters (after TuRBO: Eriksson et al., 2019).

With ten or more numeric columns a global Gaussian process spreads its proposals over a cube
too large for the budget; the Bayesian agent then searches a box around the best point seen,
its sides proportional to the model's length scales, that grows after improvements and
shrinks after a run without one. The box's size is not state of its own: it is replayed from
the losses observed, in order, at every proposal (cheap, and a restored agent has it
without a snapshot field).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import NDArray

__all__ = ["MIN_COLUMNS", "trust_box", "trust_length"]

MIN_COLUMNS = 10
"""Numeric columns from which the agent searches a trust region."""
_START, _LONGEST, _SHORTEST = 0.8, 1.6, 0.5**7
_GROW_AFTER = 3
_SCALE_CAP = 2.0
"""Length scales above this count as this in the box's shape (TuRBO bounds them to 2). The
dimension-scaled prior lets a column that does not matter reach 100: uncapped, those columns
took the whole cube and the box's geometric mean squeezed the columns that matter to a few
hundredths, so the search could not leave a basin (Styblinski-Tang in 20-D, 6 seeds: median
regret 17/17 uncapped, 8.4/15 capped, rolling/waves)."""
_RELATIVE = 1e-3


def trust_length(losses: Sequence[float | None], start: int, columns: int) -> float:
    """The side of the trust region after *losses* (``None`` a failure), the first *start*
    of them being the initial design: doubled after three improvements of the best in a row
    (each by a thousandth of it; a result without one starts the count again, as TuRBO's
    success counter), halved after ``max(4, columns)`` results without one, back to its
    start once shorter than 0.5**7. Counting improvements that a miss did not interrupt
    kept the region near the whole cube all campaign long, a global search in 20-D: resetting
    the count halved the 20-D regret (embedded Styblinski-Tang, 10 seeds, median 8.9/17.1 ->
    5.9/15.1 rolling/waves, geometric mean of per-seed ratios 0.52/0.55; a 16-D embedding
    better on 10 of 10 seeds in both modes, 0.017/0.022 -> 0.0070/0.0076)."""
    length, wins, misses = _START, 0, 0
    patience = max(4, columns)
    best = math.inf
    for index, loss in enumerate(losses):
        improved = loss is not None and loss < best - _RELATIVE * abs(best)
        if loss is not None:
            best = min(best, loss)
        if index < start:
            continue
        if improved:
            wins, misses = wins + 1, 0
            if wins == _GROW_AFTER:
                length, wins = min(2.0 * length, _LONGEST), 0
        else:
            misses += 1
            wins = 0
            if misses == patience:
                length, misses = length / 2.0, 0
                if length < _SHORTEST:
                    length = _START
    return length


def trust_box(
    centre: NDArray[np.float64], length_scales: NDArray[np.float64], length: float,
    free: NDArray[np.bool_] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The box of side *length* (geometric mean) around *centre*, each side proportional to
    its length scale (at most ``_SCALE_CAP``), clipped to the unit cube; a column not *free*
    (its param inactive at the centre, of a conditional space) spans the whole cube."""
    scales = np.minimum(length_scales, _SCALE_CAP)
    weights = scales / np.exp(np.mean(np.log(scales)))
    half = 0.5 * length * weights
    low, high = np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)
    if free is not None:
        low[~free], high[~free] = 0.0, 1.0
    return low, high
