"""The stopping rules dse-core ships: median stopping, asynchronous successive halving (ASHA)
and Hyperband (brackets of ASHA).

Each satisfies :class:`dse.StoppingRule`: it sees trial numbers, steps and values oriented so
that lower is better, and nothing of the engine. Each is deterministic: reporting the same
points in the same order rebuilds the same state (a resumed run does exactly that).
``docs/stopping.md`` says what each decides and when.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, ClassVar

from dse._errors import ConfigError
from dse._types import MAX_COMPARED, Decision, Verdict

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["AshaRule", "HyperbandRule", "MedianRule", "rungs"]


def _check(name: str, value: object, *, least: float, whole: bool = True) -> None:
    kind = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value < least:
        what = "a whole number" if whole else "a number"
        raise ConfigError(f"{name}: expected {what} >= {least:g}, got {value!r}")


def rungs(min_step: int, max_step: int, eta: float) -> list[int]:
    """The rungs of ASHA from *min_step* below *max_step*: ``min_step * eta**k``, rounded
    to whole steps (distinct, increasing)."""
    out: list[int] = []
    k = 0
    while True:
        step = round(min_step * eta**k)
        if step >= max_step:
            return out
        if not out or step > out[-1]:
            out.append(step)
        k += 1


def _compared(peers: dict[int, float]) -> tuple[tuple[int, float], ...]:
    best = sorted(peers.items(), key=lambda item: (item[1], item[0]))
    return tuple(best[:MAX_COMPARED])


class AshaRule:
    """Asynchronous successive halving, in rolling mode: no brackets to fill, no waiting.

    A trial reaching a rung (``min_step * reduction_factor**k`` steps) goes on when it is in
    the best ``1/reduction_factor`` of the trials that reached that rung so far (always the
    best one), and is stopped otherwise. A stopped trial is promoted later when it is among
    the best ``n // reduction_factor`` of the ``n`` trials at its rung by then (ASHA's own
    promotion rule): its peers did worse than the first comparison expected.
    """

    name: ClassVar[str] = "asha"
    version: ClassVar[str] = "1"

    def __init__(self, *, min_step: int, max_step: int, reduction_factor: float = 3,
                 min_peers: int = 0) -> None:
        _check("stopping.asha.reduction_factor", reduction_factor, least=2, whole=False)
        _check("stopping.asha.min_peers", min_peers, least=0)
        self.eta = float(reduction_factor)
        self.min_peers = min_peers
        self.max_step = max_step
        self.rungs = rungs(min_step, max_step, self.eta)
        self._at: list[dict[int, float]] = [{} for _ in self.rungs]
        """Per rung: each trial that reached it and its value there."""
        self._step_at: list[dict[int, int]] = [{} for _ in self.rungs]
        self._reached: dict[int, int] = {}
        """Trial -> index of the highest rung it reached."""
        self.bracket: int | None = None

    def report(self, trial: int, step: int, value: float) -> Decision | None:
        if step >= self.max_step:
            return None
        reached = self._reached.get(trial, -1)
        top = reached
        for k in range(reached + 1, len(self.rungs)):
            if self.rungs[k] > step:
                break
            self._at[k][trial] = value
            self._step_at[k][trial] = step
            top = k
        if top == reached:
            return None
        self._reached[trial] = top
        return self._decide(trial, top)

    def _decide(self, trial: int, k: int) -> Decision:
        at = self._at[k]
        value = at[trial]
        peers = {t: v for t, v in at.items() if t != trial}
        n = len(at)
        keep = max(1, int(n // self.eta))
        ordered = sorted(at.values())
        cutoff = ordered[keep - 1] if peers else None
        better = sum(1 for v in peers.values() if v < value)
        rung = self.rungs[k]
        if len(peers) < self.min_peers or better < keep:
            verdict = Verdict.CONTINUE
            why = (f"{value:g} is among the best {keep} of {n} trials at step {rung}"
                   if len(peers) >= self.min_peers else
                   f"{len(peers)} peers at step {rung}, fewer than {self.min_peers}")
        else:
            verdict = Verdict.STOP
            why = (f"{value:g} is not among the best {keep} of {n} trials at step {rung}"
                   f" (1/{self.eta:g}; the cut is {cutoff:g})")
        return Decision(trial, verdict, rung, self._step_at[k][trial], value, cutoff,
                        len(peers), _compared(peers), why, self.bracket)

    def promotions(self, stopped: Collection[int]) -> list[Decision]:
        out: list[Decision] = []
        chosen: set[int] = set()
        for k in range(len(self.rungs) - 1, -1, -1):  # the highest rung first
            at = self._at[k]
            keep = int(len(at) // self.eta)
            if keep < 1:
                continue
            best = sorted(at.items(), key=lambda item: (item[1], item[0]))[:keep]
            cutoff = best[-1][1]
            rung = self.rungs[k]
            for trial, value in best:
                if trial in stopped and trial not in chosen and self._reached.get(trial) == k:
                    chosen.add(trial)
                    peers = {t: v for t, v in at.items() if t != trial}
                    out.append(Decision(
                        trial, Verdict.PROMOTE, rung, self._step_at[k][trial], value, cutoff,
                        len(peers), _compared(peers),
                        f"{value:g} is now among the best {keep} of {len(at)} trials at step"
                        f" {rung}", self.bracket))
        return out


class HyperbandRule:
    """Hyperband as brackets of ASHA: each trial is given a bracket by its number (in the
    proportions of Hyperband's brackets), and each bracket is an ASHA of its own whose
    smallest rung is ``min_step * reduction_factor**b``; trials are compared only within their
    bracket. The last bracket has no rung below ``max_step``: its trials run to the end."""

    name: ClassVar[str] = "hyperband"
    version: ClassVar[str] = "1"

    def __init__(self, *, min_step: int, max_step: int, reduction_factor: float = 3) -> None:
        _check("stopping.hyperband.reduction_factor", reduction_factor, least=2, whole=False)
        eta = float(reduction_factor)
        s_max = len(rungs(min_step, max_step, eta))  # the last bracket stops nothing
        self.brackets: list[AshaRule] = []
        cycle: list[int] = []
        for b in range(s_max + 1):
            rule = AshaRule(min_step=max(1, round(min_step * eta**b)), max_step=max_step,
                            reduction_factor=eta)
            rule.bracket = b
            self.brackets.append(rule)
            s = s_max - b  # Hyperband's s: the most trials start in the most aggressive
            cycle += [b] * math.ceil((s_max + 1) / (s + 1) * eta**s)
        self._cycle = _interleave(cycle)

    def bracket_of(self, trial: int) -> int:
        """The bracket of trial number *trial* (a fixed cycle in Hyperband's proportions)."""
        return self._cycle[(trial - 1) % len(self._cycle)]

    def report(self, trial: int, step: int, value: float) -> Decision | None:
        return self.brackets[self.bracket_of(trial)].report(trial, step, value)

    def promotions(self, stopped: Collection[int]) -> list[Decision]:
        out: list[Decision] = []
        for rule in self.brackets:
            mine = {t for t in stopped if self.bracket_of(t) == rule.bracket}
            out += rule.promotions(mine)
        return out


def _interleave(cycle: list[int]) -> list[int]:
    """*cycle*'s items spread out evenly (each bracket's share through the cycle, not in one
    run), deterministically."""
    counts: dict[int, int] = {}
    for b in cycle:
        counts[b] = counts.get(b, 0) + 1
    total = len(cycle)
    keyed = [((i + 0.5) / n, b) for b, n in counts.items() for i in range(n)]
    return [b for _, b in sorted(keyed)][:total]


class MedianRule:
    """Median stopping: from ``min_step`` on, every ``interval`` steps, a trial whose best
    value so far is worse than the median of the values other trials reported at the same
    step is stopped (once at least ``min_peers`` of them have)."""

    name: ClassVar[str] = "median"
    version: ClassVar[str] = "1"

    def __init__(self, *, min_step: int, max_step: int, min_peers: int = 5,
                 interval: int = 1) -> None:
        _check("stopping.median.min_peers", min_peers, least=1)
        _check("stopping.median.interval", interval, least=1)
        self.min_step = min_step
        self.max_step = max_step
        self.min_peers = min_peers
        self.interval = interval
        self._at: dict[int, dict[int, float]] = {}
        """Step -> each trial's value reported at it."""
        self._best: dict[int, float] = {}

    def report(self, trial: int, step: int, value: float) -> Decision | None:
        self._at.setdefault(step, {})[trial] = value
        best = min(self._best.get(trial, math.inf), value)
        self._best[trial] = best
        if step < self.min_step or step >= self.max_step:
            return None
        if (step - self.min_step) % self.interval:
            return None
        peers = {t: v for t, v in self._at[step].items() if t != trial}
        if len(peers) < self.min_peers:
            return None
        median = statistics.median(peers.values())
        if best > median:
            verdict = Verdict.STOP
            why = (f"its best {best:g} is worse than the median {median:g} of {len(peers)}"
                   f" trials at step {step}")
        else:
            verdict = Verdict.CONTINUE
            why = f"its best {best:g} is no worse than the median {median:g} at step {step}"
        return Decision(trial, verdict, step, step, best, median, len(peers),
                        _compared(peers), why)

    def promotions(self, stopped: Collection[int]) -> list[Decision]:
        return []
