"""Pareto fronts and hypervolume: what several objectives optimised together conclude.

Every function here takes *loss vectors*: one tuple per trial, each objective oriented so that
lower is better (a maximised objective negated, as :meth:`dse.Observation.losses` gives
them). Pure and dependency-free (dse-core needs no numpy); exact, in time quadratic in the
number of points for the hypervolume of two objectives (n log n for their ranks), and a sweep
over the last objective for more (fine for the hundreds to thousands of trials a campaign
scores; ``dse report`` reads no more than the run's valid scored trials).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "default_reference",
    "dominates",
    "hypervolume",
    "hypervolume_history",
    "non_dominated",
    "pareto_ranks",
]

Vector = tuple[float, ...]


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether *a* Pareto-dominates *b*: no worse in every objective, better in one (losses:
    lower is better). Equal vectors dominate neither way."""
    better = False
    for x, y in zip(a, b, strict=True):
        if x > y:
            return False
        if x < y:
            better = True
    return better


def pareto_ranks(points: Sequence[Sequence[float]]) -> list[int]:
    """The Pareto rank of each point (non-dominated sorting): 1 for the front (dominated by
    no other point), 2 for the front of what remains, and so on. Equal points share a rank.

    The points are taken in lexicographic order, so a point's dominators all come before it;
    its rank is one more than its highest-ranked dominator's. The layers built so far are
    searched by bisection: a point dominated by someone in layer *k* is dominated by someone
    in every layer below *k* (that one's chain of dominators), so "dominated by layer k" is
    true then false as *k* grows. With two objectives a layer answers in constant time (its
    last point has its lowest second objective): n log n in all.
    """
    order = sorted(range(len(points)), key=lambda i: tuple(points[i]))
    layers: list[list[Sequence[float]]] = []
    ranks = [0] * len(points)
    two = bool(points) and len(points[0]) == 2
    for i in order:
        p = points[i]
        low, high = 0, len(layers)
        while low < high:
            mid = (low + high) // 2
            if _layer_dominates(layers[mid], p, two=two):
                low = mid + 1
            else:
                high = mid
        if low == len(layers):
            layers.append([])
        layers[low].append(p)
        ranks[i] = low + 1
    return ranks


def _layer_dominates(layer: list[Sequence[float]], p: Sequence[float], *, two: bool) -> bool:
    """Whether a point of *layer* (all before *p* in lexicographic order) dominates *p*."""
    if two:
        # The layer's points are mutually non-dominated and sorted: the last has the lowest
        # second objective, and every first objective is at most p's.
        last = layer[-1]
        return last[1] < p[1] or (last[1] == p[1] and last[0] < p[0])
    return any(dominates(q, p) for q in layer)


def non_dominated(points: Sequence[Sequence[float]]) -> list[int]:
    """The indices of the points on the front (rank 1), in their order."""
    return [i for i, rank in enumerate(pareto_ranks(points)) if rank == 1]


def default_reference(points: Sequence[Sequence[float]], margin: float = 0.1) -> Vector:
    """A reference point for the hypervolume when the campaign gives none: the worst value
    of each objective over *points*, plus *margin* of its range (of its magnitude, or 1, when
    the range is 0), so every point counts, the worst in each objective a little."""
    if not points:
        raise ValueError("no points to place a reference point by")
    reference = []
    for column in zip(*points, strict=True):
        worst, best = max(column), min(column)
        span = worst - best or abs(worst) or 1.0
        reference.append(worst + margin * span)
    return tuple(reference)


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """The volume dominated by *points* and bounded by *reference* (points not strictly
    better than the reference in every objective add nothing)."""
    kept = [tuple(p) for p in points if all(x < r for x, r in zip(p, reference, strict=True))]
    if not kept:
        return 0.0
    return _volume(_front(kept), tuple(reference))


def hypervolume_history(
    points: Sequence[Sequence[float]], reference: Sequence[float]
) -> list[float]:
    """The hypervolume of the first 1, 2, … *n* points: how the front grew, trial by trial
    in the order given. Recomputed only when a point improves the front."""
    front: list[Vector] = []
    out: list[float] = []
    volume = 0.0
    ref = tuple(reference)
    for p in points:
        point = tuple(p)
        inside = all(x < r for x, r in zip(point, ref, strict=True))
        if inside and not any(dominates(q, point) or q == point for q in front):
            front = [q for q in front if not dominates(point, q)] + [point]
            volume = _volume(front, ref)
        out.append(volume)
    return out


def _front(points: list[Vector]) -> list[Vector]:
    unique = sorted(set(points))
    return [p for p, rank in zip(unique, pareto_ranks(unique), strict=True) if rank == 1]


def _volume(front: list[Vector], ref: Vector) -> float:
    """The hypervolume of mutually non-dominated (or any) points all inside *ref*."""
    m = len(ref)
    if m == 1:
        return ref[0] - min(p[0] for p in front)
    if m == 2:
        total, last_y = 0.0, ref[1]
        for x, y in sorted(front):
            if y < last_y:
                total += (ref[0] - x) * (last_y - y)
                last_y = y
        return total
    # Sweep the last objective upwards: between two consecutive values, the slice is the
    # (m-1)-dimensional volume of every point at or below the lower one.
    ordered = sorted(front, key=lambda p: p[-1])
    total = 0.0
    for i, point in enumerate(ordered):
        top = ordered[i + 1][-1] if i + 1 < len(ordered) else ref[-1]
        depth = top - point[-1]
        if depth <= 0:
            continue
        below = _front([q[:-1] for q in ordered[: i + 1]])
        total += _volume(below, ref[:-1]) * depth
    return total if math.isfinite(total) else 0.0
