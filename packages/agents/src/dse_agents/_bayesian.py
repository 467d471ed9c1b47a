"""The Bayesian agent: a Gaussian-process surrogate that proposes whole batches.

* **Space**: the unit cube of :class:`dse_agents._encoding.Encoding` (log-scaled parameters
  on their log scale, integers and stepped floats snapped to their grid, categoricals
  one-hot).
* **Start**: a seeded Latin hypercube (``initial`` points, default ``max(6, 2 * params)``).
* **Model**: Matérn 5/2 with a length scale per column, hyperparameters by maximum a
  posteriori marginal likelihood on standardised scores, the noise allowed down to 1e-9 so
  that a deterministic objective is interpolated (:mod:`dse_agents._gp`), fitted on the
  successes alone. Beyond ``max_points`` observations it fits a subsample (the best third
  and a seeded draw of the rest), which keeps a batch well under a second at 1,000
  observations.
* **Many parameters** (10 numeric columns or more): the length scales get a
  dimension-scaled prior and the acquisition is searched in a trust region around the best
  point (:mod:`dse_agents._trust`).
* **Failures**: failed trials and rejected proposals teach a second model, of the
  probability that a configuration succeeds (:mod:`dse_agents._feasibility`); the
  acquisition is weighted by it. A failure is no evidence about the objective, so it no
  longer bends the objective's model upwards and walls off the good edge of a failing
  region; the failures nearest the best point join that model a little above its own
  prediction only so that its uncertainty there collapses (trying a failed configuration
  again teaches nothing).
* **Trials stopped early**: a loss at step *s* of ``max_step`` is a result at fidelity
  ``s / max_step``. With such results the model takes the fidelity as one more input column,
  on a log scale (1 for full runs), and the acquisition asks it about full runs
  (:class:`dse_agents._gp.AtFullFidelity`). A trial told again (stopped, promoted, then
  stopped higher or run to its end) replaces its earlier result. Once the campaign stops
  trials early, a third of the proposals are drawn at random (``random_fraction``). Both:
  :mod:`dse_agents._stopped`.
* **Acquisition**: log expected improvement over the best posterior mean of the observed
  points (robust to noise), plus the log probability of success once a trial has failed,
  maximised over random candidates and perturbations of the best points: the best of each
  (a far peak is how the model leaves a basin it has settled in) climb, then the first pick
  of each ``propose`` is polished by L-BFGS-B on the analytic gradient, its Monte-Carlo
  batch score's included (:mod:`dse_agents._acquisition`): in a rolling campaign every pick
  has trials in flight, and without polishing it lagged waves (median regret 0.98 against
  0.64 on a shifted 5-D Ackley, 12 seeds; 0.67 polished). The later picks of a wave are
  climbed only: polished too, they crowded the first (a shifted 7-D Levy's waves 0.44 ->
  0.73).
* **Batches**: a batch is picked greedily by Monte-Carlo q-EI, its later picks scoring the
  first pick's candidates again (the model then computes only the rows the batch added). The
  trials in flight and the points already picked join the model's data, so its uncertainty
  there collapses; their values are not taken as known but drawn jointly from the model
  without them (32 seeded samples), and a candidate's score is its expected improvement
  averaged over the samples, each with its own incumbent. A candidate beside a picked point
  is worth little where that point's sample already improved, and a far candidate keeps its
  own improvement, so a wave of *P* is as good as *P* picks one after another. (Fixing those
  values at their mean, the kriging believer used before, kills the whole peak a point was
  picked from: a wave's later picks went far, and waves lagged a rolling campaign: median
  regret 2.0 against 0.84 on a shifted 5-D Ackley, 6 seeds.) Never a point already proposed.

Seeded and deterministic: the same seed and the same calls give the same proposals, and the
results told between two ``propose`` calls may come in any order and in any number of
``observe`` calls (the points are kept in the order of their proposals).
"""

from __future__ import annotations

import bisect
import copy
import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from threadpoolctl import ThreadpoolController

from dse import TrialStatus
from dse_agents._acquisition import Acquisition, Maximiser
from dse_agents._encoding import Encoding
from dse_agents._feasibility import SuccessModel
from dse_agents._gp import AtFullFidelity, GaussianProcess
from dse_agents._multi import ParetoSearch
from dse_agents._options import need_fraction, need_int, reject_unknown
from dse_agents._stopped import EarlyStopped
from dse_agents._trust import MIN_COLUMNS, trust_box, trust_length

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

