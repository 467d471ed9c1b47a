"""Where trials succeed: the Bayesian agent's model of failures, apart from its objective.

A failed trial says nothing about the objective's value there, only that the configuration
fails. Giving it the worst value seen (what the agent did before) bends the objective's model
upwards around every failure, so a good region at the edge of a failing one looks bad and is
walled off. Instead the objective model learns from successes alone, and this model learns
the probability that a configuration succeeds; the acquisition is expected improvement times
a power of that probability (constrained expected improvement: Gelbart, Snoek and Adams,
2014; Gardner et al., 2014, whose power is 1; ours, more cautious, is in
:mod:`dse_agents._acquisition`), added as logarithms.

The model is a Gaussian process regression on the labels (+1 success, -1 failure) with the
same kernel and priors as the objective's model, read through a probit: with the posterior
mean ``m`` and standard deviation ``s`` of the label at *x*,
``P(success) = Φ(κ m / sqrt(1 + κ² s²))``, κ = 3. At a success far from any failure
``m ≈ 1`` and ``s ≈ 0`` (P ≈ 0.999), at a failure P ≈ 0.001, halfway between a success and a
failure ``m ≈ 0`` (P ≈ 0.5: the edge stays reachable), and far from every point the
uncertainty pulls P towards one half. Label regression is the least-squares stand-in for a
GP classifier; it shares the objective model's code and costs one more fit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from scipy import special

from dse_agents._gp import GaussianProcess

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["SuccessModel"]

_KAPPA = 3.0
"""Steepness of the probit: the probability of success at an observed success is Φ(κ)."""


class SuccessModel:
    """The probability that a point of the unit cube succeeds (see the module docstring)."""

    def __init__(self, width: int) -> None:
        self.gp = GaussianProcess(width)
        self.fitted = False
        """Whether the last :meth:`fit` saw a failure (else every point is taken to succeed)."""

    def fit(
        self, x: NDArray[np.float64], succeeded: NDArray[np.bool_], *,
        fit_on: NDArray[np.intp] | None = None, restart: bool = True,
    ) -> None:
        """Learn from points *x* (n by width) and whether each *succeeded*."""
        self.fitted = bool((~succeeded).any())
        if not self.fitted:
            return
        labels = np.where(succeeded, 1.0, -1.0)
        self.gp.fit(x, labels, fit_on=fit_on, restart=restart)

    def log_probability(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """log P(success) at each row of *x* (0 where no failure was seen)."""
        if not self.fitted:
            return np.zeros(x.shape[0])
        mean, std = self.gp.predict(x)
        z = _KAPPA * mean / np.sqrt(1.0 + (_KAPPA * std) ** 2)
        result: NDArray[np.float64] = special.log_ndtr(z)
        return result

    def log_probability_gradient(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """log P(success) at each row of *x* and its gradient in *x* (m by width)."""
        if not self.fitted:
            return np.zeros(x.shape[0]), np.zeros_like(x)
        mean, std, dmean, dstd = self.gp.predict_gradient(x)
        root = np.sqrt(1.0 + (_KAPPA * std) ** 2)
        z = _KAPPA * mean / root
        # dz = κ dm / root - κ m κ² s ds / root³
        dz = (_KAPPA * dmean / root[:, None]
              - (_KAPPA**3 * mean * std / root**3)[:, None] * dstd)
        value = special.log_ndtr(z)
        # d log Φ(z) = φ(z) / Φ(z) dz, as exp(log φ - log Φ): no underflow far in the tail.
        ratio = np.exp(-0.5 * z**2 - 0.5 * math.log(2.0 * math.pi) - value)
        return value, ratio[:, None] * dz
