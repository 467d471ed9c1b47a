"""The stopping rules dse-core ships: median stopping, asynchronous successive halving (ASHA)
and Hyperband (brackets of ASHA).

Each satisfies :class:`dse.StoppingRule` and sees only numbers: trial numbers, the steps they
reported and values that are **losses** (lower is better). Turning a maximised metric into a
loss (negating it) is the engine's business, as is giving the values back in the metric's own
sign in the record; nothing here knows a metric's direction, but each rule takes ``sign``
(-1 for a maximised metric, which the engine hands a rule that takes it) to print the values
of its reasons as the trials reported them. A NaN value is taken as the worst
possible (``+inf``): a trial whose loss diverged is the first to stop.

Each rule is deterministic: reporting the same points in the same order rebuilds the same
state and makes the same decisions (a resumed run does exactly that). Ties between equal
values are broken by trial number (the lower ranks better), never by arrival or chance. A
point whose step is not past the last step the trial reported (a retried attempt going over
steps again) changes nothing.

Each is cheap: a population (one rung's trials, one step's) is kept sorted, so a report costs
a binary search and an insertion into the population it joins, plus the at most
:data:`~dse.model._types.MAX_COMPARED` peers a decision lists; it never walks the other trials.
``docs/stopping.md`` says what each rule decides and when to choose it.
"""

from __future__ import annotations

import bisect
import math
from array import array
from typing import TYPE_CHECKING, ClassVar

from dse.model._errors import ConfigError
from dse.model._types import MAX_COMPARED, Decision, Verdict

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["AshaRule", "HyperbandRule", "MedianRule", "hyperband_rungs", "rungs"]

_GOLDEN = (math.sqrt(5) - 1) / 2
"""The stride, as a fraction of the cycle, that spreads Hyperband's brackets over trial
numbers (consecutive trials land far apart in the cycle)."""