_OPTIONS = ("initial", "candidates", "max_points", "random_fraction")
_MAX_POINTS = 200
"""Observations the posterior is conditioned on past this many (the best third and a seeded
draw of the rest): every prediction costs the square of it. After 1,000 observations a batch
of 4 took 0.56-0.73 s of CPU with 300 (Branin, 20-D embedded Styblinski-Tang; load 3 on 2
cores), 0.38-0.55 s with 200. No run of ``benchmarks/search_quality.py`` reaches either
(budgets 40-160)."""
_FIT_POINTS = 120
"""Most observations the hyperparameters are fitted on (the posterior uses up to
``max_points``)."""
_UNNUMBERED = 2**53
"""Where an observation without a proposal number comes (after every numbered one)."""
_NEAR_FAILURES = (16, 64)
"""The fewest and the most failures near the best point the objective's model is given: as
many as keep its rows within ``max_points`` plus the fewest. With 64 always, a batch of 4
after 1,000 observations (about 400 of them failures) cost 0.43-0.63 s of CPU on constrained
Branin, its model at 264 rows."""
_FAILURE_ABOVE = 2.0
"""A failure near the best point joins the objective's model at its prediction plus this many
standard deviations: a small local bump where the model was unsure, none where it was sure.
At the mean itself (0) the agent failed more trials once it had converged, exploring the
edge: 7.5 against 4.5 of 50 on a 3-D failure-edge problem, 13.9 against 10.4 of 60 on
constrained Branin (rolling, P = 4, 8 seeds; regret unchanged, 1e-6 to 1e-7)."""


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


def _nearest_failures(
    points: Sequence[NDArray[np.float64]], losses: Sequence[float | None],
    best: NDArray[np.float64], keep: int,
) -> list[NDArray[np.float64]]:
    """The failed *points* (loss ``None``) nearest to *best* (the best point seen), at most
    *keep*: where a retry could otherwise look promising. Farther ones are left to the
    success model (each one more row of the objective's model costs every prediction)."""
    failed = [x for x, loss in zip(points, losses, strict=True) if loss is None]
    if len(failed) <= keep:
        return failed
    distance = np.sum((np.array(failed) - best) ** 2, axis=1)
    return [failed[i] for i in np.sort(np.argsort(distance, kind="stable")[:keep])]


def _exact(value: object) -> bool:
    """Whether JSON gives *value* back as the same value of the same type."""
    if type(value) is float:
        return math.isfinite(value)
    return type(value) in (int, str, bool)


