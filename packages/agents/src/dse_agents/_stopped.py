"""What a campaign that stops trials early changes in the Bayesian agent: the scale of the
model's fidelity column, and a share of proposals drawn at random.

The agent learns that the campaign stops trials early from its observations: each carries the
campaign's ``max_step`` then (:attr:`dse.Observation.max_step`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["RANDOM_FRACTION", "EarlyStopped", "fidelity_column"]

RANDOM_FRACTION = 1 / 3
"""The share of proposals drawn at random, once the campaign stops trials early (BOHB's
default, Falkner et al. 2018): what the model learns from a trial stopped at its first rungs
is an extrapolation, and proposals taken from it alone crowd a region the rungs then judge
among themselves. In ``benchmarks/model_based_hyperband.py``'s lockstep runs (mlp, 8 seeds;
both with the log-scale fidelity) the median compute to the target fell from 671 (6 seeds
reached it) to 455 (8 of 8), about a random search's 431 (7 of 8); on its synthetic family
(20 seeds) 985 without, 1,029 with (19 of 20 both)."""


def fidelity_column(t: NDArray[np.float64], max_step: int | None) -> NDArray[np.float64]:
    """The model's fidelity input of results at fidelities *t* (``step / max_step``; 1 for a
    full run): the step on a log scale, ``log(step) / log(max_step)``, where the rungs of
    ``asha`` and ``hyperband`` lie evenly (steps 1, 3, 9, 27 and 81 of 81 at 0, 1/4, 1/2, 3/4
    and 1), not crowded below a third as ``s / max_step`` has them (1/81 to 27/81), which
    left the fitted length scale of the column a gap of two thirds to bridge to a full run
    (lockstep, ``benchmarks/model_based_hyperband.py``: median compute to target 1,078 ->
    985 on its synthetic family, 20 seeds; 1,092 -> 671 on mlp, 8). *t* as it is while
    ``max_step`` is unknown (a snapshot of 0.2 restored, no result told since)."""
    if max_step is None or max_step < 2:
        return t
    steps = np.maximum(t * max_step, 1.0)
    column: NDArray[np.float64] = np.log(steps) / math.log(max_step)
    return column


class EarlyStopped:
    """Whether the campaign stops trials early (its ``max_step``, once an observation says
    it), and what follows: the fidelity column's scale and which proposals are random."""

    def __init__(self, random_fraction: float | None) -> None:
        self.random_fraction = random_fraction
        """The share of proposals drawn at random (``None``: the default,
        :data:`RANDOM_FRACTION` once the campaign stops trials early, else none)."""
        self.max_step: int | None = None
        """The campaign's ``max_step``; ``None`` until an observation carries it."""

    def note(self, max_step: int | None) -> None:
        """An observation's ``max_step``."""
        if max_step is not None and max_step > 0:
            self.max_step = max_step

    def restore(self, max_step: object) -> None:
        """Take *max_step* from a snapshot (one of 0.2 has none: ``None`` until the next
        result told brings it)."""
        self.max_step = None if max_step is None else int(str(max_step))

    def column(self, t: NDArray[np.float64]) -> NDArray[np.float64]:
        """The fidelity column of results at fidelities *t* (:func:`fidelity_column`)."""
        return fidelity_column(t, self.max_step)

    def explores(self, proposed: int) -> bool:
        """Whether the proposal after *proposed* ones is drawn at random: those whose count
        crosses a multiple of the inverse of the share (every third at 1/3)."""
        fraction = self.random_fraction
        if fraction is None:
            fraction = 0.0 if self.max_step is None else RANDOM_FRACTION
        return (math.floor((proposed + 1) * fraction + 1e-9)
                > math.floor(proposed * fraction + 1e-9))
