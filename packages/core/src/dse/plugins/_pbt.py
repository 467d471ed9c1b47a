"""Population-based training (Jaderberg et al., "Population Based Training of Neural
Networks", 2017), asynchronous, as dse-core's ``pbt`` stopping rule.

A population of trials trains at once. Every ``interval`` steps a member is judged against
the latest values of the others: one in the worst ``quantile`` is **exploited** — stopped,
its place taken by a new trial that starts from a copy of the checkpoint of a member of the
best ``quantile`` (the donor), with the donor's params perturbed (**explore**). So a schedule
(a learning rate that decays, an augmentation that grows) is found in one training budget:
a lineage of trials, each a segment of constant params, the record keeping who came from
whom.

The rule sees numbers only, as every rule does (losses: lower is better). It decides which
trial is exploited and which donor it copies; the engine makes the new trial (it knows the
params and the space, copies the checkpoint, records the lineage) and perturbs the donor's
params with :meth:`PbtRule.explore`. Both are deterministic: the donor and the perturbation
are drawn from generators seeded by the rule's ``seed`` and the exploited trial's number and
step, so a resumed run, reporting the recorded points again in order, decides the same.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any, ClassVar

from dse.model._errors import ConfigError
from dse.model._space import Categorical, FloatRange, IntRange, ParamError
from dse.model._types import MAX_COMPARED, Decision, Verdict

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from dse.model._space import Parameter, Space

__all__ = ["PbtRule"]


def _whole(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{name}: expected a whole number >= {least}, got {value!r}")
    return value


def _fraction(name: str, value: object, low: float, high: float) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not low <= value <= high):
        raise ConfigError(f"{name}: expected a number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def _factors(value: object) -> tuple[float, ...]:
    name = "stopping.pbt.factors"
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value or any(
            isinstance(f, bool) or not isinstance(f, int | float) or not math.isfinite(f)
            or f <= 0 for f in value):
        raise ConfigError(f"{name}: expected a non-empty list of positive numbers,"
                          f" got {value!r}")
    return tuple(float(f) for f in value)


class PbtRule:
    """Asynchronous population-based training (PBT).

    A trial is judged when it reports a step at least ``interval`` steps past the step it
    started from (a new trial: 0; a trial made by an exploit: the step before the first it
    reports, where its copied checkpoint stood) or was last judged, and not before
    ``min_step``. It is ranked, by its latest value, among the **members**: the trials that
    reported a value and have not reached ``max_step``, been exploited or ended (the engine
    tells the rule of an end through :meth:`forget`). With ``n`` members and ``k =
    ceil(n * quantile)`` (at most ``n // 2``), a trial among the worst ``k`` is
    exploited (:attr:`Verdict.EXPLOIT`): its donor is drawn from the best ``k``; any other
    trial continues. Nothing is judged with fewer than two members.

    ``population`` is how many trials the agent is asked for in all (the members that start
    fresh); an exploit's new trial takes the place of the trial it replaces and is not one of
    them. Values are losses; NaN is the worst.
    """

    name: ClassVar[str] = "pbt"
    version: ClassVar[str] = "1"

    def __init__(self, *, min_step: int, max_step: int, population: int = 8,
                 interval: int | None = None, quantile: float = 0.25,
                 factors: Sequence[float] = (0.8, 1.2), resample_probability: float = 0.25,
                 seed: int = 0, sign: float = 1.0) -> None:
        self.min_step = _whole("stopping.min_step", min_step, 1)
        self.max_step = _whole("stopping.max_step", max_step, 2)
        self.population = _whole("stopping.pbt.population", population, 2)
        default = max(1, max_step // 10)
        self.interval = _whole("stopping.pbt.interval",
                               default if interval is None else interval, 1)
        if self.interval >= self.max_step:
            raise ConfigError(f"stopping.pbt.interval: expected fewer steps than max_step"
                              f" ({self.max_step}), got {self.interval}")
        self.quantile = _fraction("stopping.pbt.quantile", quantile, 0.0, 0.5)
        if self.quantile == 0:
            raise ConfigError("stopping.pbt.quantile: expected a number in (0, 0.5], got 0")
        self.factors = _factors(factors)
        self.resample_probability = _fraction("stopping.pbt.resample_probability",
                                              resample_probability, 0.0, 1.0)
        self.seed = _whole("stopping.pbt.seed", seed, 0)
        self.sign = sign
        self._latest: dict[int, tuple[int, float]] = {}
        """Member -> its last reported step and value."""
        self._judged: dict[int, int] = {}
        """Trial -> the step it started from or was last judged at."""
        self._gone: set[int] = set()
        """Trials out of the population for good (exploited, finished, ended)."""

    # -- the protocol ------------------------------------------------------------------------

    def report(self, trial: int, step: int, value: float) -> Decision | None:
        if trial in self._gone:
            return None
        value = math.inf if math.isnan(value) else value
        last = self._latest.get(trial)
        if last is not None and step <= last[0]:
            return None  # a step told again (a retried attempt): nothing changes
        since = self._judged.setdefault(trial, step - 1 if last is None else 0)
        if step >= self.max_step:
            self.forget(trial)  # a full run: out of the population, never judged
            return None
        self._latest[trial] = (step, value)
        if step < self.min_step or step - since < self.interval:
            return None
        self._judged[trial] = step
        return self._judge(trial, step, value)

    def promotions(self, stopped: Collection[int]) -> list[Decision]:
        return []  # an exploited trial's place went to its replacement

    # -- what the engine tells and asks --------------------------------------------------

    def forget(self, trial: int) -> None:
        """*trial* left the population (it ended, or reached ``max_step``)."""
        self._gone.add(trial)
        self._latest.pop(trial, None)

    def explore(self, params: Mapping[str, Any], space: Space, key: str) -> dict[str, Any]:
        """The donor's *params* perturbed, for the trial that replaces another (*key* names
        the exploit: the same key, the same params). Each param is resampled from its range
        with probability ``resample_probability``; otherwise a number is multiplied by one of
        ``factors`` (clipped to its range, on its grid) and a categorical moves to a
        neighbouring choice or stays. Params a changed choice makes active are drawn anew."""
        rng = random.Random(f"pbt:{self.seed}:{key}")
        out: dict[str, Any] = {}
        for name, value in params.items():
            if name in space.names:
                out[name] = self._perturbed(space[name], value, rng)
        for _ in range(len(space) + 1):  # a changed parent may activate a child, and so on
            active = space.active(out)
            missing = [n for n in active if n not in out]
            if not missing:
                break
            for name in missing:
                out[name] = space[name].sample(rng)
        return space.coerce({n: out[n] for n in space.active(out)})

    # -- inside --------------------------------------------------------------------------

    def _judge(self, trial: int, step: int, value: float) -> Decision:
        ranked = sorted(((v, t) for t, (_, v) in self._latest.items()))
        n = len(ranked)
        others = tuple((t, v) for v, t in ranked if t != trial)[:MAX_COMPARED]
        if n < 2:
            return Decision(trial, Verdict.CONTINUE, step, step, value, None, 0, (),
                            "the only member: nothing to compare with yet")
        k = min(math.ceil(n * self.quantile), n // 2)
        rank = ranked.index((value, trial))
        shown = self.sign * value
        if rank < n - k:
            cut = ranked[n - k][0]
            return Decision(trial, Verdict.CONTINUE, step, step, value, cut, n - 1, others,
                            f"{shown:g} is not among the worst {k} of {n} members at step"
                            f" {step} (quantile {self.quantile:g})")
        top = [t for _, t in ranked[:k]]
        donor = random.Random(f"pbt-donor:{self.seed}:{trial}:{step}").choice(top)
        best = self._latest[donor][1]
        self.forget(trial)
        return Decision(
            trial, Verdict.EXPLOIT, step, step, value, ranked[n - k - 1][0], n - 1, others,
            f"{shown:g} is among the worst {k} of {n} members at step {step} (quantile"
            f" {self.quantile:g}): replaced by a copy of trial {donor} ({self.sign * best:g})",
            donor=donor)

    def _perturbed(self, param: Parameter, value: Any, rng: random.Random) -> Any:
        resample = rng.random() < self.resample_probability
        factor = rng.choice(self.factors)
        shift = rng.choice((-1, 0, 1))
        if resample:
            return param.sample(rng)
        if isinstance(param, Categorical):
            try:
                at = param.choices.index(param.coerce(value))
            except (ParamError, ValueError):
                return param.sample(rng)
            return param.choices[min(max(at + shift, 0), len(param.choices) - 1)]
        assert isinstance(param, IntRange | FloatRange)
        moved = min(max(float(value) * factor, param.low), param.high)
        if param.step is not None:
            moved = param.low + round((moved - param.low) / param.step) * param.step
            moved = min(moved, param.high)
        if isinstance(param, IntRange):
            moved = round(moved)
            if moved == value and factor != 1:  # a small int a factor cannot move
                moved = min(max(moved + (1 if factor > 1 else -1), param.low), param.high)
        try:
            return param.coerce(moved)
        except ParamError:
            return param.sample(rng)
