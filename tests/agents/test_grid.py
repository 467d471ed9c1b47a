"""The grid agent: the full Cartesian product, lazily, in declared order."""

from __future__ import annotations

import json
import math
import time

import pytest

import dse
from dse_agents import GridAgent
from support.probe import run_on_probe


def space(*params: dse.Parameter) -> dse.Space:
    return dse.Space(params)


def test_grid_order_puts_the_last_parameter_fastest():
    agent = GridAgent(space(dse.Categorical("a", ("x", "y")), dse.IntRange("b", 1, 3)))

    assert agent.propose(10, []) == [
        {"a": "x", "b": 1},
        {"a": "x", "b": 2},
        {"a": "x", "b": 3},
        {"a": "y", "b": 1},
        {"a": "y", "b": 2},
        {"a": "y", "b": 3},
    ]


def test_proposals_come_in_batches_of_at_most_n_and_continue_where_they_stopped():
    agent = GridAgent(space(dse.Categorical("a", ("x", "y")), dse.IntRange("b", 1, 3)))

    batches = [agent.propose(n, []) for n in (4, 1, 4, 4)]

    assert [len(b) for b in batches] == [4, 1, 1, 0]
    assert [p["b"] for b in batches for p in b] == [1, 2, 3, 1, 2, 3]


def test_an_int_step_visits_every_step():
    agent = GridAgent(space(dse.IntRange("n", 0, 10, step=4)))

    assert agent.propose(10, []) == [{"n": 0}, {"n": 4}, {"n": 8}]


def test_a_float_with_a_step_visits_every_step():
    agent = GridAgent(space(dse.FloatRange("f", 0.0, 1.0, step=0.25)))

    assert [p["f"] for p in agent.propose(10, [])] == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_a_float_without_a_step_gets_points_values_including_both_ends():
    agent = GridAgent(space(dse.FloatRange("f", 0.0, 1.0)), points=3)

    assert [p["f"] for p in agent.propose(10, [])] == [0.0, 0.5, 1.0]


def test_a_log_float_without_a_step_is_spaced_on_a_log_scale():
    agent = GridAgent(space(dse.FloatRange("lr", 1e-4, 1.0, log=True)), points=5)

    values = [p["lr"] for p in agent.propose(10, [])]

    assert values[0] == 1e-4
    assert values[-1] == 1.0
    assert [math.log10(v) for v in values] == pytest.approx([-4, -3, -2, -1, 0])


def test_points_defaults_to_five():
    agent = GridAgent(space(dse.FloatRange("f", 0.0, 1.0)))

    assert [p["f"] for p in agent.propose(10, [])] == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_exhausted_turns_true_with_the_last_point_handed_out():
    agent = GridAgent(space(dse.Categorical("a", ("x", "y")), dse.IntRange("b", 1, 3)))

    assert agent.size == 6
    assert agent.exhausted is False
    assert len(agent.propose(5, [])) == 5
    assert agent.exhausted is False
    assert agent.propose(1, []) == [{"a": "y", "b": 3}]
    assert agent.exhausted is True
    assert agent.propose(3, []) == []


def test_exhausted_turns_true_when_a_batch_reaches_past_the_end():
    agent = GridAgent(space(dse.IntRange("b", 1, 3)))

    assert len(agent.propose(7, [])) == 3
    assert agent.exhausted is True


def test_a_huge_grid_is_walked_lazily():
    huge = space(*(dse.IntRange(f"p{i}", 0, 999) for i in range(4)))
    started = time.perf_counter()

    agent = GridAgent(huge)
    first = agent.propose(3, [])

    # Materialising 10^12 points would take hours; this guards against it, not a benchmark.
    assert time.perf_counter() - started < 5.0
    assert agent.size == 10**12
    assert first == [
        {"p0": 0, "p1": 0, "p2": 0, "p3": 0},
        {"p0": 0, "p1": 0, "p2": 0, "p3": 1},
        {"p0": 0, "p1": 0, "p2": 0, "p3": 2},
    ]
    assert agent.exhausted is False


def test_a_single_enormous_int_range_is_not_materialised():
    agent = GridAgent(space(dse.IntRange("seed", 0, 2**62)))

    assert agent.propose(2, []) == [{"seed": 0}, {"seed": 1}]
    assert agent.size == 2**62 + 1


def test_every_grid_point_coerces_to_itself():
    mixed = space(
        dse.Categorical("c", ("a", 1, True)),
        dse.IntRange("i", 2, 64, log=True, step=2),
        dse.FloatRange("f", 0.1, 0.3, step=0.1),
        dse.FloatRange("g", 1e-3, 1e-1, log=True),
    )
    agent = GridAgent(mixed, points=3)

    points = agent.propose(10_000, [])

    assert len(points) == 3 * 32 * 3 * 3
    assert agent.exhausted is True
    assert all(mixed.coerce(p) == p for p in points)


def test_the_seed_does_not_change_the_grid():
    grid = space(dse.Categorical("a", ("x", "y")), dse.FloatRange("f", 0.0, 1.0))

    assert GridAgent(grid, seed=1).propose(100, []) == GridAgent(grid, seed=2).propose(100, [])


def test_observations_do_not_change_the_grid():
    grid = space(dse.IntRange("b", 1, 4))
    agent = GridAgent(grid)
    first = agent.propose(2, [])

    agent.observe([dse.Observation(params=p, status=dse.TrialStatus.FAILED) for p in first])

    assert agent.propose(5, first) == [{"b": 3}, {"b": 4}]


def test_an_unknown_option_is_a_config_error():
    with pytest.raises(dse.ConfigError, match=r"agent\.grid: unknown option\(s\) \['pionts'\]"):
        GridAgent(space(dse.IntRange("b", 1, 4)), seed=0, **{"pionts": 3})


@pytest.mark.parametrize("points", [1, 0, "5", 2.0, True])
def test_points_must_be_an_integer_of_at_least_two(points):
    with pytest.raises(dse.ConfigError, match=r"agent\.grid\.points: expected an integer >= 2"):
        GridAgent(space(dse.FloatRange("f", 0.0, 1.0)), points=points)


def test_a_grid_campaign_runs_every_point_and_ends_exhausted(tmp_path):
    campaign = dse.campaign_from_dict(
        {
            "campaign": {"name": "grid", "agent": "grid", "max_parallelism": 4},
            "agent": {"grid": {"points": 3}},
            "space": {"kind": ["a", "b"], "f": {"type": "float", "low": 0.0, "high": 1.0}},
            "objectives": [{"metric": "value"}],
        },
        workspace=tmp_path,
    )
    result, rows = run_on_probe(campaign)

    assert result.end_reason == "agent_exhausted"
    assert [r["status"] for r in rows] == ["completed"] * 6
    assert [json.loads(r["params"]) for r in rows] == [
        {"kind": k, "f": f} for k in ("a", "b") for f in (0.0, 0.5, 1.0)
    ]
