"""The random agent: seeded, batching-independent, without repeats in a finite space."""

from __future__ import annotations

import json
from typing import Any

import pytest

import dse
from dse_agents import GridAgent, RandomAgent
from support.probe import run_on_probe


def key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


@pytest.fixture
def finite_space() -> dse.Space:
    """3 x 4 x 2 = 24 points."""
    return dse.Space(
        (
            dse.Categorical("a", ("x", "y", "z")),
            dse.IntRange("b", 1, 4),
            dse.FloatRange("c", 0.5, 1.0, step=0.5),
        )
    )


@pytest.fixture
def infinite_space() -> dse.Space:
    return dse.Space(
        (
            dse.Categorical("opt", ("sgd", "adam")),
            dse.IntRange("batch", 8, 512, log=True),
            dse.FloatRange("lr", 1e-5, 1e-1, log=True),
            dse.FloatRange("dropout", 0.0, 0.5),
            dse.FloatRange("momentum", 0.0, 0.9, step=0.1),
        )
    )


@pytest.fixture(params=["finite", "infinite"])
def any_space(request: pytest.FixtureRequest) -> dse.Space:
    return request.getfixturevalue(f"{request.param}_space")


def test_the_same_seed_gives_the_same_proposals(any_space):
    first = RandomAgent(any_space, seed=42).propose(20, [])
    second = RandomAgent(any_space, seed=42).propose(20, [])

    assert len(first) == 20
    assert first == second


def test_another_seed_gives_other_proposals(any_space):
    assert RandomAgent(any_space, seed=1).propose(20, []) != RandomAgent(any_space, seed=2).propose(
        20, []
    )


def test_the_sequence_does_not_depend_on_batching(any_space):
    whole = RandomAgent(any_space, seed=5)
    single = RandomAgent(any_space, seed=5)
    mixed = RandomAgent(any_space, seed=5)

    batch = whole.propose(4, []) + whole.propose(12, [])
    one_by_one = [p for _ in range(16) for p in single.propose(1, [])]
    uneven = [p for n in (3, 1, 5, 2, 5) for p in mixed.propose(n, [])]

    assert len(batch) == 16
    assert batch == one_by_one == uneven


def test_observing_consumes_no_randomness(any_space):
    quiet = RandomAgent(any_space, seed=9)
    told = RandomAgent(any_space, seed=9)

    expected = quiet.propose(6, [])
    got = []
    for _ in range(3):
        batch = told.propose(2, got)
        told.observe(
            [dse.Observation(params=p, status=dse.TrialStatus.COMPLETED, score=1.0) for p in batch]
        )
        got.extend(batch)

    assert got == expected


def test_a_finite_space_is_drawn_without_repeats_and_exhausts_exactly_at_its_size(
    finite_space,
):
    agent = RandomAgent(finite_space, seed=3)

    drawn = []
    for _ in range(23):
        drawn.extend(agent.propose(1, []))
        assert agent.exhausted is False
    drawn.extend(agent.propose(1, []))

    assert agent.exhausted is True
    assert agent.propose(5, []) == []
    everything = GridAgent(finite_space).propose(100, [])
    assert len(drawn) == 24
    assert sorted(map(key, drawn)) == sorted(map(key, everything))
    assert drawn != everything  # shuffled, not the grid order


def test_a_batch_past_the_end_of_a_finite_space_is_cut_short(finite_space):
    agent = RandomAgent(finite_space, seed=3)

    assert len(agent.propose(20, [])) == 20
    assert len(agent.propose(20, [])) == 4
    assert agent.exhausted is True


def test_a_finite_space_with_log_parameters_is_drawn_without_repeats():
    space = dse.Space(
        (
            dse.IntRange("n", 1, 64, log=True),
            dse.FloatRange("f", 0.1, 1.6, step=0.1, log=True),
            dse.Categorical("c", (True, False)),
        )
    )
    agent = RandomAgent(space, seed=11)

    drawn = [p for _ in range(space.cardinality or 0) for p in agent.propose(1, [])]

    assert len(drawn) == 64 * 16 * 2
    assert len(set(map(key, drawn))) == len(drawn)
    assert agent.exhausted is True
    assert agent.propose(1, []) == []
    assert all(space.coerce(p) == p for p in drawn)


def test_an_empty_finite_space_is_exhausted_at_once():
    agent = RandomAgent(dse.Space((dse.Categorical("c", ()),)), seed=0)

    assert agent.exhausted is True
    assert agent.propose(3, []) == []


def test_a_huge_finite_space_is_drawn_without_materialising_it():
    huge = dse.Space(tuple(dse.IntRange(f"p{i}", 0, 999) for i in range(4)))
    agent = RandomAgent(huge, seed=0)

    drawn = agent.propose(2000, [])

    assert len(set(map(key, drawn))) == 2000
    assert agent.exhausted is False
    assert all(huge.coerce(p) == p for p in drawn)


def test_an_infinite_space_never_exhausts_and_stays_inside_it(infinite_space):
    agent = RandomAgent(infinite_space, seed=1)

    drawn = agent.propose(2000, [])

    assert len(drawn) == 2000
    assert agent.exhausted is False
    for params in drawn:
        assert infinite_space.coerce(params) == params
        assert 8 <= params["batch"] <= 512
        assert 1e-5 <= params["lr"] <= 1e-1
        assert 0.0 <= params["dropout"] <= 0.5


