"""The Bayesian agent: a Gaussian-process surrogate that proposes whole batches.

* **Space**: the unit cube of :class:`dse_agents._encoding.Encoding` (log-scaled parameters
  on their log scale, integers and stepped floats snapped to their grid, categoricals
  one-hot).
* **Start**: a seeded Latin hypercube (``initial`` points, default ``max(6, 2 * params)``).
* **Model**: Matérn 5/2 with a length scale per column, hyperparameters by maximum a
  posteriori marginal likelihood on standardised scores, the noise allowed down to 1e-9 so
  that a deterministic objective is interpolated (:mod:`dse_agents._gp`). Failed
  trials and rejected proposals are given the worst score seen, so the model learns where
  not to go. Beyond ``max_points`` observations it fits a subsample (the best third and a
  seeded draw of the rest), which keeps a batch well under a second at 1,000 observations.
* **Trials stopped early**: a loss at step *s* of ``max_step`` is a result at fidelity
  ``s / max_step``. With such results the model takes the fidelity as one more input column
  (1 for full runs, failures and rejections) and the acquisition asks it about full runs
  (:class:`dse_agents._gp.AtFullFidelity`). A trial told again (stopped, promoted, then
  stopped higher or run to its end) replaces its earlier result.
* **Acquisition**: log expected improvement over the best posterior mean of the observed
  points (robust to noise), maximised over random candidates and perturbations of the best
  points: the best of each (a far peak is how the model leaves a basin it has settled in)
  climb, then are polished together by L-BFGS-B on the analytic gradient.
* **Batches**: the trials in flight and the points already picked for the batch are added
  as fantasies at their posterior mean (the kriging believer), so the variance collapses
  there and a wave of *P* gets *P* distinct points, never one already proposed.

Seeded and deterministic: the same seed and the same calls give the same proposals.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from scipy import optimize
from threadpoolctl import ThreadpoolController

from dse import TrialStatus
from dse_agents._encoding import Encoding
from dse_agents._gp import (
    AtFullFidelity,
    GaussianProcess,
    log_expected_improvement,
    log_expected_improvement_gradient,
)
from dse_agents._options import need_int, reject_unknown

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from numpy.typing import NDArray

    from dse import Observation, Space

__all__ = ["BayesianAgent"]

_THREADS: list[ThreadpoolController] = []


def _one_blas_thread() -> Any:
    """A context in which BLAS runs on one thread: the model's matrices are small (at most
    ``max_points`` rows), and BLAS threads fighting over the cores with other work made a
    fit a hundred times slower on a busy 2-core machine."""
    if not _THREADS:
        _THREADS.append(ThreadpoolController())
    return _THREADS[0].limit(limits=1, user_api="blas")

_OPTIONS = ("initial", "candidates", "max_points")
_POLISH_FAR = 8
_POLISH_NEAR = 2
_FIT_POINTS = 120
"""Most observations the hyperparameters are fitted on (the posterior uses up to
``max_points``)."""


def latin_hypercube(dims: int, n: int, seed: int) -> NDArray[np.float64]:
    """*n* points of a scrambled Latin hypercube in the unit cube of *dims* dimensions, seeded:
    each dimension's n strata in a seeded order, a seeded point within each. The points of
    ``scipy.stats.qmc.LatinHypercube(d=dims, seed=seed).random(n)`` (a test checks they are
    the same), without importing ``scipy.stats``: a second of CPU at every start."""
    rng = np.random.default_rng(seed)
    within = rng.uniform(size=(n, dims))
    strata = np.tile(np.arange(1, n + 1), (dims, 1))
    for dimension in strata:  # each row a view: shuffled in place
        rng.shuffle(dimension)
    points: NDArray[np.float64] = (strata.T - within) / n
    return points


def _learnt(obs: Observation) -> tuple[float | None, float] | None:
    """What *obs* teaches: its loss (``None`` for a failure or a rejection, which count as
    the worst loss seen) and the fidelity of that loss; ``None`` when it teaches nothing (an
    interrupted, cancelled or over-budget trial, a result about other data, a trial stopped
    at a step the observation does not say)."""
    if obs.rejected is not None or obs.status is TrialStatus.FAILED:
        return None, 1.0
    loss = obs.loss
    if loss is None:
        return None
    if obs.status is TrialStatus.COMPLETED:
        return float(loss), 1.0
    if obs.status is TrialStatus.STOPPED:
        step, max_step = obs.step, obs.max_step
        if step is None or max_step is None or step <= 0 or max_step <= 0:
            return None
        return float(loss), min(step / max_step, 1.0)
    return None


def _exact(value: object) -> bool:
    """Whether JSON gives *value* back as the same value of the same type."""
    if type(value) is float:
        return math.isfinite(value)
    return type(value) in (int, str, bool)


class BayesianAgent:
    """Gaussian-process Bayesian optimisation with batch proposals (see the module docstring).

    Options (``[agent.bayesian]``): ``initial`` (design points before the model, default
    ``max(6, 2 * parameters)``), ``candidates`` (random candidates per pick, default 2048),
    ``max_points`` (observations the model is fitted on, default 300).
    """

    name: ClassVar[str] = "bayesian"
    version: ClassVar[str] = "0.1.0"

    def __init__(self, space: Space, *, seed: int = 0, **options: Any) -> None:
        unknown = {k: v for k, v in options.items() if k not in _OPTIONS}
        reject_unknown(self.name, unknown, _OPTIONS)
        self._enc = Encoding(space)
        self._initial = need_int(self.name, "initial", options.get(
            "initial", max(6, 2 * len(space))), minimum=1)
        self._candidates = need_int(self.name, "candidates",
                                    options.get("candidates", 2048), minimum=16)
        self._max_points = need_int(self.name, "max_points",
                                    options.get("max_points", 300), minimum=10)
        self._rng = np.random.default_rng(seed)
        self._design = list(latin_hypercube(self._enc.dims, self._initial, seed))
        self._size = space.cardinality
        self._gp = GaussianProcess(self._enc.width)
        self._gp_fidelity: GaussianProcess | None = None
        """The model with the fidelity as an extra column, made at the first fit on a
        result of a trial stopped early (its hyperparameters warm-start the next fit)."""
        self._model: GaussianProcess | AtFullFidelity = self._gp
        """What the acquisition asks: the model of the last fit, at full fidelity."""
        self._x: list[NDArray[np.float64]] = []
        self._y: list[float | None] = []
        """Loss of each observed point; ``None`` for a failure or a rejection."""
        self._t: list[float] = []
        """Fidelity of each loss: ``step / max_step`` for a trial stopped early, else 1."""
        self._trials: dict[int, int] = {}
        """Trial number -> its entry in ``_x``: a trial told again (stopped, promoted, then
        stopped higher or completed) replaces what it said before."""
        self._seen: set[tuple[Any, ...]] = set()
        """Every point proposed (or observed): never proposed again."""
        self._proposed = 0
        self._fits = 0
        self._fantasy: tuple[NDArray[np.float64], NDArray[np.float64]] = (
            np.zeros((0, self._enc.width)), np.zeros(0))
        """The points and losses the model is conditioned on, fantasies included."""

    @property
    def exhausted(self) -> bool:
        return self._size is not None and len(self._seen) >= self._size

    # -- the protocol ---------------------------------------------------------------------

    def propose(
        self, n: int, in_flight: Sequence[Mapping[str, Any]] = ()
    ) -> list[dict[str, Any]]:
        with _one_blas_thread():
            return self._propose(n, in_flight)

    def _propose(
        self, n: int, in_flight: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        enc = self._enc
        pending = [enc.encode(p) for p in in_flight]
        for p in in_flight:
            self._seen.add(enc.key(p))
        model: tuple[NDArray[np.float64], NDArray[np.float64], float] | None = None
        while len(out) < n and not self.exhausted:
            if self._proposed < self._initial or self._successes() < 2:
                params = self._from_design()
            else:
                if model is None:
                    model = self._fit(pending)
                params = self._from_model(model)
            if params is None:
                break
            self._seen.add(enc.key(params))
            self._proposed += 1
            point = enc.encode(params)
            pending.append(point)
            out.append(params)
            if model is not None and len(out) < n:
                self._believe(point)
        return out

    def observe(self, observations: Sequence[Observation]) -> None:
        enc = self._enc
        for obs in observations:
            learnt = _learnt(obs)
            if learnt is None:
                continue  # interrupted, cancelled, out of budget, other data: nothing learnt
            loss, fidelity = learnt
            try:
                x = enc.encode(obs.params)
            except (KeyError, ValueError, TypeError):
                continue  # a rejected proposal outside the space: no point to learn from
            self._seen.add(enc.key(obs.params))
            number = obs.trial_number
            entry = self._trials.get(number) if number is not None else None
            if entry is not None and np.array_equal(self._x[entry], x):
                # The same trial told again: its later result replaces the earlier.
                self._y[entry], self._t[entry] = loss, fidelity
                continue
            if number is not None:
                self._trials[number] = len(self._x)
            self._x.append(x)
            self._y.append(loss)
            self._t.append(fidelity)

    def snapshot(self) -> dict[str, Any] | None:
        """The agent's state as JSON values: the generator, the rest of the initial design,
        the points observed with their losses, every point proposed or seen, the counts, and
        the model's hyperparameters (the next fit starts from them). The model's posterior
        and its fantasies are left out: every ``propose`` that consults the model fits it
        first. ``None`` when a loss or a param value is not a finite float, an int, a string
        or a bool (JSON cannot hold it exactly; the engine never tells one)."""
        gp = self._gp.snapshot()
        fidelity = None if self._gp_fidelity is None else self._gp_fidelity.snapshot()
        exact = (all(_exact(v) for key in self._seen for _, v in key)
                 and all(y is None or _exact(y) for y in self._y)
                 and all(np.isfinite(x).all() for x in self._x))
        if gp is None or (self._gp_fidelity is not None and fidelity is None) or not exact:
            return None
        return {
            "rng": dict(self._rng.bit_generator.state),
            "design": [u.tolist() for u in self._design],
            "x": [x.tolist() for x in self._x],
            "y": list(self._y),
            "t": list(self._t),
            "trials": sorted([number, entry] for number, entry in self._trials.items()),
            # (type name, value) pairs, as Encoding.key makes them: JSON gives each value
            # back as the same type, so membership tests answer as before.
            "seen": [[list(pair) for pair in key] for key in self._seen],
            "proposed": self._proposed,
            "fits": self._fits,
            "gp": gp,
            "gp_fidelity": fidelity,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Become the agent that gave *state* (a :meth:`snapshot`, through JSON)."""
        design = [np.array(u, dtype=np.float64) for u in state["design"]]
        if any(u.shape != (self._enc.dims,) for u in design):
            raise ValueError(f"the snapshot's design is not of {self._enc.dims} parameters")
        self._gp.restore(state["gp"])
        self._gp_fidelity = None
        if state.get("gp_fidelity") is not None:  # a snapshot of 0.1.0 has none
            self._gp_fidelity = GaussianProcess(self._enc.width + 1)
            self._gp_fidelity.restore(state["gp_fidelity"])
        self._rng.bit_generator.state = state["rng"]
        self._design = design
        self._x = [np.array(x, dtype=np.float64) for x in state["x"]]
        self._y = [None if y is None else float(y) for y in state["y"]]
        self._t = [float(t) for t in state.get("t", [1.0] * len(self._y))]
        self._trials = {int(number): int(entry) for number, entry in state.get("trials", [])}
        self._seen = {tuple((str(name), value) for name, value in key)
                      for key in state["seen"]}
        self._proposed, self._fits = int(state["proposed"]), int(state["fits"])

    # -- proposals ------------------------------------------------------------------------

    def _successes(self) -> int:
        return sum(1 for y in self._y if y is not None)

    def _from_design(self) -> dict[str, Any] | None:
        """The next point of the initial Latin hypercube not proposed yet; past the design
        (the model still lacks two results), a seeded random one."""
        while self._design:
            params = self._enc.decode(self._enc.from_unit(self._design.pop(0))[0])
            if self._enc.key(params) not in self._seen:
                return params
        return self._any_unseen()

    def _any_unseen(self) -> dict[str, Any] | None:
        """A seeded random point not proposed yet, if the space still has one."""
        for _ in range(1024):
            u = self._rng.random(self._enc.dims)
            params = self._enc.decode(self._enc.from_unit(u)[0])
            if self._enc.key(params) not in self._seen:
                return params
        return None

    def _training_set(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Observed points and losses, failures at the worst loss, subsampled if many; with
        the fidelity as a last column when a result is of a trial stopped early."""
        ok = [y for y in self._y if y is not None]
        worst = max(ok)
        x = np.array(self._x)
        if min(self._t) < 1.0:
            x = np.hstack([x, np.array(self._t)[:, None]])
        y = np.array([worst if v is None else v for v in self._y])
        if len(y) > self._max_points:
            order = np.argsort(y, kind="stable")
            best = order[: self._max_points // 3]
            rest = self._rng.choice(order[self._max_points // 3 :],
                                    self._max_points - best.size, replace=False)
            keep = np.sort(np.concatenate([best, rest]))
            x, y = x[keep], y[keep]
        return x, y

    def _fit(
        self, pending: list[NDArray[np.float64]]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
        """Fit the model to the observations, then add *pending* (trials in flight, points
        already picked) as fantasies; (points, losses, best posterior mean of the points)."""
        x, y = self._training_set()
        fit_on = None
        if len(y) > _FIT_POINTS:
            fit_on = np.sort(self._rng.choice(len(y), _FIT_POINTS, replace=False))
        self._fits += 1
        gp = self._gp
        if x.shape[1] > self._enc.width:  # results of trials stopped early: fidelity column
            if self._gp_fidelity is None:
                self._gp_fidelity = GaussianProcess(self._enc.width + 1)
            gp = self._gp_fidelity
        # From the prior's centre as well as from the last fit, now and then (escapes a
        # local optimum the warm start would keep).
        gp.fit(x, y, fit_on=fit_on, restart=len(y) < 30 or self._fits % 5 == 1)
        self._fantasy = (x, y)
        if gp is self._gp:
            self._model = gp
            mean, _ = gp.predict(x)
        else:
            # Every point as the model sees its full run: the best of them is the incumbent
            # for expected improvement, and the best five are where candidates gather.
            self._model = AtFullFidelity(gp)
            x = x[:, :-1]
            mean, _ = self._model.predict(x)
            y = mean
        for point in pending:
            self._believe(point)
        return x, y, float(np.min(mean))

    def _believe(self, point: NDArray[np.float64]) -> None:
        """Kriging believer: condition the model on *point* taking its posterior mean (the
        mean stays, the uncertainty there collapses, so the next pick goes elsewhere)."""
        model = self._model
        believed, _ = model.predict(point[None, :])
        if isinstance(model, AtFullFidelity):
            point, gp = model.full(point[None, :])[0], model.gp
        else:
            gp = model
        fx, fy = self._fantasy
        self._fantasy = (np.vstack([fx, point[None, :]]), np.concatenate([fy, believed]))
        gp.fit(*self._fantasy, optimise=False)

    def _from_model(
        self, model: tuple[NDArray[np.float64], NDArray[np.float64], float]
    ) -> dict[str, Any] | None:
        """The unseen point of highest log EI under the model and its fantasies."""
        x, y, best = model
        for point in self._maximise(self._model, best, x, y):
            params = self._enc.decode(point)
            if self._enc.key(params) not in self._seen:
                return params
        return self._any_unseen()

    def _maximise(
        self, gp: GaussianProcess | AtFullFidelity, best: float, x: NDArray[np.float64],
        y: NDArray[np.float64],
    ) -> list[NDArray[np.float64]]:
        """Candidate points, the most promising first."""
        enc, rng = self._enc, self._rng
        dims, width = enc.dims, enc.width
        count = self._candidates
        cands = [enc.from_unit(rng.random((count, dims)))]
        # Around the best points: small steps on the numeric columns, a few choices flipped.
        top = x[np.argsort(y, kind="stable")[:5]]
        numeric = ~enc.categorical
        scales = np.clip(gp.length_scales, 0.01, 1.0)
        per = max(count // (2 * len(top)), 8)
        for centre in top:
            moved = np.repeat(centre[None, :], per, axis=0)
            step = rng.normal(0.0, 1.0, (per, width)) * scales * rng.choice(
                [0.05, 0.2, 0.5], size=(per, 1))
            moved[:, numeric] = np.clip(moved[:, numeric] + step[:, numeric], 0.0, 1.0)
            flips = enc.from_unit(rng.random((per, dims)))
            flip = rng.random((per, 1)) < 0.2
            moved[:, ~numeric] = np.where(flip, flips[:, ~numeric], moved[:, ~numeric])
            cands.append(moved)
        pool = np.vstack(cands)
        mean, std = gp.predict(pool)
        score = log_expected_improvement(mean, std, best)
        # Polish from the best random candidates (peaks anywhere in the space) and from the
        # best near the observed optimum: the far peaks are how the model leaves a basin.
        randoms = np.argsort(-score[:count], kind="stable")[:_POLISH_FAR]
        near = count + np.argsort(-score[count:], kind="stable")[:_POLISH_NEAR]
        # The best observed point too: refining the optimum found is most often best.
        starts = np.vstack([pool[np.concatenate([randoms, near])], x[np.argmin(y)][None, :]])
        # Every start climbs by rounds of shrinking random steps (all starts in one
        # prediction per round), then all are polished together by L-BFGS-B on the gradient.
        climbed, values = self._climb(gp, best, starts)
        polished, finals = self._polish(gp, best, climbed, values)
        ranked = [polished[i] for i in np.argsort(-finals, kind="stable")]
        order = np.argsort(-score, kind="stable")
        return ranked + [pool[i] for i in order[: 4 * width + 64]]

    def _climb(
        self, gp: GaussianProcess | AtFullFidelity, best: float, starts: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Rounds of seeded steps on the numeric columns of every start (choices kept),
        shrinking, each start keeping the best point it found: vectorised across starts."""
        numeric = ~self._enc.categorical
        points = starts.copy()
        mean, std = gp.predict(points)
        values = log_expected_improvement(mean, std, best)
        if not numeric.any():
            return points, values
        scales = np.clip(gp.length_scales[numeric], 0.01, 1.0)
        k, per = len(points), 32
        for shrink in (0.3, 0.1, 0.03, 0.01, 0.003):
            moved = np.repeat(points, per, axis=0)
            step = self._rng.normal(0.0, 1.0, (k * per, int(numeric.sum()))) * scales * shrink
            moved[:, numeric] = np.clip(moved[:, numeric] + step, 0.0, 1.0)
            mean, std = gp.predict(moved)
            tried = log_expected_improvement(mean, std, best).reshape(k, per)
            pick = np.argmax(tried, axis=1)
            better = tried[np.arange(k), pick] > values
            chosen = moved.reshape(k, per, -1)[np.arange(k), pick]
            points[better] = chosen[better]
            values[better] = tried[np.arange(k), pick][better]
        return points, values

    def _polish(
        self, gp: GaussianProcess | AtFullFidelity, best: float, starts: NDArray[np.float64],
        values: NDArray[np.float64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """L-BFGS-B on the numeric columns of every start at once (their choices kept), on the
        analytic gradient of log EI, in coordinates scaled by the length scales (so that every
        direction is equally curved); a start keeps its point where polishing did not help."""
        numeric = ~self._enc.categorical
        if not numeric.any():
            return starts, values
        k, cols = len(starts), int(numeric.sum())
        lengths = np.clip(gp.length_scales[numeric], 1e-3, None)
        points = starts.copy()

        def negative(z: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
            points[:, numeric] = np.clip(z.reshape(k, cols) * lengths, 0.0, 1.0)
            mean, std, dmean, dstd = gp.predict_gradient(points)
            value, grad = log_expected_improvement_gradient(mean, std, dmean, dstd, best)
            return -float(value.sum()), -(grad[:, numeric] * lengths).reshape(-1)

        upper = np.tile(1.0 / lengths, k)
        result = optimize.minimize(
            negative, (starts[:, numeric] / lengths).reshape(-1), jac=True, method="L-BFGS-B",
            bounds=list(zip(np.zeros_like(upper), upper, strict=True)),
            options={"maxiter": 200},
        )
        points[:, numeric] = np.clip(result.x.reshape(k, cols) * lengths, 0.0, 1.0)
        mean, std = gp.predict(points)
        finals = log_expected_improvement(mean, std, best)
        keep = ~(finals > values)  # also where polishing gave NaN
        points[keep], finals[keep] = starts[keep], values[keep]
        return points, finals
