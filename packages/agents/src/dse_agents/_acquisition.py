"""What the Bayesian agent maximises, and how it finds the maximum.

:class:`Acquisition` is log expected improvement under the objective's model, plus, once a
trial has failed, the log probability that the point succeeds
(:class:`dse_agents._feasibility.SuccessModel`). :class:`Maximiser` finds its best points:
random candidates over the whole space and perturbations of the best points seen, the best of
each climbed by rounds of shrinking random steps, then polished together by L-BFGS-B on the
analytic gradient. In a conditional space every candidate is scored as the point it stands
for (:meth:`dse_agents._encoding.Encoding.canonical`: its inactive columns as encoding sets
them), and the gradient moves its active columns only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import numpy as np
from scipy import optimize, special

from dse_agents._gp import log_expected_improvement, log_expected_improvement_gradient

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from dse_agents._encoding import Encoding
    from dse_agents._feasibility import SuccessModel

__all__ = ["CAUTION", "Acquisition", "Maximiser", "Model", "Surface"]

CAUTION = 8.0
"""The weight of log P(success) in the acquisition: EI * P(success)^8. With weight 1 (the
textbook constrained EI) the agent failed a third more trials than when failures counted as
the worst value (18.1 against 13.6 of 60 on Branin with an unknown constraint, P = 4 waves,
8 seeds); with 8, 12.4, its regret unchanged (3e-7 against 5e-3 before). The price, on a
failure edge with a decoy basin away from it (search_quality's ``edge4``, P = 4 waves, 40
seeds): half the runs end on the decoy (21 of 40; 19-22 with a weight of 1, 2 or 4). Only
the textbook rule as a whole (weight 1, and no failure in the objective's model) left it more
often, 13 of 40, and it failed 11.2 trials of 60 there (3.9 now) and 34.8 on constrained
Branin (10.8 now; 20 seeds)."""
_POLISH_FAR = 8
_POLISH_NEAR = 2


class Model(Protocol):
    """What the acquisition asks of the objective's model."""

    def predict(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]: ...

    def predict_gradient(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
               NDArray[np.float64]]: ...

    @property
    def length_scales(self) -> NDArray[np.float64]: ...

    def joint(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]: ...

    def with_last(
        self, values: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]: ...

    def means(
        self, x: NDArray[np.float64], alphas: NDArray[np.float64], offsets: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]: ...

    def means_gradient(
        self, x: NDArray[np.float64], alphas: NDArray[np.float64], offsets: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
               NDArray[np.float64]]: ...


class Surface(Protocol):
    """What :class:`Maximiser` climbs: a score per candidate (higher is better), its gradient
    (for polishing), and the length scales its steps are sized by."""

    @property
    def length_scales(self) -> NDArray[np.float64]: ...

    def __call__(self, x: NDArray[np.float64]) -> NDArray[np.float64]: ...

    def with_gradient(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]: ...


class Acquisition:
    """log EI over *best* under *model*, plus ``CAUTION`` times log P(success) under
    *success* if given."""

    def __init__(self, model: Model, best: float, success: SuccessModel | None = None) -> None:
        self.model = model
        self.best = best
        self.success = success if success is not None and success.fitted else None
        self._alphas: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None
        self._bests = np.zeros(0)

    def fantasise(
        self, base: Model, points: NDArray[np.float64], rng: np.random.Generator,
        samples: int = 32,
    ) -> None:
        """Make this the expected improvement that a point adds to *points* (the batch
        picked so far and the trials in flight, the last rows of the model's data at their
        believed means), averaged over joint samples of their values under *base* (the
        model without them): q-EI picked greedily, each sample with its own incumbent."""
        mean, cov = base.joint(points)
        k = len(points)
        jitter = 1e-9 * max(float(np.max(np.diag(cov))), 1e-12) + 1e-12
        try:
            root = np.linalg.cholesky(cov + jitter * np.eye(k))
        except np.linalg.LinAlgError:
            # Points in flight a hair apart where the model is nearly sure (a search that
            # converged): round-off leaves eigenvalues a little below zero, beyond a jitter
            # relative to variances that small. Any square root samples the same law.
            eigen, vectors = np.linalg.eigh(cov)
            root = vectors * np.sqrt(np.clip(eigen, 0.0, None))
        values = mean[None, :] + rng.standard_normal((samples, k)) @ root.T
        self._alphas = self.model.with_last(values)
        self._bests = np.minimum(self.best, values.min(axis=1))

    @property
    def length_scales(self) -> NDArray[np.float64]:
        return self.model.length_scales

    def __call__(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        if self._alphas is not None:
            means, std = self.model.means(x, *self._alphas)
            stds = np.broadcast_to(std[:, None], means.shape)
            logs = log_expected_improvement(means, stds, self._bests[None, :])
            value: NDArray[np.float64] = (special.logsumexp(logs, axis=1)
                                          - math.log(means.shape[1]))
        else:
            mean, std = self.model.predict(x)
            value = log_expected_improvement(mean, std, self.best)
        if self.success is not None:
            value = value + CAUTION * self.success.log_probability(x)
        return value

    def with_gradient(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        if self._alphas is not None:
            means, std, dmeans, dstd = self.model.means_gradient(x, *self._alphas)
            stds = np.broadcast_to(std[:, None], means.shape)
            logs, grads = log_expected_improvement_gradient(
                means, stds, dmeans, dstd[:, None, :], self._bests[None, :])
            value = special.logsumexp(logs, axis=1) - math.log(means.shape[1])
            # d log mean_s e^{l_s} = sum_s softmax(l)_s dl_s
            weights = np.exp(logs - special.logsumexp(logs, axis=1, keepdims=True))
            grad = np.einsum("ms,msw->mw", weights, grads)
        else:
            mean, std, dmean, dstd = self.model.predict_gradient(x)
            value, grad = log_expected_improvement_gradient(mean, std, dmean, dstd, self.best)
        if self.success is not None:
            log_p, dlog_p = self.success.log_probability_gradient(x)
            value, grad = value + CAUTION * log_p, grad + CAUTION * dlog_p
        return value, grad


class _AsEncoded:
    """*acq* of the points candidates stand for in a conditional space (their inactive
    columns as encoding sets them), its gradient on their active columns only."""

    def __init__(self, acq: Surface, enc: Encoding) -> None:
        self._acq = acq
        self._enc = enc

    @property
    def length_scales(self) -> NDArray[np.float64]:
        return self._acq.length_scales

    def __call__(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        return self._acq(self._enc.canonical(x))

    def with_gradient(
        self, x: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        value, grad = self._acq.with_gradient(self._enc.canonical(x))
        return value, np.where(self._enc.free(x), grad, 0.0)


class Maximiser:
    """Finds the points of highest acquisition in the unit cube of *enc* (seeded by *rng*)."""

    def __init__(self, enc: Encoding, rng: np.random.Generator, candidates: int) -> None:
        self._enc = enc
        self._rng = rng
        self._candidates = candidates
        cols = int((~enc.categorical).sum())
        self._lo, self._hi = np.zeros(cols), np.ones(cols)
        """The box the numeric columns are searched in: the cube, or a trust region."""
        self._pool: NDArray[np.float64] | None = None
        """The candidates of this batch's first pick, scored again for its later picks: the
        model keeps their covariance with its data, so a later pick pays only for the rows
        its fantasies added (see :meth:`new_batch`)."""

    def new_batch(self) -> None:
        """Start a batch: the next :meth:`ranked` draws new candidates, the later ones of the
        batch score the same (the data, the best points and the box are those of the first
        pick; only the fantasies differ)."""
        self._pool = None

    def ranked(
        self, acq: Surface, x: NDArray[np.float64], y: NDArray[np.float64],
        box: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
        *, polish: bool = True,
    ) -> list[NDArray[np.float64]]:
        """Candidate points, the most promising first, given the points *x* seen with their
        losses *y* (the best of them are where local candidates gather), the numeric
        columns within *box* (low and high corners; default the whole cube). The climbed
        starts are polished by L-BFGS-B unless *polish* is false (a wave's later picks)."""
        enc = self._enc
        cols = int((~enc.categorical).sum())
        self._lo, self._hi = box if box is not None else (np.zeros(cols), np.ones(cols))
        if enc.conditional:
            acq = _AsEncoded(acq, enc)
        count = self._candidates
        if self._pool is None:
            self._pool = self._draw(acq, x, y)
        pool = self._pool
        score = acq(pool)
        # Polish from the best random candidates (peaks anywhere in the space) and from the
        # best near the observed optimum: the far peaks are how the model leaves a basin.
        randoms = np.argsort(-score[:count], kind="stable")[:_POLISH_FAR]
        near = count + np.argsort(-score[count:], kind="stable")[:_POLISH_NEAR]
        # The best observed point too: refining the optimum found is most often best.
        starts = np.vstack([pool[np.concatenate([randoms, near])], x[np.argmin(y)][None, :]])
        # Every start climbs by rounds of shrinking random steps (all starts in one
        # prediction per round), then all are polished together by L-BFGS-B on the gradient.
        climbed, values = self._climb(acq, starts)
        polished, finals = (self._polish(acq, climbed, values) if polish
                            else (climbed, values))
        polished = enc.canonical(polished)
        ranked = [polished[i] for i in np.argsort(-finals, kind="stable")]
        order = np.argsort(-score, kind="stable")
        return ranked + [pool[i] for i in order[: 4 * enc.width + 64]]

    def _draw(
        self, acq: Surface, x: NDArray[np.float64], y: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Random candidates over the box and perturbations of the best points seen."""
        enc, rng = self._enc, self._rng
        dims, width = enc.dims, enc.width
        numeric = ~enc.categorical
        count = self._candidates
        spread = enc.from_unit(rng.random((count, dims)))
        spread[:, numeric] = self._lo + spread[:, numeric] * (self._hi - self._lo)
        cands = [spread]
        # Around the best points: small steps on the numeric columns, a few choices flipped.
        top = x[np.argsort(y, kind="stable")[:5]]
        scales = np.clip(acq.length_scales, 0.01, 1.0)
        per = max(count // (2 * len(top)), 8)
        for centre in top:
            moved = np.repeat(centre[None, :], per, axis=0)
            if enc.conditional:  # the params of a branch the centre is not in: anywhere
                moved = np.where(enc.free(moved), moved, enc.from_unit(rng.random((per, dims))))
            step = rng.normal(0.0, 1.0, (per, width)) * scales * rng.choice(
                [0.05, 0.2, 0.5], size=(per, 1))
            moved[:, numeric] = np.clip(moved[:, numeric] + step[:, numeric],
                                        self._lo, self._hi)
            flips = enc.from_unit(rng.random((per, dims)))
            flip = rng.random((per, 1)) < 0.2
            moved[:, ~numeric] = np.where(flip, flips[:, ~numeric], moved[:, ~numeric])
            cands.append(moved)
        return enc.canonical(np.vstack(cands))

    def _climb(
        self, acq: Surface, starts: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Rounds of seeded steps on the numeric columns of every start (choices kept),
        shrinking, each start keeping the best point it found: vectorised across starts."""
        numeric = ~self._enc.categorical
        points = starts.copy()
        values = acq(points)
        if not numeric.any():
            return points, values
        scales = np.clip(acq.length_scales[numeric], 0.01, 1.0)
        k, per = len(points), 32
        for shrink in (0.3, 0.1, 0.03, 0.01, 0.003):
            moved = np.repeat(points, per, axis=0)
            step = self._rng.normal(0.0, 1.0, (k * per, int(numeric.sum()))) * scales * shrink
            moved[:, numeric] = np.clip(moved[:, numeric] + step, self._lo, self._hi)
            tried = acq(moved).reshape(k, per)
            pick = np.argmax(tried, axis=1)
            better = tried[np.arange(k), pick] > values
            chosen = moved.reshape(k, per, -1)[np.arange(k), pick]
            points[better] = chosen[better]
            values[better] = tried[np.arange(k), pick][better]
        return points, values

    def _polish(
        self, acq: Surface, starts: NDArray[np.float64], values: NDArray[np.float64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """L-BFGS-B on the numeric columns of every start at once (their choices kept), on the
        analytic gradient, in coordinates scaled by the length scales (so that every
        direction is equally curved); a start keeps its point where polishing did not help."""
        numeric = ~self._enc.categorical
        if not numeric.any():
            return starts, values
        k, cols = len(starts), int(numeric.sum())
        lengths = np.clip(acq.length_scales[numeric], 1e-3, None)
        points = starts.copy()

        def negative(z: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
            points[:, numeric] = np.clip(z.reshape(k, cols) * lengths, self._lo, self._hi)
            value, grad = acq.with_gradient(points)
            return -float(value.sum()), -(grad[:, numeric] * lengths).reshape(-1)

        lower, upper = np.tile(self._lo / lengths, k), np.tile(self._hi / lengths, k)
        result = optimize.minimize(
            negative, (starts[:, numeric] / lengths).reshape(-1), jac=True, method="L-BFGS-B",
            bounds=list(zip(lower, upper, strict=True)),
            options={"maxiter": 200},
        )
        points[:, numeric] = np.clip(result.x.reshape(k, cols) * lengths, self._lo, self._hi)
        finals = acq(points)
        keep = ~(finals > values)  # also where polishing gave NaN
        points[keep], finals[keep] = starts[keep], values[keep]
        return points, finals
