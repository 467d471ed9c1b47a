"""The cells of search_quality.py's report: a set of runs by function, setting and method,
their medians and quartiles, dse bayesian's ratio to the best peer and its waves/rolling
ratio, and the same ratios as paired per-seed geometric means above each function's solved
floor (issue 44).

**Solved floor**: a regret below :data:`SOLVED_FRACTION` (1e-4) of the function's range counts
as solved, and two solved runs as equal: the range is f's spread over
:data:`RANGE_POINTS` seeded uniform points of the space (their largest f minus f*), not the
``worst`` value charged to a run with no feasible point (for ``embedded20`` that is f's
maximum in a corner of the box, 30x the spread of f anywhere a search looks).

**Paired per-seed geometric mean**: over the seeds both cells have, the geometric mean of the
per-seed ratios max(a, floor) / max(b, floor): seed s of one method against seed s of the other
(the same evaluations: durations, noise), so a ratio is not decided by which seeds happened to
land in the middle of each cell.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
from typing import TYPE_CHECKING

from _bench import quartiles
from _sq_peers import AX_METHOD, OPTUNA_SAMPLERS
from _sq_problems import PROBLEMS, random_point

if TYPE_CHECKING:
    from _sq_runs import RunResult

PEER_METHODS = (*OPTUNA_SAMPLERS, AX_METHOD)
EPS = 1e-9
SOLVED_FRACTION = 1e-4
RANGE_POINTS = 4096
WAVES, ROLLING = "P=4 waves", "P=4 rolling"


@functools.cache
def solved_floor(key: str) -> float:
    """The regret below which a run of function *key* counts as solved: 1e-4 of f's range
    over :data:`RANGE_POINTS` seeded uniform points."""
    problem = PROBLEMS[key]
    rng = random.Random("solved-floor")  # the same points for the same space
    top = max(problem.f(random_point(problem.space, rng)) for _ in range(RANGE_POINTS))
    return SOLVED_FRACTION * (top - problem.optimum)


def fmt(value: float | None) -> str:
    """A regret or a ratio to three significant digits (``-`` for none)."""
    if value is None or math.isnan(value):
        return "-"
    if value == 0:
        return "0"
    return f"{value:.3g}" if abs(value) >= 1e-3 else f"{value:.2e}"


def ratio(mine: float, theirs: float, floor: float = EPS) -> float:
    """*mine* over *theirs*, each raised to *floor* first."""
    return max(mine, floor) / max(theirs, floor)


def paired_geomean(mine: dict[int, float], theirs: dict[int, float], floor: float
                   ) -> float | None:
    """Over the seeds both have, the geometric mean of the per-seed ratios of the regrets
    *mine* over *theirs* (by seed), each raised to *floor* first; ``None`` with no common
    seed."""
    common = sorted(mine.keys() & theirs.keys())
    if not common:
        return None
    logs = [math.log(ratio(mine[s], theirs[s], floor)) for s in common]
    return round(math.exp(statistics.fmean(logs)), 4)


class Report:
    """The runs of a report by cell (function, setting, method), and what the tables say of
    them; *from_log* holds the task keys of the peers' runs read from the peers' log."""

    def __init__(self, results: list[RunResult], methods: list[str], settings: list[str],
                 from_log: set[tuple[str, str, str, int, int]] | None = None) -> None:
        self.methods = methods
        self.settings = settings
        self.from_log = from_log or set()
        self.cells: dict[tuple[str, str, str], list[RunResult]] = {}
        for r in results:
            self.cells.setdefault((r.task.problem, r.task.setting, r.task.method), []).append(r)

    def runs(self, key: str, label: str, method: str) -> list[RunResult]:
        return self.cells.get((key, label, method), [])

    def label(self, key: str, method: str) -> str:
        """*method*'s row name on function *key*: marked ``(log)`` when all its runs there
        were read from the peers' log, ``(log part)`` when some were."""
        runs = [r for s in self.settings for r in self.runs(key, s, method)]
        logged = sum(r.task.key in self.from_log for r in runs)
        if not logged:
            return method
        return f"{method} (log)" if logged == len(runs) else f"{method} (log part)"

    def median(self, key: str, label: str, method: str, field: str = "regret") -> float | None:
        values = [getattr(r, field) for r in self.runs(key, label, method)]
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    def mean(self, key: str, label: str, method: str, field: str) -> float | None:
        runs = self.runs(key, label, method)
        return statistics.fmean(getattr(r, field) for r in runs) if runs else None

    def cell(self, key: str, label: str, method: str, field: str = "regret") -> str:
        values = [getattr(r, field) for r in self.runs(key, label, method)]
        if not values:
            return "-"
        low, high = quartiles(values)
        return f"{fmt(statistics.median(values))} ({fmt(low)}-{fmt(high)})"

    def best_peer(self, key: str, label: str) -> tuple[str, float] | None:
        found = [(m, v) for m in PEER_METHODS if (v := self.median(key, label, m)) is not None]
        return min(found, key=lambda item: item[1]) if found else None

    def ratio(self, key: str, label: str, method: str = "dse bayesian") -> float | None:
        mine, best = self.median(key, label, method), self.best_peer(key, label)
        if mine is None or best is None:
            return None
        return round(ratio(mine, best[1]), 4)

    def waves_over_rolling(self, key: str, method: str = "dse bayesian",
                           floor: float = EPS) -> float | None:
        """*method*'s median at P=4 waves over its median rolling, each raised to *floor*."""
        waves, rolling = self.median(key, WAVES, method), self.median(key, ROLLING, method)
        if waves is None or rolling is None:
            return None
        return round(ratio(waves, rolling, floor), 4)

    def paired(self, key: str, mine: tuple[str, str], theirs: tuple[str, str]) -> float | None:
        """The paired per-seed geometric mean of the regrets of cell *mine* (setting, method)
        over cell *theirs*, above the function's solved floor; ``None`` with no common seed."""
        a = {r.task.seed: r.regret for r in self.runs(key, *mine)}
        b = {r.task.seed: r.regret for r in self.runs(key, *theirs)}
        return paired_geomean(a, b, solved_floor(key))

    def ratio_geomean(self, key: str, label: str, method: str = "dse bayesian") -> float | None:
        """:meth:`paired` of *method* over the best peer (by median) in setting *label*."""
        best = self.best_peer(key, label)
        return None if best is None else self.paired(key, (label, method), (label, best[0]))

    def waves_rolling_geomean(self, key: str, method: str = "dse bayesian") -> float | None:
        """:meth:`paired` of *method* at P=4 waves over itself rolling."""
        return self.paired(key, (WAVES, method), (ROLLING, method))