def _whole(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{name}: expected a whole number >= {least}, got {value!r}")
    return value


def _factor(name: str, value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 2):
        raise ConfigError(f"{name}: expected a finite number >= 2, got {value!r}")
    return float(value)


def _steps(min_step: object, max_step: object) -> tuple[int, int]:
    low = _whole("stopping.min_step", min_step, 1)
    high = _whole("stopping.max_step", max_step, 2)
    if low >= high:
        raise ConfigError(f"stopping.min_step: expected 1 <= min_step < max_step ({high}),"
                          f" got {low}")
    return low, high


def rungs(min_step: int, max_step: int, eta: float) -> list[int]:
    """ASHA's rungs: ``min_step * eta**k`` for k = 0, 1, ... below *max_step*, each rounded
    up to a whole step (a trial is at a rung once it ran at least that many steps)."""
    out: list[int] = []
    at = float(min_step)
    while True:
        step = math.ceil(at * (1 - 1e-12))  # 1e-12: a product a hair above a whole number
        if step >= max_step:
            return out
        if not out or step > out[-1]:
            out.append(step)
        at *= eta


def hyperband_rungs(max_step: int, eta: float, s: int) -> list[int]:
    """The rungs of Hyperband's bracket *s* (it halves *s* times): ``max_step / eta**j`` for
    j = s, ..., 1, rounded down to whole steps; bracket 0 has none."""
    return [math.floor(max_step / eta**j * (1 + 1e-12)) for j in range(s, 0, -1)]


class _Ranked:
    """One population (the trials at one rung, or at one step), sorted best first: by value,
    ties by trial number. Kept in two parallel arrays (16 bytes a trial, no objects), with
    the best few as pairs, made again only when an insertion lands among them."""

    __slots__ = ("_head", "trials", "values")

    def __init__(self) -> None:
        self.values = array("d")
        self.trials = array("q")
        self._head: tuple[tuple[int, float], ...] | None = ()

    def __len__(self) -> int:
        return len(self.values)

    def add(self, trial: int, value: float) -> int:
        """Insert *trial* with *value*; return its index (0: the best)."""
        lo = bisect.bisect_left(self.values, value)
        hi = bisect.bisect_right(self.values, value, lo)
        at = bisect.bisect_left(self.trials, trial, lo, hi)
        self.values.insert(at, value)
        self.trials.insert(at, trial)
        if at <= MAX_COMPARED:
            self._head = None
        return at

    def rank(self, trial: int, value: float) -> int:
        """The index of *trial*, there with *value* (a bisection, not a scan)."""
        lo = bisect.bisect_left(self.values, value)
        hi = bisect.bisect_right(self.values, value, lo)
        return bisect.bisect_left(self.trials, trial, lo, hi)

    def value_without(self, skip: int, j: int) -> float:
        """The *j*-th best value (0-based) of the population without the one at *skip*."""
        return self.values[j if j < skip else j + 1]

    def best_without(self, skip: int) -> tuple[tuple[int, float], ...]:
        """The best :data:`MAX_COMPARED` of the population without the one at *skip*."""
        head = self._head
        if head is None:
            end = MAX_COMPARED + 1
            head = self._head = tuple(zip(self.trials[:end], self.values[:end], strict=True))
        if skip < len(head):
            return head[:skip] + head[skip + 1:]
        return head[:MAX_COMPARED]


class _Halving:
    """One ladder of successive halving in rolling mode (no brackets to fill, no waiting):
    the rungs, the trials that reached each with the value they reached it with, and the
    decisions of ASHA (Li et al. 2020) made on them."""

    def __init__(self, ladder: list[int], *, max_step: int, eta: float, min_peers: int,
                 bracket: int | None = None, sign: float = 1.0) -> None:
        self.rungs = ladder
        self.sign = sign
        """Turns a loss back into the metric's own value in a reason (-1: maximised)."""
        self.max_step = max_step
        self.eta = eta
        self.min_peers = min_peers
        self.bracket = bracket
        self._at = [_Ranked() for _ in ladder]
        self._reached: dict[int, list[tuple[int, float]]] = {}
        """Trial -> the step and value it reached each rung with, lowest rung first (as far
        as it reached: the last is its highest)."""

    def report(self, trial: int, step: int, value: float) -> Decision | None:
        reached = len(self._reached.get(trial, ())) - 1
        top = reached
        rank = 0
        while top + 1 < len(self.rungs) and self.rungs[top + 1] <= step:
            top += 1  # every rung passed, even those a coarse report skipped over
            rank = self._at[top].add(trial, value)
        if top == reached:
            return None
        self._reached.setdefault(trial, []).extend([(step, value)] * (top - reached))
        if step >= self.max_step:
            return None  # a full run: counted at its rungs, never decided on
        return self._decide(trial, top, rank, step, value)

    def _decide(self, trial: int, k: int, rank: int, step: int, value: float) -> Decision:
        at = self._at[k]
        n = len(at)
        peers = n - 1
        keep = max(1, int(n // self.eta))
        rung = self.rungs[k]
        cutoff = at.value_without(rank, keep - 1) if peers else None
        if peers < self.min_peers:
            verdict = Verdict.CONTINUE
            cutoff = None
            why = (f"{peers} peers at step {rung}, fewer than min_peers {self.min_peers}:"
                   " not compared yet")
        elif rank < keep:
            verdict = Verdict.CONTINUE
            why = f"{self.sign * value:g} is among the best {keep} of {n} trials at step {rung}"
        else:
            verdict = Verdict.STOP
            assert cutoff is not None  # peers >= min_peers >= 0 and rank >= keep >= 1
            why = (f"{self.sign * value:g} is not among the best {keep} of {n} trials at step"
                   f" {rung} (1/{self.eta:g}; the cut is {self.sign * cutoff:g})")
        return Decision(trial, verdict, rung, step, value, cutoff, peers,
                        at.best_without(rank), why, self.bracket)

    def promotions(self, stopped: Collection[int]) -> list[Decision]:
        """The *stopped* trials now among the best ``n // eta`` of the ``n`` at a rung they
        reached, highest rung first, best first within a rung. A trial that ran on past the
        rung it was stopped at (the stop landed late) is promoted from a lower rung only when
        at every higher rung it passed it would have gone on (:meth:`report`'s rule)."""
        out: list[Decision] = []
        chosen: set[int] = set()
        for k in range(len(self.rungs) - 1, -1, -1):
            at = self._at[k]
            n = len(at)
            keep = int(n // self.eta)
            for i in range(keep):
                trial = at.trials[i]
                if trial not in stopped or trial in chosen or not self._goes_on_past(trial, k):
                    continue
                chosen.add(trial)
                value = at.values[i]
                cutoff = at.value_without(i, keep - 1)  # keep < n: eta >= 2
                out.append(Decision(
                    trial, Verdict.PROMOTE, self.rungs[k], self._reached[trial][k][0], value,
                    cutoff, n - 1, at.best_without(i),
                    f"{self.sign * value:g} is now among the best {keep} of {n} trials at step"
                    f" {self.rungs[k]}", self.bracket))
        return out


    def _goes_on_past(self, trial: int, k: int) -> bool:
        """Whether *trial* is among the best ``max(1, n // eta)`` at every rung above *k* it
        reached (none when *k* is its highest)."""
        reached = self._reached[trial]
        for j in range(k + 1, len(reached)):
            at = self._at[j]
            if at.rank(trial, reached[j][1]) >= max(1, int(len(at) // self.eta)):
                return False
        return True


def _bracket_size(s_max: int, s: int, eta: float) -> int:
    """Hyperband's ``n`` for bracket *s*: ``ceil((s_max + 1) / (s + 1) * eta**s)``, exact
    for a whole *eta*."""
    if eta.is_integer():
        whole = (s_max + 1) * math.prod([int(eta)] * s)
        return -(-whole // (s + 1))
    return math.ceil((s_max + 1) / (s + 1) * eta**s * (1 - 1e-12))


def _loss(value: float) -> float:
    return math.inf if math.isnan(value) else value


class AshaRule:
    """Asynchronous successive halving (ASHA, Li et al. 2020), in rolling mode.

    The rungs are ``min_step * reduction_factor**k`` steps below ``max_step`` (rounded up to
    whole steps). A trial reaching a rung is compared with the ``n`` trials that reached it so
    far (itself included): it goes on when it is among the best ``max(1, n //
    reduction_factor)`` of them, and is stopped otherwise. While fewer than ``min_peers``
    other trials have reached the rung it goes on without a comparison (by default it is
    compared from the second trial on, as in Optuna and Ray Tune: with checkpoints an early
    stop is taken back by a promotion; without them, ``reduction_factor - 1`` waits until a
    rung holds ``reduction_factor`` trials). A trial reporting coarse steps is counted at
    every rung it passed, with the value it passed them with, and decided at the highest.
    A stopped trial is promoted later, by :meth:`promotions`, when it has become one of the
    best ``n // reduction_factor`` at its rung (ASHA's own promotion rule): its peers did worse
    than the first comparison expected. Nothing is decided at or past ``max_step``.

    Values are losses; a maximised metric reaches the rule negated (the engine does that,
    and hands the rule ``sign = -1``: the values its reasons print are the metric's own).
    """

    name: ClassVar[str] = "asha"
    version: ClassVar[str] = "1"

    def __init__(self, *, min_step: int, max_step: int, reduction_factor: float = 3,
                 min_peers: int = 0, sign: float = 1.0) -> None:
        low, high = _steps(min_step, max_step)
        eta = _factor("stopping.asha.reduction_factor", reduction_factor)
        self.eta = eta
        self.min_peers = _whole("stopping.asha.min_peers", min_peers, 0)
        self.max_step = high
        self._ladder = _Halving(rungs(low, high, eta), max_step=high, eta=eta,
                                min_peers=self.min_peers, sign=sign)
        self.rungs = self._ladder.rungs

    def report(self, trial: int, step: int, value: float) -> Decision | None:
        return self._ladder.report(trial, step, _loss(value))

    def promotions(self, stopped: Collection[int]) -> list[Decision]:
        return self._ladder.promotions(stopped if isinstance(stopped, set | frozenset)
                                       else set(stopped))


class HyperbandRule:
    """Hyperband (Li et al. 2018) as brackets of ASHA, as the ASHA paper runs it.

    With ``s_max = floor(log(max_step / min_step) / log(reduction_factor))`` there are
    ``s_max + 1`` brackets. Bracket ``b`` halves ``s = s_max - b`` times: its rungs are
    ``max_step / reduction_factor**j`` for j = s, ..., 1 (rounded down), so bracket 0 starts
    comparing earliest and the last bracket has no rung at all: its trials always run to
    ``max_step``. Each trial belongs to one bracket, fixed by its number: over every cycle of
    consecutive trial numbers, bracket ``b`` gets Hyperband's ``n = ceil((s_max + 1) /
    (s + 1) * reduction_factor**s)`` of them, spread through the cycle. Within its bracket a
    trial is compared, stopped and promoted exactly as by :class:`AshaRule`, with trials of
    its bracket only.

    Values are losses; a maximised metric reaches the rule negated (the engine does that,
    and hands the rule ``sign = -1``: the values its reasons print are the metric's own).
    """

    name: ClassVar[str] = "hyperband"
    version: ClassVar[str] = "1"

    def __init__(self, *, min_step: int, max_step: int, reduction_factor: float = 3,
                 min_peers: int = 0, sign: float = 1.0) -> None:
        low, high = _steps(min_step, max_step)
        eta = _factor("stopping.hyperband.reduction_factor", reduction_factor)
        grace = _whole("stopping.hyperband.min_peers", min_peers, 0)
        s_max = 0
        while low * eta ** (s_max + 1) <= high * (1 + 1e-12):
            s_max += 1
        if s_max == 0:
            raise ConfigError(
                f"stopping.hyperband.reduction_factor: {eta:g} leaves no bracket that stops a"
                f" trial (needs max_step {high} >= min_step {low} * reduction_factor)")
        self.eta = eta
        self.min_peers = grace
        self.brackets = [
            _Halving(hyperband_rungs(high, eta, s_max - b), max_step=high, eta=eta,
                     min_peers=grace, bracket=b, sign=sign)
            for b in range(s_max + 1)]
        self.sizes = [_bracket_size(s_max, s, eta) for s in range(s_max, -1, -1)]
        """Trials per cycle of each bracket (Hyperband's ``n``), bracket 0 first."""
        self._bounds: list[int] = []
        total = 0
        for size in self.sizes:
            total += size
            self._bounds.append(total)
        self.cycle = total
        stride = max(1, round(total * _GOLDEN))
        while math.gcd(stride, total) != 1:
            stride += 1
        self._stride = stride

    def bracket_of(self, trial: int) -> int:
        """The bracket of trial number *trial*: its place in the cycle, spread by a stride
        prime to the cycle's length (a permutation), falls in one bracket's share."""
        place = ((trial - 1) % self.cycle) * self._stride % self.cycle
        return bisect.bisect_right(self._bounds, place)

    def report(self, trial: int, step: int, value: float) -> Decision | None:
        return self.brackets[self.bracket_of(trial)].report(trial, step, _loss(value))

    def promotions(self, stopped: Collection[int]) -> list[Decision]:
        chosen = stopped if isinstance(stopped, set | frozenset) else set(stopped)
        out = [d for ladder in self.brackets for d in ladder.promotions(chosen)]
        out.sort(key=lambda d: (-d.rung, d.value, d.trial))
        return out


class MedianRule:
    """Median stopping (Golovin et al. 2017, "Google Vizier"; Optuna's ``MedianPruner``).

    A trial reporting step ``s`` (``min_step <= s < max_step``) is compared at most once per
    window of ``interval`` steps (``[min_step + i * interval, min_step + (i + 1) *
    interval)``), at the first step it reports in that window: once at least ``min_peers``
    peers reported that same step, it is stopped when its best value so far is worse than the
    median of their values at ``s``, and goes on otherwise. With ``peers = "finished"`` (the
    default, as Vizier and Optuna) the peers are the trials that ran to ``max_step``; with
    ``peers = "all"``, every other trial that reported ``s``, whatever became of it since
    (harsher early on: the trials at a late step are the survivors).

    Values are losses; a maximised metric reaches the rule negated (the engine does that,
    and hands the rule ``sign = -1``: the values its reasons print are the metric's own).
    """

    name: ClassVar[str] = "median"
    version: ClassVar[str] = "2"

    def __init__(self, *, min_step: int, max_step: int, min_peers: int = 5,
                 interval: int = 1, peers: str = "finished", sign: float = 1.0) -> None:
        self.min_step, self.max_step = _steps(min_step, max_step)
        self.sign = sign
        """Turns a loss back into the metric's own value in a reason (-1: maximised)."""
        self.min_peers = _whole("stopping.median.min_peers", min_peers, 1)
        self.interval = _whole("stopping.median.interval", interval, 1)
        if peers not in ("finished", "all"):
            raise ConfigError(f"stopping.median.peers: expected 'finished' or 'all', got"
                              f" {peers!r}")
        self.finished_only = peers == "finished"
        self._at: dict[int, _Ranked] = {}
        """Step -> the peers that reported it and their values there."""
        self._trials: dict[int, list[float]] = {}
        """Trial -> [last step reported, best value so far, last window decided]."""
        self._pending: dict[int, list[tuple[int, float]]] = {}
        """Trial -> its values at the steps compared, until it finishes (``peers =
        "finished"``: they count once it ran to ``max_step``)."""

    def report(self, trial: int, step: int, value: float) -> Decision | None:
        value = _loss(value)
        seen = self._trials.get(trial)
        if seen is None:
            seen = self._trials[trial] = [-1, math.inf, -1]
        elif step <= seen[0]:
            return None
        seen[0] = step
        best = seen[1] = min(seen[1], value)
        if step >= self.max_step:
            for at_step, kept in self._pending.pop(trial, ()):
                self._population(at_step).add(trial, kept)
            return None
        if step < self.min_step:
            return None  # nobody is compared at this step: it need not be kept
        at = self._population(step)
        if self.finished_only:
            self._pending.setdefault(trial, []).append((step, value))
            rank = len(at)  # not among its peers: none of them is skipped
        else:
            rank = at.add(trial, value)
        window = (step - self.min_step) // self.interval
        if window <= seen[2]:
            return None
        seen[2] = window
        peers = len(at) - (0 if self.finished_only else 1)
        if peers < self.min_peers:
            return None
        half = peers // 2
        median = (at.value_without(rank, half) if peers % 2 else
                  (at.value_without(rank, half - 1) + at.value_without(rank, half)) / 2)
        if best > median:
            verdict = Verdict.STOP
            why = (f"its best {self.sign * best:g} is worse than the median"
                   f" {self.sign * median:g} of {peers}"
                   f" trials at step {step}")
            if self.finished_only:  # stopped, it never finishes: nothing of it is a peer
                self._pending.pop(trial, None)
                seen[0] = math.inf
        else:
            verdict = Verdict.CONTINUE
            why = (f"its best {self.sign * best:g} is no worse than the median"
                   f" {self.sign * median:g} of {peers}"
                   f" trials at step {step}")
        return Decision(trial, verdict, step, step, best, median, peers,
                        at.best_without(rank), why)

    def _population(self, step: int) -> _Ranked:
        at = self._at.get(step)
        if at is None:
            at = self._at[step] = _Ranked()
        return at

    def promotions(self, stopped: Collection[int]) -> list[Decision]:
        return []  # median stopping never takes a decision back
