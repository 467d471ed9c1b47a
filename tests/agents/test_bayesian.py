"""The Bayesian agent: batches of distinct points, seeded, mixed spaces, learning from
failures; and the random agent's Sobol sampler. Search quality against Optuna and proposal
latency are measured in benchmarks/search_quality.py, not here."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.testing.contracts import AgentContract
from dse_agents import BayesianAgent, RandomAgent
from support.probe import run_on_probe
from support.record import record
from support.waves import completed, run_waves

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


class TestBayesianAgent(AgentContract):
    @pytest.fixture
    def agent_factory(self) -> Callable[[dse.Space, int], dse.Agent]:
        return lambda space, seed: BayesianAgent(space, seed=seed, initial=3)


class TestSobolRandomAgent(AgentContract):
    @pytest.fixture
    def agent_factory(self) -> Callable[[dse.Space, int], dse.Agent]:
        return lambda space, seed: RandomAgent(space, seed=seed, sampler="sobol")


MIXED = dse.Space((
    dse.IntRange("tile", 16, 256, step=16),
    dse.Categorical("layout", ("row", "col", "blocked")),
    dse.FloatRange("lr", 1e-5, 1e-1, log=True),
    dse.FloatRange("x", 0.0, 1.0),
))


def mixed_loss(p: dict[str, Any]) -> float:
    """Best at tile 128, layout 'blocked', lr 1e-3, x 0.3."""
    return ((p["tile"] - 128) / 64) ** 2 + {"row": 1.0, "col": 0.5, "blocked": 0.0}[
        p["layout"]] + (math.log10(p["lr"]) + 3) ** 2 + 4 * (p["x"] - 0.3) ** 2


def hashes(batch: Sequence[dict[str, Any]]) -> set[str]:
    return {dse.config_hash(dse.Space.coerce(MIXED, p)) for p in batch}


def test_a_batch_of_p_has_p_distinct_config_hashes_none_in_flight() -> None:
    agent = BayesianAgent(MIXED, seed=3)
    run_waves(agent, MIXED, mixed_loss, trials=16, p=4)  # past the Sobol start: the model
    for p in (4, 8, 16):
        in_flight = [MIXED.coerce(x) for x in agent.propose(3, [])]
        batch = [MIXED.coerce(x) for x in agent.propose(p, in_flight)]
        assert len(batch) == p
        assert len(hashes(batch)) == p
        assert not hashes(batch) & hashes(in_flight)


@pytest.mark.parametrize(("dims", "n", "seed"), [(1, 6, 0), (4, 8, 3), (7, 14, 12345)])
def test_the_initial_design_is_scipys_latin_hypercube(dims: int, n: int, seed: int) -> None:
    # Built without importing scipy.stats (a second at every start), point for point the same
    # as scipy's: a run recorded by an earlier dse replays the same proposals.
    import numpy as np
    from scipy.stats import qmc

    from dse_agents._bayesian import latin_hypercube

    expected = qmc.LatinHypercube(d=dims, seed=seed).random(n)
    assert np.array_equal(latin_hypercube(dims, n, seed), expected)


def test_the_same_seed_gives_the_same_proposals() -> None:
    first = run_waves(BayesianAgent(MIXED, seed=11), MIXED, mixed_loss, trials=24, p=4)
    second = run_waves(BayesianAgent(MIXED, seed=11), MIXED, mixed_loss, trials=24, p=4)
    other = run_waves(BayesianAgent(MIXED, seed=12), MIXED, mixed_loss, trials=24, p=4)
    assert first == second
    assert first != other


def test_a_categorical_and_a_log_float_are_learnt() -> None:
    space = dse.Space((dse.Categorical("opt", ("sgd", "adam", "lamb")),
                       dse.FloatRange("lr", 1e-6, 1.0, log=True)))

    def loss(p: dict[str, Any]) -> float:
        return {"sgd": 2.0, "adam": 0.0, "lamb": 1.0}[p["opt"]] + (math.log10(p["lr"]) + 4) ** 2

    seen = run_waves(BayesianAgent(space, seed=0), space, loss, trials=30, p=2)
    assert all(p["opt"] in ("sgd", "adam", "lamb") and 1e-6 <= p["lr"] <= 1.0 for p, _ in seen)
    best, value = min(seen, key=lambda item: item[1] if item[1] is not None else math.inf)
    assert best["opt"] == "adam"
    assert value is not None
    assert value < 0.05  # lr within a factor 10**0.22 of 1e-4, found on its log scale
    # Once the model leads, it stays with the best choice most of the time.
    assert sum(p["opt"] == "adam" for p, _ in seen[12:]) >= 12


def test_failed_trials_teach_it_where_not_to_go() -> None:
    space = dse.Space((dse.FloatRange("x", 0.0, 1.0), dse.FloatRange("y", 0.0, 1.0)))

    def loss(p: dict[str, Any]) -> float | None:
        if p["x"] > 0.5:
            return None  # half the space crashes
        return (p["x"] - 0.4) ** 2 + (p["y"] - 0.5) ** 2

    for seed in range(3):
        seen = run_waves(BayesianAgent(space, seed=seed, initial=8), space, loss,
                         trials=40, p=4)
        later = seen[16:]
        crashed = sum(value is None for _, value in later)
        assert crashed <= len(later) // 4, f"seed {seed}: {crashed} of {len(later)} crashed"


def test_a_rejected_proposal_is_not_proposed_again_and_counts_against_its_region() -> None:
    space = dse.Space((dse.IntRange("n", 0, 9),))
    agent = BayesianAgent(space, seed=0, initial=2)
    proposed = []
    for number in range(1, 11):
        (p,) = agent.propose(1, [])
        proposed.append(p["n"])
        if p["n"] % 2:
            agent.observe([dse.Observation(params=p, status=None, rejected="odd")])
        else:
            agent.observe([completed(p, number, float(p["n"]))])
    assert sorted(proposed) == list(range(10))  # every point once, none twice
    assert agent.exhausted
    assert agent.propose(3, []) == []


def test_bad_options_are_one_error_naming_the_key() -> None:
    with pytest.raises(dse.ConfigError, match=r"agent.bayesian: unknown option\(s\) \['beta'\]"):
        BayesianAgent(MIXED, beta=2)
    with pytest.raises(dse.ConfigError, match=r"agent.bayesian.initial: expected an integer"):
        BayesianAgent(MIXED, initial=0)
    with pytest.raises(dse.ConfigError, match=r"agent.random.sampler: expected 'uniform'"):
        RandomAgent(MIXED, sampler="halton")


def test_a_campaign_records_the_agent_name_and_version(tmp_path: Any) -> None:
    camp = dse.campaign_from_dict({
        "campaign": {"name": "bo", "agent": "bayesian", "max_parallelism": 4,
                     "max_trials": 12, "seed": 5},
        "agent": {"bayesian": {"initial": 4}},
        "space": {"x": {"type": "float", "low": -2.0, "high": 2.0},
                  "k": ["a", "b"]},
        "objectives": [{"metric": "value"}],
    }, workspace=tmp_path / "ws")
    result, rows = run_on_probe(camp)
    assert result.end_reason == "max_trials"
    assert len({r["config_hash"] for r in rows}) == len(rows) == 12
    store = dse.Store(tmp_path / "ws" / "dse.sqlite")
    (run,) = record(store).campaigns()
    assert run["agent"] == f"bayesian=={BayesianAgent.version}"
    store.close()


def test_sobol_covers_the_space_evenly_and_is_seeded() -> None:
    space = dse.Space((dse.FloatRange("x", 0.0, 1.0), dse.FloatRange("y", 0.0, 1.0)))
    points = RandomAgent(space, seed=4, sampler="sobol").propose(16, [])
    cells = {(int(p["x"] * 4), int(p["y"] * 4)) for p in points}
    assert len(cells) == 16  # one point in each cell of a 4 x 4 grid
    assert points == RandomAgent(space, seed=4, sampler="sobol").propose(16, [])
    assert points != RandomAgent(space, seed=5, sampler="sobol").propose(16, [])


def test_sobol_on_a_finite_space_draws_every_point_once() -> None:
    space = dse.Space((dse.Categorical("a", ("x", "y", "z")), dse.IntRange("b", 1, 4)))
    agent = RandomAgent(space, seed=0, sampler="sobol")
    drawn = [json.dumps(p, sort_keys=True) for p in agent.propose(100, [])]
    assert len(drawn) == len(set(drawn)) == 12
    assert agent.exhausted


# -- snapshot and restore ---------------------------------------------------------------

SNAPSHOT_SPACES = {
    "continuous": dse.Space((dse.FloatRange("x", 0.0, 1.0), dse.FloatRange("y", -2.0, 2.0))),
    "mixed": dse.Space((
        dse.IntRange("tile", 16, 256, step=16),
        dse.IntRange("n", 1, 64, log=True),
        dse.Categorical("layout", ("row", "col", "blocked")),
        dse.Categorical("flag", (True, 1, 2.5)),  # a bool and numbers equal to it
        dse.FloatRange("lr", 1e-5, 1e-1, log=True),
    )),
    "finite": dse.Space((dse.IntRange("n", 0, 7), dse.Categorical("k", ("a", "b", "c")))),
}
STEPS = [(2, 0), (2, 1), (1, 2), (3, 1), (2, 2), (1, 1), (2, 3), (3, 2), (2, 2)]
"""A scripted run: (proposals asked for, oldest trials in flight then told back) per step.
By the fourth step a trial has failed, one was rejected, the model proposes, and four trials
are in flight."""


def scripted_loss(params: dict[str, Any]) -> float:
    """Any deterministic loss of every kind of value (booleans and strings included)."""
    return sum(((i + 1) * (len(v) if isinstance(v, str) else float(v)) % 7.3) ** 1.5
               for i, v in enumerate(params.values()))


def drive(agent: BayesianAgent, space: dse.Space, steps: Sequence[tuple[int, int]],
          world: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Make the calls of *steps* on *agent*, *world* holding the trials in flight and the
    next trial number; each trial's number decides its fate: some fail, some are rejected,
    some are interrupted (nothing learnt), the rest complete. Returns the proposals."""
    proposals = []
    for n, told in steps:
        batch = agent.propose(n, [params for _, params in world["flight"]])
        proposals.append(batch)
        for params in batch:
            world["flight"].append((world["next"], space.coerce(params)))
            world["next"] += 1
        done, world["flight"] = world["flight"][:told], world["flight"][told:]
        obs = []
        for number, params in done:
            if number % 4 == 3:
                obs.append(dse.Observation(params=params, status=dse.TrialStatus.FAILED,
                                           trial_number=number,
                                           failure=dse.FailureClass.NONZERO_EXIT))
            elif number % 5 == 4:
                obs.append(dse.Observation(params=params, status=None, rejected="constraint"))
            elif number % 7 == 6:
                obs.append(dse.Observation(params=params, trial_number=number,
                                           status=dse.TrialStatus.INTERRUPTED))
            else:
                obs.append(completed(params, number, scripted_loss(params)))
        agent.observe(obs)
    return proposals


