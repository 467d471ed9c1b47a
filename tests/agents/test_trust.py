"""The Bayesian agent's trust region for many parameters."""

from __future__ import annotations

import numpy as np

import dse
from dse_agents import BayesianAgent
from dse_agents._trust import MIN_COLUMNS, trust_box, trust_length
from support.waves import completed, run_waves


def test_the_region_grows_after_three_improvements_and_shrinks_after_a_dry_run() -> None:
    design = [5.0, 4.0, 6.0]  # the start: never counted
    assert trust_length(design, 3, 12) == 0.8
    assert trust_length([*design, 3.0, 2.0, 1.0], 3, 12) == 1.6
    assert trust_length([*design, 3.0, 2.0, 1.0, 0.5, 0.25, 0.1], 3, 12) == 1.6  # longest
    # Three improvements, each after a miss: not in a row, so the region keeps its size.
    assert trust_length([*design, 3.0, 9.0, 2.0, 9.0, 1.0], 3, 12) == 0.8
    dry = [*design, *[9.0] * 12]  # twelve results, none better: halved once
    assert trust_length(dry, 3, 12) == 0.4
    # A failure (None) is a result without an improvement; a tiny gain is none either.
    assert trust_length([*design, *[None] * 11, 4.0 - 1e-6], 3, 12) == 0.4
    # Shorter than 0.5**7: back to the start.
    assert trust_length([*design, *[9.0] * (12 * 7)], 3, 12) == 0.8
    assert trust_length([*design, *[9.0] * 4], 3, 4) == 0.4  # patience at least 4


def test_the_box_follows_the_length_scales_around_the_centre_inside_the_cube() -> None:
    lo, hi = trust_box(np.array([0.5, 0.5, 0.95]), np.array([0.1, 0.4, 0.2]), 0.2)
    widths = hi - lo
    assert widths[1] > widths[2] > widths[0]  # proportional to the length scales
    np.testing.assert_allclose(widths[:2] / widths[:2].sum(), [0.2, 0.8])
    assert hi[2] == 1.0
    assert lo[2] < 0.95 < hi[2]
    # The geometric mean of the sides is the region's length.
    lo, hi = trust_box(np.full(3, 0.5), np.array([0.1, 0.4, 0.2]), 0.4)
    assert np.isclose(np.exp(np.mean(np.log(hi - lo))), 0.4)


def test_columns_switched_off_by_long_length_scales_do_not_squeeze_the_others() -> None:
    # Two columns that matter (length 1) among eight the model switched off (length 100):
    # the box keeps the ones that matter about as wide as the region, not 0.8 / 100**0.8.
    scales = np.array([1.0, 1.0] + [100.0] * 8)
    lo, hi = trust_box(np.full(10, 0.5), scales, 0.8)
    sides = hi - lo
    assert sides[0] == sides[1]
    assert sides[0] > 0.4, sides
    assert (sides[2:] >= sides[0]).all()


def test_with_many_parameters_proposals_stay_in_the_region_around_the_best() -> None:
    columns = MIN_COLUMNS + 2
    space = dse.Space(tuple(dse.FloatRange(f"x{i}", 0.0, 1.0) for i in range(columns)))

    def loss(p: dict[str, float]) -> float:
        return sum((p[f"x{i}"] - 0.3) ** 2 for i in range(columns))

    agent = BayesianAgent(space, seed=1)
    number, boxes = 0, 0
    for wave in range(10):
        batch = [space.coerce(p) for p in agent.propose(4, [])]
        if wave * 4 >= 2 * columns:  # past the design: from the model, in the region
            lo, hi = agent._maximiser._lo, agent._maximiser._hi  # the box searched last
            assert np.prod(hi - lo) < 0.5  # smaller than the cube
            for params in batch[-1:]:  # the last pick of the batch is the box's
                point = np.array([params[f"x{i}"] for i in range(columns)])
                assert np.all(point >= lo - 1e-12), (point, lo)
                assert np.all(point <= hi + 1e-12), (point, hi)
            boxes += 1
        observations = []
        for params in batch:
            number += 1
            observations.append(completed(params, number, loss(params)))
        agent.observe(observations)
    assert boxes >= 3


def test_with_fewer_parameters_the_whole_cube_is_searched() -> None:
    space = dse.Space(tuple(dse.FloatRange(f"x{i}", 0.0, 1.0) for i in range(MIN_COLUMNS - 1)))
    agent = BayesianAgent(space, seed=1)
    run_waves(agent, space, lambda p: sum(v**2 for v in p.values()), trials=24, p=4)
    np.testing.assert_array_equal(agent._maximiser._lo, np.zeros(MIN_COLUMNS - 1))
    np.testing.assert_array_equal(agent._maximiser._hi, np.ones(MIN_COLUMNS - 1))