class BayesianAgent:
    """Gaussian-process Bayesian optimisation with batch proposals (see the module docstring).

    Options (``[agent.bayesian]``, docs/agents.md): ``initial`` (design points, default
    ``max(6, 2 * parameters)``), ``candidates`` (per pick, 2048), ``max_points`` (200).
    """

    name: ClassVar[str] = "bayesian"
    version: ClassVar[str] = "0.3.0"

    def __init__(self, space: Space, *, seed: int = 0, **options: Any) -> None:
        unknown = {k: v for k, v in options.items() if k not in _OPTIONS}
        reject_unknown(self.name, unknown, _OPTIONS)
        self._enc = Encoding(space)
        self._initial = need_int(self.name, "initial", options.get(
            "initial", max(6, 2 * len(space))), minimum=1)
        self._candidates = need_int(self.name, "candidates",
                                    options.get("candidates", 2048), minimum=16)
        self._max_points = need_int(self.name, "max_points",
                                    options.get("max_points", _MAX_POINTS), minimum=10)
        self._stopping = EarlyStopped(
            need_fraction(self.name, "random_fraction", options.get("random_fraction")))
        self._rng = np.random.default_rng(seed)
        self._design = list(latin_hypercube(self._enc.dims, self._initial, seed))
        self._size = space.cardinality
        self._many = int((~self._enc.categorical).sum()) >= MIN_COLUMNS
        """Many numeric columns: a trust region and the dimension-scaled length-scale prior."""
        self._gp = GaussianProcess(self._enc.width, scaled=self._many)
        self._success = SuccessModel(self._enc.width)
        """Where trials succeed: fitted once a trial has failed."""
        self._maximiser = Maximiser(self._enc, self._rng, self._candidates)
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
        self._order: list[tuple[int, int]] = []
        """Where each point of ``_x`` comes in: (its proposal, the how-manieth it was told).
        ``_x``, ``_y``, ``_t`` and the Pareto losses are kept in this order, so the models
        see the same rows in the same order whatever order the results were told in (a
        rolling campaign tells them as trials finish)."""
        self._trials: dict[int, tuple[int, int]] = {}
        """Trial number -> its place in ``_order``: a trial told again (stopped, promoted,
        then stopped higher or completed) replaces what it said before."""
        self._seen: set[tuple[Any, ...]] = set()
        """Every point proposed (or observed): never proposed again."""
        self._proposed = 0
        self._told = 0
        """Points observed so far (the second half of their place in ``_order``)."""
        self._fits = 0
        self._fantasy: tuple[NDArray[np.float64], NDArray[np.float64]] = (
            np.zeros((0, self._enc.width)), np.zeros(0))
        """The points and losses the model is conditioned on, fantasies included."""
        self._base: GaussianProcess | AtFullFidelity = self._gp
        """The model before the batch's points (trials in flight, points picked) were added:
        their values are sampled from it."""
        self._batch: list[NDArray[np.float64]] = []
        """The points of the batch: in flight, then picked by this ``propose``; the last rows
        of the model's data, in this order."""
        self._multi = ParetoSearch(self._enc.width, scaled=self._many)
        """A Pareto campaign's objectives, each point's losses (aligned with ``_x``), model."""

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
        self._maximiser.new_batch()
        self._batch = [enc.encode(p) for p in in_flight]
        for p in in_flight:
            self._seen.add(enc.key(p))
        model: tuple[NDArray[np.float64], NDArray[np.float64], float] | None = None
        pareto = self._multi.active
        while len(out) < n and not self.exhausted:
            if self._proposed + self._told_unasked() < self._initial or self._successes() < 2:
                params = self._from_design()
            elif pareto:
                if model is None:
                    model = self._fit_pareto()
                params = self._from_front(model, polish=not out)
            elif self._stopping.explores(self._proposed):
                params = self._any_unseen()
            else:
                if model is None:
                    model = self._fit()
                params = self._from_model(model, polish=not out)
            if params is None:
                break
            self._seen.add(enc.key(params))
            self._proposed += 1
            point = enc.encode(params)
            self._batch.append(point)
            out.append(params)
            if model is not None and len(out) < n:
                if pareto:
                    self._multi.believe(point[None, :])
                else:
                    self._believe([point])
        return out

    def _told_unasked(self) -> int:
        """How many results it was told that answer none of its proposals (a warm start's):
        they stand for as many points of the initial design."""
        return sum(1 for place in self._order if place[0] == _UNNUMBERED)

    def observe(self, observations: Sequence[Observation]) -> None:
        enc = self._enc
        for obs in observations:
            learnt = _learnt(obs)
            if learnt is None:
                continue  # interrupted, cancelled, out of budget, other data: nothing learnt
            loss, fidelity = learnt
            self._stopping.note(obs.max_step)
            losses = self._multi.note(obs)
            try:
                x = enc.encode(obs.params)
            except (KeyError, ValueError, TypeError):
                continue  # a rejected proposal outside the space: no point to learn from
            self._seen.add(enc.key(obs.params))
            number = obs.trial_number
            place = self._trials.get(number) if number is not None else None
            entry = -1 if place is None else bisect.bisect_left(self._order, place)
            if entry >= 0 and np.array_equal(self._x[entry], x):
                # The same trial told again: its later result replaces the earlier.
                self._y[entry], self._t[entry] = loss, fidelity
                self._multi.losses[entry] = losses
                continue
            place = (_UNNUMBERED if obs.proposal is None else obs.proposal, self._told)
            self._told += 1
            if number is not None:
                self._trials[number] = place
            entry = bisect.bisect(self._order, place)
            self._order.insert(entry, place)
            self._x.insert(entry, x)
            self._y.insert(entry, loss)
            self._t.insert(entry, fidelity)
            self._multi.losses.insert(entry, losses)

    def snapshot(self) -> dict[str, Any] | None:
        """The agent's state as JSON values: the generator, the rest of the initial design,
        the points observed with their losses (in their proposals' order), every point
        proposed or seen, the counts, and the model's hyperparameters (the next fit starts
        from them). The model's posterior
        and its fantasies are left out: every ``propose`` that consults the model fits it
        first. ``None`` when a loss or a param value is not a finite float, an int, a string
        or a bool (JSON cannot hold it exactly; the engine never tells one)."""
        gp = self._gp.snapshot()
        fidelity = None if self._gp_fidelity is None else self._gp_fidelity.snapshot()
        success = self._success.gp.snapshot()
        exact = (all(_exact(v) for key in self._seen for _, v in key)
                 and all(y is None or _exact(y) for y in self._y)
                 and all(np.isfinite(x).all() for x in self._x))
        multi = self._multi.snapshot()
        if (multi is None or gp is None or success is None or not exact
                or (self._gp_fidelity is not None and fidelity is None)):
            return None
        return {
            "rng": dict(self._rng.bit_generator.state),
            "design": [u.tolist() for u in self._design],
            "x": [x.tolist() for x in self._x],
            "y": list(self._y),
            "t": list(self._t),
            "trials": sorted([number, bisect.bisect_left(self._order, place)]
                             for number, place in self._trials.items()),
            "order": [list(place) for place in self._order],
            "told": self._told,
            # (type name, value) pairs, as Encoding.key makes them: JSON gives each value
            # back as the same type, so membership tests answer as before.
            "seen": [[list(pair) for pair in key] for key in self._seen],
            "proposed": self._proposed,
            "fits": self._fits,
            "max_step": self._stopping.max_step,
            "gp": gp,
            "gp_fidelity": fidelity,
            "gp_success": success,
            **multi,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Become the agent that gave *state* (a :meth:`snapshot`, through JSON)."""
        design = [np.array(u, dtype=np.float64) for u in state["design"]]
        if any(u.shape != (self._enc.dims,) for u in design):
            raise ValueError(f"the snapshot's design is not of {self._enc.dims} parameters")
        self._gp.restore(state["gp"])
        self._gp_fidelity = None
        if state.get("gp_fidelity") is not None:  # a snapshot of 0.1.0 has none
            self._gp_fidelity = GaussianProcess(self._enc.width + 1, scaled=self._many)
            self._gp_fidelity.restore(state["gp_fidelity"])
        if state.get("gp_success") is not None:  # a snapshot of 0.1.0 has none
            self._success.gp.restore(state["gp_success"])
        self._rng.bit_generator.state = state["rng"]
        self._design = design
        self._x = [np.array(x, dtype=np.float64) for x in state["x"]]
        self._y = [None if y is None else float(y) for y in state["y"]]
        self._t = [float(t) for t in state.get("t", [1.0] * len(self._y))]
        # A snapshot of 0.2.0 has no order: its points come first, in the order it had them.
        self._order = [(int(p), int(t)) for p, t in state.get(
            "order", [(-1, i) for i in range(len(self._x))])]
        self._told = int(state.get("told", len(self._x)))
        self._trials = {int(number): self._order[int(entry)]
                        for number, entry in state.get("trials", [])}
        self._seen = {tuple((str(name), value) for name, value in key)
                      for key in state["seen"]}
        self._proposed, self._fits = int(state["proposed"]), int(state["fits"])
        self._stopping.restore(state.get("max_step"))
        self._multi.restore(state, len(self._x))

    # -- proposals ------------------------------------------------------------------------

    def _successes(self) -> int:
        if self._multi.active:
            return sum(1 for v in self._multi.losses if v is not None)
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
        """The successes' points and losses, subsampled if many (the best third and a seeded
        draw of the rest); with the fidelity as a last column when a result is of a trial
        stopped early."""
        ok = np.array([y is not None for y in self._y])
        x = np.array(self._x)
        if min(self._t) < 1.0:
            x = np.hstack([x, self._stopping.column(np.array(self._t))[:, None]])
        x = x[ok]
        y = np.array([v for v in self._y if v is not None])
        if len(y) > self._max_points:
            order = np.argsort(y, kind="stable")
            best = order[: self._max_points // 3]
            rest = self._rng.choice(order[self._max_points // 3 :],
                                    self._max_points - best.size, replace=False)
            keep = np.sort(np.concatenate([best, rest]))
            x, y = x[keep], y[keep]
        return x, y

    def _fit_success(self) -> None:
        """Fit the model of where trials succeed to every point observed (a seeded
        subsample of half ``max_points`` if more); it stays unfitted while no trial has
        failed."""
        succeeded = np.array([y is not None for y in self._y])
        if succeeded.all():
            self._success.fitted = False
            return
        x = np.array(self._x)
        rows = max(self._max_points // 2, 10)  # a smooth surface: fewer rows, cheaper
        if len(x) > rows:
            keep = np.sort(self._rng.choice(len(x), rows, replace=False))
            x, succeeded = x[keep], succeeded[keep]
        fit_on = None
        if len(x) > _FIT_POINTS:
            fit_on = np.sort(self._rng.choice(len(x), _FIT_POINTS, replace=False))
        self._success.fit(x, succeeded, fit_on=fit_on,
                          restart=len(x) < 30 or self._fits % 5 == 1)

    def _fit(self) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
        """Fit the models to the observations, then add the batch so far (trials in flight,
        points already picked) as fantasies; (points, losses, best posterior mean of the
        points)."""
        x, y = self._training_set()
        fit_on = None
        if len(y) > _FIT_POINTS:
            fit_on = np.sort(self._rng.choice(len(y), _FIT_POINTS, replace=False))
        self._fits += 1
        gp = self._gp
        if x.shape[1] > self._enc.width:  # results of trials stopped early: fidelity column
            if self._gp_fidelity is None:
                self._gp_fidelity = GaussianProcess(self._enc.width + 1, scaled=self._many)
            gp = self._gp_fidelity
        # From the prior's centre as well as from the last fit, now and then (escapes a
        # local optimum the warm start would keep).
        gp.fit(x, y, fit_on=fit_on, restart=len(y) < 30 or self._fits % 5 == 1)
        self._fit_success()
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
        best = float(np.min(mean))
        # The failures near the best too, a little above the model's mean: a failure says
        # nothing of the objective there, but nothing is learnt by trying it again.
        fewest, most = _NEAR_FAILURES
        keep = min(most, max(fewest, self._max_points + fewest - len(y)))
        near = _nearest_failures(self._x, self._y, x[int(np.argmin(y))], keep)
        self._believe(near, above=_FAILURE_ABOVE)
        model = self._model
        self._base = (AtFullFidelity(copy.copy(model.gp)) if isinstance(model, AtFullFidelity)
                      else copy.copy(model))
        self._believe(self._batch)
        return x, y, best

    def _believe(self, points: Sequence[NDArray[np.float64]], *, above: float = 0.0) -> None:
        """Kriging believer: condition the model on *points* taking their posterior mean plus
        *above* standard deviations (at the mean, the mean stays and the uncertainty there
        collapses, so the next pick goes elsewhere)."""
        if not points:
            return
        model = self._model
        x = np.array(points)
        believed, sd = model.predict(x)
        believed = believed + above * sd
        if isinstance(model, AtFullFidelity):
            x, gp = model.full(x), model.gp
        else:
            gp = model
        fx, fy = self._fantasy
        self._fantasy = (np.vstack([fx, x]), np.concatenate([fy, believed]))
        gp.fit(*self._fantasy, optimise=False)

    def _trust_region(
        self, x: NDArray[np.float64], y: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]] | None:
        """The box the numeric columns are searched in with many of them (see
        :mod:`dse_agents._trust`); ``None`` (the whole cube) with fewer."""
        if not self._many:
            return None
        numeric = ~self._enc.categorical
        length = trust_length(self._y, self._initial, int(numeric.sum()))
        best = x[int(np.argmin(y))]  # a param inactive there: the box spans its whole range
        return trust_box(best[numeric], self._model.length_scales[numeric], length,
                         self._enc.free(best)[numeric])

    def _from_model(
        self, model: tuple[NDArray[np.float64], NDArray[np.float64], float], *, polish: bool
    ) -> dict[str, Any] | None:
        """The unseen point of highest log EI under the model and its fantasies, polished by
        gradient steps if *polish* (see :meth:`Maximiser.ranked`)."""
        x, y, best = model
        acquisition = Acquisition(self._model, best, self._success)
        if self._batch:
            acquisition.fantasise(self._base, np.array(self._batch), self._rng)
        box = self._trust_region(x, y)
        for point in self._maximiser.ranked(acquisition, x, y, box, polish=polish):
            params = self._enc.decode(point)
            if self._enc.key(params) not in self._seen:
                return params
        return self._any_unseen()

    # -- several objectives (a Pareto campaign: dse_agents._multi) -------------------------

    def _fit_pareto(self) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
        """Fit the objectives' models and the success model, then believe the trials in
        flight; (points, their distance to the front, 0)."""
        self._fits += 1
        x, gaps = self._multi.fit(self._x, self._rng, self._max_points,
                                  restart=self._fits % 5 == 1)
        self._fit_success()
        self._multi.believe(np.array(self._batch) if self._batch else x[:0])
        return x, gaps, 0.0

    def _from_front(
        self, model: tuple[NDArray[np.float64], NDArray[np.float64], float], *, polish: bool
    ) -> dict[str, Any] | None:
        """The unseen point of highest expected hypervolume improvement (polished by
        gradient steps if *polish*: the first pick of a ``propose``)."""
        x, gaps, _ = model
        acquisition = self._multi.acquisition(self._success, far=not polish)
        for point in self._maximiser.ranked(acquisition, x, gaps, None, polish=polish):
            params = self._enc.decode(point)
            if self._enc.key(params) not in self._seen:
                return params
        return self._any_unseen()