@pytest.mark.parametrize("cut", [1, 4], ids=["in-the-design", "model-started"])
@pytest.mark.parametrize("space_name", list(SNAPSHOT_SPACES))
def test_a_restored_snapshot_proposes_what_the_agent_would_have(space_name: str,
                                                                cut: int) -> None:
    space = SNAPSHOT_SPACES[space_name]
    options = {"initial": 4, "candidates": 64}
    agent = BayesianAgent(space, seed=3, **options)
    world: dict[str, Any] = {"flight": [], "next": 1}
    drive(agent, space, STEPS[:cut], world)
    assert world["flight"]  # trials in flight at the snapshot
    state = json.loads(json.dumps(agent.snapshot(), allow_nan=False))  # as the record holds it
    restored = BayesianAgent(space, seed=99, **options)  # another seed: the snapshot decides
    restored.restore(state)
    restored_world = json.loads(json.dumps(world))

    expected = drive(agent, space, STEPS[cut : cut + 5], world)
    got = drive(restored, space, STEPS[cut : cut + 5], restored_world)

    assert repr(got) == repr(expected)  # the same values, of the same types, to the last bit
    assert sum(map(len, expected)) >= 5
    assert restored.exhausted == agent.exhausted


def test_a_restore_keeps_the_subsample_and_the_refit_cadence_of_a_long_run() -> None:
    # Past 30 observations the hyperparameters restart from the prior's centre only every
    # fifth fit, and past max_points the model is fitted to a seeded subsample.
    space = SNAPSHOT_SPACES["continuous"]
    options = {"initial": 36, "candidates": 64, "max_points": 32}
    agent = BayesianAgent(space, seed=2, **options)
    world: dict[str, Any] = {"flight": [], "next": 1}
    drive(agent, space, [(36, 35), (1, 1), (1, 1)], world)
    restored = BayesianAgent(space, seed=5, **options)
    restored.restore(json.loads(json.dumps(agent.snapshot())))
    restored_world = json.loads(json.dumps(world))

    steps = [(1, 1)] * 5
    expected = drive(agent, space, steps, world)
    assert repr(drive(restored, space, steps, restored_world)) == repr(expected)


