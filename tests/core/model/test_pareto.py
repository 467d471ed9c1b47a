"""Pareto ranks and hypervolume (dse.model._pareto): checked against definitions computed another
way (every pair for dominance, a fine grid for volumes)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dse.model._pareto import (
    default_reference,
    dominates,
    hypervolume,
    hypervolume_history,
    non_dominated,
    pareto_ranks,
)

points_2_3 = st.integers(2, 3).flatmap(lambda m: st.lists(
    st.tuples(*[st.integers(0, 6).map(float)] * m), min_size=1, max_size=14))


@given(points_2_3)
@settings(max_examples=200, deadline=None)
def test_a_dominated_point_is_never_on_the_front_and_every_rank_is_earned(
    points: list[tuple[float, ...]],
) -> None:
    ranks = pareto_ranks(points)
    for i, p in enumerate(points):
        dominators = [ranks[j] for j, q in enumerate(points) if dominates(q, p)]
        # On the front exactly when nothing dominates it; else one above its best dominator's.
        assert ranks[i] == (1 + max(dominators) if dominators else 1)
    assert non_dominated(points) == [i for i, r in enumerate(ranks) if r == 1]


def test_ties_share_a_rank_and_equal_points_do_not_dominate() -> None:
    points = [(1.0, 2.0), (1.0, 2.0), (2.0, 1.0), (2.0, 2.0), (3.0, 3.0)]
    assert not dominates(points[0], points[1])
    assert pareto_ranks(points) == [1, 1, 1, 2, 3]


def test_a_weak_improvement_dominates() -> None:
    assert dominates((1.0, 2.0), (1.0, 3.0))
    assert not dominates((1.0, 3.0), (1.0, 2.0))
    assert not dominates((0.0, 3.0), (1.0, 2.0))


def test_hypervolume_of_known_fronts() -> None:
    assert hypervolume([(1.0, 1.0)], (2.0, 3.0)) == pytest.approx(2.0)
    # Two points: the union of two boxes minus their overlap.
    assert hypervolume([(0.0, 2.0), (2.0, 0.0)], (3.0, 3.0)) == pytest.approx(3 + 3 - 1)
    # Points outside the reference add nothing; a dominated point adds nothing.
    assert hypervolume([(0.0, 2.0), (2.0, 0.0), (4.0, -1.0), (1.0, 2.5)], (3.0, 3.0)) == \
        pytest.approx(5.0)
    assert hypervolume([], (1.0, 1.0)) == 0.0
    assert hypervolume([(0.0, 0.0, 0.0)], (1.0, 2.0, 3.0)) == pytest.approx(6.0)


def _grid_volume(points: list[tuple[float, ...]], reference: tuple[float, ...]) -> float:
    """The dominated volume counted cell by cell on the integer grid (integer points)."""
    m = len(reference)
    cells = itertools.product(*[range(0, int(r)) for r in reference])
    return float(sum(1 for c in cells
                     if any(all(p[j] <= c[j] for j in range(m)) for p in points)))


@pytest.mark.parametrize("m", [2, 3, 4])
def test_hypervolume_matches_a_count_of_grid_cells(m: int) -> None:
    rng = random.Random(m)
    for _ in range(25):
        points = [tuple(float(rng.randint(0, 5)) for _ in range(m))
                  for _ in range(rng.randint(1, 8))]
        reference = tuple(6.0 for _ in range(m))
        assert hypervolume(points, reference) == pytest.approx(_grid_volume(points, reference))


def test_the_history_grows_only_when_the_front_does() -> None:
    points = [(3.0, 3.0), (4.0, 4.0), (1.0, 3.0), (3.0, 1.0), (3.0, 1.0), (0.5, 0.5)]
    history = hypervolume_history(points, (5.0, 5.0))
    assert history == pytest.approx([4.0, 4.0, 8.0, 12.0, 12.0, 20.25])
    assert history[-1] == pytest.approx(hypervolume(points, (5.0, 5.0)))


def test_the_default_reference_is_beyond_the_worst_value() -> None:
    assert default_reference([(0.0, 10.0), (2.0, 20.0)]) == pytest.approx((2.2, 21.0))
    # A constant objective: a tenth of its magnitude beyond it (else 1).
    assert default_reference([(5.0, 0.0), (5.0, 0.0)]) == pytest.approx((5.5, 0.1))
    with pytest.raises(ValueError, match="no points"):
        default_reference([])