def test_a_log_int_is_drawn_log_uniformly_in_an_infinite_space(infinite_space):
    agent = RandomAgent(infinite_space, seed=2)

    batches = [p["batch"] for p in agent.propose(4000, [])]

    # log-uniform on [8, 513): half the draws fall below sqrt(8 * 513) ~ 64.
    below = sum(b < 64 for b in batches) / len(batches)
    assert 0.45 < below < 0.55
    assert min(batches) == 8
    assert max(batches) == 512


def test_a_log_float_is_drawn_log_uniformly(infinite_space):
    agent = RandomAgent(infinite_space, seed=2)

    lrs = [p["lr"] for p in agent.propose(4000, [])]

    # One decade in four of [1e-5, 1e-1] on a log scale.
    per_decade = [sum(10**e <= lr < 10 ** (e + 1) for lr in lrs) for e in range(-5, -1)]
    assert all(900 < count < 1100 for count in per_decade)


def test_a_log_int_is_drawn_log_uniformly_in_a_finite_space():
    space = dse.Space((dse.IntRange("n", 1, 1000, log=True), dse.Categorical("c", ("a", "b"))))
    agent = RandomAgent(space, seed=4)

    first = [p["n"] for p in agent.propose(50, [])]

    # Uniform draws would put 3% (1.5 of 50) below 32, log-uniform ones half; the 62 points
    # there run out as they are drawn, so somewhat fewer than half.
    assert sum(n < 32 for n in first) >= 15


def test_every_parameter_kind_is_drawn_and_coerces():
    space = dse.Space(
        (
            dse.Categorical("c", ("a", 2, False)),
            dse.IntRange("i", -5, 5, step=5),
            dse.IntRange("li", 1, 1024, log=True),
            dse.FloatRange("f", -1.0, 1.0),
            dse.FloatRange("lf", 1e-3, 1e3, log=True),
            dse.FloatRange("sf", 0.0, 1.0, step=0.25),
        )
    )
    drawn = RandomAgent(space, seed=8).propose(500, [])

    assert all(space.coerce(p) == p for p in drawn)
    assert {p["c"] for p in drawn} == {"a", 2, False}
    assert {p["i"] for p in drawn} == {-5, 0, 5}
    assert {p["sf"] for p in drawn} == {0.0, 0.25, 0.5, 0.75, 1.0}


def test_in_flight_params_are_ignored(finite_space):
    plain = RandomAgent(finite_space, seed=6).propose(5, [])
    agent = RandomAgent(finite_space, seed=6)

    assert agent.propose(5, plain[:2]) == plain


@pytest.mark.parametrize("options", [{"sobol": True}, {"points": 5}, {"sead": 1}])
def test_an_unknown_option_is_a_config_error(finite_space, options):
    with pytest.raises(dse.ConfigError, match=r"agent\.random: unknown option\(s\)"):
        RandomAgent(finite_space, seed=0, **options)


def _trajectory(tmp_path, parallelism: int) -> list[dict[str, Any]]:
    campaign = dse.campaign_from_dict(
        {
            "campaign": {
                "name": "random",
                "agent": "random",
                "seed": 17,
                "max_parallelism": parallelism,
                "max_trials": 12,
            },
            "space": {"k": ["a", "b"], "x": {"type": "float", "low": 0.0, "high": 1.0}},
            "objectives": [{"metric": "value"}],
        },
        workspace=tmp_path / f"ws-{parallelism}",
    )
    result, rows = run_on_probe(campaign)
    assert result.end_reason == "max_trials"
    return [json.loads(r["params"]) for r in rows]


def test_a_random_campaign_does_not_depend_on_its_parallelism(tmp_path):
    sequential = _trajectory(tmp_path, 1)

    assert len(sequential) == 12
    for parallelism in (3, 5):
        assert _trajectory(tmp_path, parallelism) == sequential


def test_params_come_in_declared_order(any_space):
    agent = RandomAgent(any_space, seed=0)

    assert all(list(p) == list(any_space.names) for p in agent.propose(10, []))


@pytest.mark.parametrize("log_space", [False, True])
def test_a_restored_snapshot_continues_the_same_sequence(any_space, log_space):
    space = any_space
    if log_space:  # a finite space with a log-scaled parameter draws through its own path
        space = dse.Space((dse.IntRange("n", 1, 64, log=True), dse.Categorical("k", (1, 2))))
    whole = RandomAgent(space, seed=9)
    first = whole.propose(7, [])
    rest = whole.propose(9, [])

    before = RandomAgent(space, seed=9)
    before.propose(7, [])
    state = json.loads(json.dumps(before.snapshot()))  # as the record holds it
    after = RandomAgent(space, seed=123)  # another seed: the snapshot decides
    after.restore(state)

    assert after.propose(9, []) == rest
    assert len(first) == 7
    assert after.exhausted == whole.exhausted


def test_the_sobol_sampler_gives_no_snapshot(finite_space):
    assert RandomAgent(finite_space, seed=1, sampler="sobol").snapshot() is None


def test_a_restored_grid_continues_where_it_was(finite_space):
    grid = GridAgent(finite_space)
    grid.propose(5, [])
    again = GridAgent(finite_space)
    again.restore(json.loads(json.dumps(grid.snapshot())))
    assert again.propose(30, []) == grid.propose(30, [])
    assert again.exhausted
    assert grid.exhausted