def test_a_snapshot_holds_the_model_it_learnt_and_is_plain_json() -> None:
    space = SNAPSHOT_SPACES["mixed"]
    agent = BayesianAgent(space, seed=1, initial=4, candidates=64)
    drive(agent, space, STEPS, {"flight": [], "next": 1})
    state = agent.snapshot()
    assert state is not None
    text = json.dumps(state, allow_nan=False)  # as dse records it: no NaN, no numpy types
    assert json.loads(text) == state
    assert state["proposed"] == sum(n for n, _ in STEPS)
    assert state["fits"] > 0  # the model was consulted


def test_a_finite_space_stays_exhausted_after_a_restore() -> None:
    space = SNAPSHOT_SPACES["finite"]
    agent = BayesianAgent(space, seed=2, initial=4, candidates=64)
    while not agent.exhausted:
        for p in agent.propose(5, []):
            agent.observe([completed(space.coerce(p), 0, scripted_loss(p))])
    restored = BayesianAgent(space, seed=2, initial=4, candidates=64)
    restored.restore(json.loads(json.dumps(agent.snapshot())))
    assert restored.exhausted
    assert restored.propose(3, []) == []


def test_a_loss_json_cannot_hold_gives_no_snapshot() -> None:
    space = SNAPSHOT_SPACES["continuous"]
    agent = BayesianAgent(space, seed=0)
    (p,) = agent.propose(1, [])
    agent.observe([completed(space.coerce(p), 1, math.inf)])  # the engine never tells one
    assert agent.snapshot() is None
