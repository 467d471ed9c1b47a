"""A Gaussian process for the Bayesian agent: Matérn 5/2 kernel with one length scale per
input column, hyperparameters by maximum a posteriori marginal likelihood, and log expected
improvement computed without underflow.

Inputs live in the unit cube (:mod:`dse_agents._encoding`); outputs are standardised before
fitting. Everything here is plain numpy and scipy.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import linalg, optimize, special

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy.typing import NDArray

__all__ = ["AtFullFidelity", "GaussianProcess", "log_expected_improvement",
           "log_expected_improvement_gradient"]

_SQRT5 = math.sqrt(5.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_JITTER = 1e-10
# Bounds of the log hyperparameters: length scales, signal variance, noise variance.
_LOG_LENGTH = (math.log(1e-2), math.log(2.0))
_LOG_LENGTH_SCALED = (math.log(1e-2), math.log(100.0))

_LOG_SIGNAL = (math.log(1e-2), math.log(1e2))
_LOG_NOISE = (math.log(1e-9), math.log(1.0))



def _matern(scaled_sq: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Matérn 5/2 of squared scaled distances, and the factor of its length-scale gradient:
    ``k = (1 + √5 r + 5/3 r²) e^{-√5 r}`` and ``g = 5/3 (1 + √5 r) e^{-√5 r}``, so that
    ``dk/dlog(l_d) = g (delta_d / l_d)^2``."""
    r = np.sqrt(np.maximum(scaled_sq, 0.0))
    e = np.exp(-_SQRT5 * r)
    k = (1.0 + _SQRT5 * r + (5.0 / 3.0) * scaled_sq) * e
    g = (5.0 / 3.0) * (1.0 + _SQRT5 * r) * e
    return k, g


def _matern_in_place(sq: NDArray[np.float64]) -> NDArray[np.float64]:
    """The ``k`` of :func:`_matern` of *sq* (non-negative squared scaled distances, a
    temporary: overwritten), bit for bit the same (the same operations in the same order, a
    sum's operands swapped), without the gradient factor nor most temporaries: what every
    prediction computes, on thousands of candidates by hundreds of points."""
    r = np.sqrt(sq)
    r *= _SQRT5  # √5 r
    e = np.negative(r)
    np.exp(e, out=e)  # e^{-√5 r}: (-√5) r is -(√5 r) exactly
    r += 1.0
    sq *= 5.0 / 3.0
    r += sq
    r *= e
    return r


_KEEP_ROWS = 512
"""Points predicted at once from which their cross-covariance with the data is kept."""


class _KeptCross:
    """The cross-covariance of a set of points with a model's data, and its triangular solve,
    for scoring the same points again once fantasies are added at the end of the data (a
    batch's later picks score the pool of the first): the first *rows* of the data and of
    the Cholesky factor are unchanged then, and so are the first rows of the solve."""

    def __init__(
        self, points: NDArray[np.float64], theta: NDArray[np.float64],
        data: NDArray[np.float64], chol: NDArray[np.float64], cross: NDArray[np.float64],
        v: NDArray[np.float64], explained: NDArray[np.float64],
    ) -> None:
        self.points, self.theta = points.copy(), theta.copy()
        self.data, self.chol = data.copy(), chol.copy()
        self.rows = int(data.shape[0])
        self.cross, self.v, self.explained = cross, v, explained

    def rows_for(
        self, points: NDArray[np.float64], theta: NDArray[np.float64],
        data: NDArray[np.float64], chol: NDArray[np.float64],
    ) -> int | None:
        """The rows of a model's *data* (with hyperparameters *theta* and Cholesky factor
        *chol*) this holds for *points*, or ``None`` if it holds none: other points, other
        hyperparameters, or data that do not extend the kept data."""
        rows: int = self.rows
        if (points.shape != self.points.shape or data.shape[0] < rows
                or not np.array_equal(theta, self.theta)
                or not np.array_equal(points, self.points)
                or not np.array_equal(data[:rows], self.data)
                # The factor's first rows are those of the kept data's factor, but for the
                # last bits of round-off (LAPACK blocks a larger matrix otherwise).
                or not np.allclose(chol[:rows, :rows], self.chol, rtol=1e-9, atol=1e-12)):
            return None
        return rows


class GaussianProcess:
    """A GP on points of the unit cube; :meth:`fit` then :meth:`predict`.

    Weak priors keep the fit sane with few points: on each inverse squared length scale a
    density falling off both ways from 1 (length scales are bounded to [0.01, 2] as well: a
    longer one would declare a parameter irrelevant), Gamma(2, 1) on the signal variance and
    Gamma(1.1, 30) on the noise variance, which may fall to 1e-9 (of the standardised
    variance): low enough to interpolate a deterministic objective's last digits. The
    hyperparameters are fitted with L-BFGS-B on the analytic gradient, started from the last
    fit and, now and then, from length scales of 1. The constant mean is the generalised
    least-squares estimate.
    """

    def __init__(self, width: int, *, scaled: bool = False) -> None:
        self.width = width
        self.scaled = scaled
        """Whether the length scales have the dimension-scaled prior of Hvarfner et al.
        (2024), log-normal with mean sqrt(2) + log(width)/2 and deviation sqrt(3), up to
        100 (for many columns: a column that does not matter may then be switched off),
        rather than the prior centred on 1, up to 2."""
        self._centre = np.concatenate([np.zeros(width), [0.0, math.log(1e-2)]])

        """Where a fit starts without a previous one: length scales and signal 1."""
        self._theta = self._centre.copy()
        self._x = np.zeros((0, width))
        self._y = np.zeros(0)
        self._mean = 0.0
        self._scale = 1.0
        self._chol: NDArray[np.float64] | None = None
        self._alpha = np.zeros(0)
        self._offset = 0.0
        self._inv_ones = np.zeros(0)
        self._kept: _KeptCross | None = None
        """The cross-covariance of the last large set of points predicted (a pool of
        candidates), reused while the data only grow by rows added at the end."""

    # -- fitting --------------------------------------------------------------------------

    def fit(
        self, x: NDArray[np.float64], y: NDArray[np.float64], *, optimise: bool = True,
        fit_on: NDArray[np.intp] | None = None, restart: bool = True,
    ) -> None:
        """Condition on points *x* (n by width) with values *y*; refit the hyperparameters
        unless *optimise* is false (then only the data change: a fantasy for a batch).

        :param fit_on: rows the hyperparameters are fitted on (default: all).
        :param restart: also start the fit from the prior's centre, not only the last fit.
        """
        self._mean = float(np.mean(y)) if y.size else 0.0
        scale = float(np.std(y)) if y.size > 1 else 1.0
        self._scale = scale if scale > 1e-12 else 1.0
        ys = (y - self._mean) / self._scale
        if optimise and y.size >= 2:
            rows = slice(None) if fit_on is None else fit_on
            self._theta = self._optimise(x[rows], ys[rows], restart=restart)
        self._x, self._y = x, ys
        self._factor()

    def _optimise(
        self, x: NDArray[np.float64], ys: NDArray[np.float64], *, restart: bool
    ) -> NDArray[np.float64]:
        diff_sq = (x[:, None, :] - x[None, :, :]) ** 2
        bounds = ([_LOG_LENGTH_SCALED if self.scaled else _LOG_LENGTH] * self.width
                  + [_LOG_SIGNAL, _LOG_NOISE])

        centre = self._centre
        best: tuple[float, NDArray[np.float64]] | None = None
        starts = (self._theta, centre) if restart else (self._theta,)
        options: dict[str, Any] = {"maxiter": 100}
        for start in starts:
            try:
                result = optimize.minimize(
                    self._neg_log_posterior, np.clip(start, *np.array(bounds).T),
                    args=(diff_sq, ys), jac=True, method="L-BFGS-B", bounds=bounds,
                    options=options,
                )
            except (linalg.LinAlgError, ValueError, FloatingPointError):
                continue
            if np.isfinite(result.fun) and (best is None or result.fun < best[0]):
                best = (float(result.fun), np.asarray(result.x, dtype=float))
        return best[1] if best is not None else self._theta

    def _neg_log_posterior(
        self, theta: NDArray[np.float64], diff_sq: NDArray[np.float64], ys: NDArray[np.float64]
    ) -> tuple[float, NDArray[np.float64]]:
        """Negative log marginal likelihood plus log prior, and its gradient in *theta*."""
        width = self.width
        lengths = np.exp(theta[:width])
        signal, noise = math.exp(theta[width]), math.exp(theta[width + 1])
        inverse_sq = 1.0 / lengths**2
        flat = diff_sq.reshape(-1, width)  # n * n by width: one product, no n * n * width temporary
        n = ys.size
        k, g = _matern((flat @ inverse_sq).reshape(n, n))
        cov = signal * k + (noise + _JITTER) * np.eye(n)
        try:
            chol = linalg.cholesky(cov, lower=True)
        except linalg.LinAlgError:
            return 1e25, np.zeros_like(theta)
        alpha = linalg.cho_solve((chol, True), ys)
        value = 0.5 * float(ys @ alpha) + float(np.log(np.diag(chol)).sum()) + n * _LOG_SQRT_2PI
        inverse, info = linalg.lapack.dpotri(chol, lower=1)
        if info != 0:
            return 1e25, np.zeros_like(theta)
        inverse = np.tril(inverse) + np.tril(inverse, -1).T
        inner = np.outer(alpha, alpha) - inverse
        grad = np.empty_like(theta)
        # dK/dlog(l_d) = s_f^2 g (delta_d/l_d)^2; d(-log p)/dt = -1/2 tr(inner dK/dt).
        weighted = inner * (signal * g)
        grad[:width] = -0.5 * (weighted.reshape(-1) @ flat) * inverse_sq
        grad[width] = -0.5 * float(np.sum(inner * (signal * k)))
        grad[width + 1] = -0.5 * float(np.trace(inner)) * noise
        # Weak priors (those of Optuna's GP): on the inverse squared length scale l^-2 a
        # density falling off both ways from 1, on the signal variance Gamma(2, 1), on the
        # noise variance Gamma(1.1, 30).
        sq = lengths**2
        if self.scaled:
            deviation = theta[:width] - (math.sqrt(2.0) + 0.5 * math.log(width))
            value += float(np.sum(deviation**2)) / 6.0
            grad[:width] += deviation / 3.0
        else:
            value += float(np.sum(0.1 * sq + 0.1 / sq))
            grad[:width] += 0.2 * sq - 0.2 / sq
        value -= math.log(signal) - signal
        grad[width] -= 1.0 - signal
        value -= 0.1 * math.log(noise) - 30.0 * noise
        grad[width + 1] -= 0.1 - 30.0 * noise
        return value, grad

    def _factor(self) -> None:
        x = self._x
        if x.shape[0] == 0:
            self._chol, self._alpha, self._offset = None, np.zeros(0), 0.0
            return
        cov = self._kernel(x, x)
        noise = math.exp(self._theta[self.width + 1])
        cov[np.diag_indices_from(cov)] += noise + _JITTER
        for extra in (0.0, 1e-6, 1e-4, 1e-2):
            try:
                self._chol = linalg.cholesky(cov + extra * np.eye(cov.shape[0]), lower=True)
                break
            except linalg.LinAlgError:
                continue
        else:  # pragma: no cover - the last jitter always makes it positive definite
            raise linalg.LinAlgError("covariance is not positive definite")
        # The constant mean by generalised least squares (ordinary kriging): clustered
        # points near an optimum count as one, so the mean far from the data is the
        # space's typical value rather than the average of where the search has been.
        ones = np.ones_like(self._y)
        inv_ones = linalg.cho_solve((self._chol, True), ones)
        self._inv_ones = inv_ones / float(inv_ones @ ones)
        self._offset = float(self._inv_ones @ self._y)
        self._alpha = linalg.cho_solve((self._chol, True), self._y - self._offset)

    def _kernel(self, a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
        lengths = np.exp(self._theta[: self.width])
        a_s, b_s = a / lengths, b / lengths
        sq = np.sum(a_s**2, axis=1)[:, None] + np.sum(b_s**2, axis=1)[None, :]
        sq -= 2.0 * a_s @ b_s.T
        np.maximum(sq, 0.0, out=sq)
        k = _matern_in_place(sq)
        k *= math.exp(self._theta[self.width])
        return k

    # -- warm start -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any] | None:
        """What outlives a :meth:`fit`, as JSON values: the hyperparameters the next fit
        starts from (``None`` if one is not finite). The data and the posterior are replaced
        by every fit."""
        if not np.isfinite(self._theta).all():
            return None
        return {"theta": self._theta.tolist()}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Start the next fit where the process that gave *state* would have."""
        theta = np.array(state["theta"], dtype=np.float64)
        if theta.shape != self._centre.shape:
            raise ValueError(f"the snapshot's hyperparameters are not for {self.width} columns")
        self._theta = theta

    # -- prediction -----------------------------------------------------------------------

    def predict(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Posterior mean and standard deviation at *x* (m by width), in the units of *y*."""
        if self._chol is None:
            return self._prior(x)
        cross, var = self._cross_variance(x)
        mean_s = cross @ self._alpha + self._offset
        return mean_s * self._scale + self._mean, np.sqrt(var) * self._scale

    def predict_gradient(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
               NDArray[np.float64]]:
        """Posterior mean and standard deviation at *x* (m by width) with their gradients in
        *x* (m by width each), in the units of *y*."""
        if self._chol is None:
            mean, std = self._prior(x)
            return mean, std, np.zeros_like(x), np.zeros_like(x)
        _, mean, std, dcross, dstd = self._gradient_parts(x)
        dmean = np.einsum("mnw,n->mw", dcross, self._alpha) * self._scale
        return mean, std, dmean, dstd

    def _gradient_parts(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
               NDArray[np.float64], NDArray[np.float64]]:
        """The cross-covariance of *x* with the data (m by n), the posterior mean and
        standard deviation, the cross-covariance's gradient in *x* (m by n by width) and
        the standard deviation's (m by width, units of *y*)."""
        assert self._chol is not None
        lengths = np.exp(self._theta[: self.width])
        signal = math.exp(self._theta[self.width])
        delta = x[:, None, :] - self._x[None, :, :]  # m by n by width
        k, g = _matern(np.sum((delta / lengths) ** 2, axis=2))
        cross = signal * k
        mean, std, v = self._posterior(cross)
        # dk(x, X_j)/dx = -s_f^2 g (x - X_j) / l^2
        dcross = -(signal * g)[:, :, None] * (delta / lengths**2)  # m by n by width
        w = linalg.solve_triangular(self._chol, v, lower=True, trans="T")  # K^-1 k, n by m
        # var = s_f^2 - k^T K^-1 k, so dvar/dx = -2 (dk/dx)^T K^-1 k.
        dvar = -2.0 * np.einsum("mnw,nm->mw", dcross, w)
        std_s = std / self._scale
        dstd = dvar / (2.0 * std_s[:, None]) * self._scale
        return cross, mean, std, dcross, dstd

    def joint(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Posterior mean (m) and covariance (m by m) of the latent function at *x*, in the
        units of *y*."""
        if self._chol is None:
            mean, std = self._prior(x)
            return mean, np.diag(std**2)
        cross = self._kernel(x, self._x)
        mean, _, v = self._posterior(cross)
        cov = self._kernel(x, x) - v.T @ v
        return mean, cov * self._scale**2

    def with_last(
        self, values: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The weights and offsets of the posterior means if the last k data values were each
        row of *values* (S by k, units of *y*) instead: for :meth:`means`."""
        assert self._chol is not None
        k = values.shape[1]
        ys = np.repeat(self._y[:, None], values.shape[0], axis=1)
        ys[ys.shape[0] - k:, :] = ((values - self._mean) / self._scale).T
        offsets = self._inv_ones @ ys
        alphas = linalg.cho_solve((self._chol, True), ys - offsets[None, :])
        return alphas, offsets

    def means(
        self, x: NDArray[np.float64], alphas: NDArray[np.float64], offsets: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Posterior means at *x* under each set of values of :meth:`with_last` (m by S) and
        the standard deviation (m), in the units of *y*."""
        cross, var = self._cross_variance(x)
        means = (cross @ alphas + offsets[None, :]) * self._scale + self._mean
        return means, np.sqrt(var) * self._scale

    def means_gradient(
        self, x: NDArray[np.float64], alphas: NDArray[np.float64], offsets: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
               NDArray[np.float64]]:
        """:meth:`means` with the gradients in *x*: of each mean (m by S by width) and of the
        standard deviation (m by width)."""
        cross, _, std, dcross, dstd = self._gradient_parts(x)
        means = (cross @ alphas + offsets[None, :]) * self._scale + self._mean
        dmeans = np.einsum("mnw,ns->msw", dcross, alphas) * self._scale
        return means, std, dmeans, dstd

    def _prior(self, x: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        signal = math.exp(self._theta[self.width])
        return (np.full(x.shape[0], self._mean),
                np.full(x.shape[0], math.sqrt(signal) * self._scale))

    def _cross_variance(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The cross-covariance of *x* (m by width) with the data (m by n) and the posterior
        variance at *x* (standardised units). For the points kept by :class:`_KeptCross`
        (a pool of candidates scored again after fantasies were added to the data) only the
        added rows are computed."""
        assert self._chol is not None
        signal = math.exp(self._theta[self.width])
        kept = self._kept
        rows = (None if kept is None
                else kept.rows_for(x, self._theta, self._x, self._chol))
        if kept is not None and rows is not None:
            if rows == self._x.shape[0]:
                return kept.cross, np.maximum(signal - kept.explained, 1e-12)
            added = self._kernel(x, self._x[rows:])
            v_added = linalg.solve_triangular(
                self._chol[rows:, rows:], added.T - self._chol[rows:, :rows] @ kept.v,
                lower=True)
            var = signal - kept.explained - np.sum(v_added**2, axis=0)
            return np.hstack([kept.cross, added]), np.maximum(var, 1e-12)
        cross = self._kernel(x, self._x)
        v = linalg.solve_triangular(self._chol, cross.T, lower=True)
        explained = np.sum(v**2, axis=0)
        if x.shape[0] >= _KEEP_ROWS:
            self._kept = _KeptCross(x, self._theta, self._x, self._chol, cross, v, explained)
        return cross, np.maximum(signal - explained, 1e-12)

    def _posterior(
        self, cross: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """Mean and standard deviation (units of *y*) from the cross-covariance of m points
        with the data (m by n), and ``L^-1 cross^T`` (n by m), which the gradient reuses."""
        assert self._chol is not None
        signal = math.exp(self._theta[self.width])
        mean_s = cross @ self._alpha + self._offset
        v = linalg.solve_triangular(self._chol, cross.T, lower=True)
        var = np.maximum(signal - np.sum(v**2, axis=0), 1e-12)
        return mean_s * self._scale + self._mean, np.sqrt(var) * self._scale, v

    @property
    def length_scales(self) -> NDArray[np.float64]:
        result: NDArray[np.float64] = np.exp(self._theta[: self.width])
        return result


def log_expected_improvement(
    mean: NDArray[np.float64], std: NDArray[np.float64], best: float | NDArray[np.float64]
) -> NDArray[np.float64]:
    """log E[max(best - f, 0)] for f ~ N(mean, std²) (minimisation), accurate where the
    improvement is astronomically unlikely (no ``log(0)``): ``log(std) + log h(z)`` with
    ``z = (best - mean) / std`` and ``h(z) = φ(z) + z Φ(z)``, through ``erfcx`` for z < 0 and
    its asymptotic series far in the tail."""
    z = (best - mean) / std
    out = np.empty_like(z)
    pos = z >= 0
    zp = z[pos]
    out[pos] = np.log(zp * special.ndtr(zp) + np.exp(-0.5 * zp**2) / math.sqrt(2 * math.pi))
    neg = ~pos
    zn = z[neg]
    mid = zn > -30.0
    res = np.empty_like(zn)
    zm = zn[mid]
    # h(z) = e^{-z²/2} (1/√(2π) + z/2 · erfcx(-z/√2)), the bracket being positive.
    bracket = 1.0 / math.sqrt(2 * math.pi) + 0.5 * zm * special.erfcx(-zm / math.sqrt(2.0))
    res[mid] = -0.5 * zm**2 + np.log(np.maximum(bracket, 1e-300))
    zt = zn[~mid]
    # Far tail: h(z) ≈ φ(z) / z² (1 - 3/z² + 15/z⁴).
    res[~mid] = (-0.5 * zt**2 - _LOG_SQRT_2PI - 2.0 * np.log(-zt)
                 + np.log1p(-3.0 / zt**2 + 15.0 / zt**4))
    out[neg] = res
    result: NDArray[np.float64] = out + np.log(std)
    return result


def log_expected_improvement_gradient(
    mean: NDArray[np.float64], std: NDArray[np.float64], dmean: NDArray[np.float64],
    dstd: NDArray[np.float64], best: float | NDArray[np.float64],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Log EI (see :func:`log_expected_improvement`) and its gradient, given the gradients
    of the posterior mean and standard deviation (the shape of *mean* by width; *best*
    broadcast against *mean*): with ``h' = Φ``,
    ``d log EI = ds/s + Φ(z)/h(z) · dz`` and ``dz = -(dm + z ds)/s`` (m the mean, s the
    standard deviation)."""
    value = log_expected_improvement(mean, std, best)
    z = (best - mean) / std
    # Φ(z)/h(z) = exp(log Φ(z) - log h(z)), log h = log EI - log s: no underflow in the tail.
    ratio = np.exp(special.log_ndtr(z) - (value - np.log(std)))
    dz = -(dmean + z[..., None] * dstd) / std[..., None]
    grad = dstd / std[..., None] + ratio[..., None] * dz
    return value, grad


class AtFullFidelity:
    """A :class:`GaussianProcess` whose last input column is the fidelity of a result
    (``step / max_step`` of a trial stopped early, 1 for a full run), seen at fidelity 1:
    what the acquisition asks about a point of the space (m by ``width``, the fidelity
    column left out) is what the model predicts of its full run."""

    def __init__(self, gp: GaussianProcess) -> None:
        self.gp = gp
        self.width = gp.width - 1

    def full(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """*x* (m by ``width``) with the fidelity column at 1."""
        return np.hstack([x, np.ones((x.shape[0], 1))])

    def predict(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return self.gp.predict(self.full(x))

    def predict_gradient(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
               NDArray[np.float64]]:
        mean, std, dmean, dstd = self.gp.predict_gradient(self.full(x))
        return mean, std, dmean[:, :-1], dstd[:, :-1]

    def joint(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return self.gp.joint(self.full(x))

    def with_last(
        self, values: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return self.gp.with_last(values)

    def means(
        self, x: NDArray[np.float64], alphas: NDArray[np.float64], offsets: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return self.gp.means(self.full(x), alphas, offsets)

    def means_gradient(
        self, x: NDArray[np.float64], alphas: NDArray[np.float64], offsets: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
               NDArray[np.float64]]:
        means, std, dmeans, dstd = self.gp.means_gradient(self.full(x), alphas, offsets)
        return means, std, dmeans[..., :-1], dstd[:, :-1]

    @property
    def length_scales(self) -> NDArray[np.float64]:
        return self.gp.length_scales[:-1]
