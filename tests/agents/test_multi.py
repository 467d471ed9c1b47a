"""The Bayesian agent with several objectives (dse_agents._multi): the exact expected
hypervolume improvement against hypervolumes computed by dse.model._pareto and by sampling, and the
agent's search, batches, failures and snapshots in a Pareto campaign."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

import dse
from dse import Direction, Objective, Observation, TrialStatus
from dse.model._pareto import hypervolume
from dse_agents import BayesianAgent, RandomAgent
from dse_agents._multi import box_decomposition, expected_improvement


@pytest.mark.parametrize("m", [2, 3])
def test_the_boxes_give_each_point_its_hypervolume_improvement(m: int) -> None:
    rng = np.random.default_rng(m)
    for _ in range(20):
        front = rng.random((int(rng.integers(0, 7)), m))
        reference = np.full(m, 1.1)
        low, high = box_decomposition(front, reference)
        for y in rng.random((10, m)) * 1.2 - 0.05:
            gain = np.prod(np.maximum(0.0, high - np.maximum(y, low)), axis=1).sum()
            before = hypervolume([tuple(p) for p in front], tuple(reference))
            after = hypervolume([tuple(p) for p in front] + [tuple(y)], tuple(reference))
            assert gain == pytest.approx(after - before, abs=1e-12)


def test_the_expected_improvement_is_the_mean_of_sampled_improvements() -> None:
    rng = np.random.default_rng(0)
    front = np.array([[0.2, 0.8, 0.5], [0.6, 0.3, 0.4], [0.5, 0.5, 0.1]])
    boxes = box_decomposition(front, np.full(3, 1.1))
    means = np.array([[0.3, 0.4, 0.3], [0.9, 0.9, 0.9], [0.1, 0.1, 0.9]])
    stds = np.array([[0.1, 0.2, 0.05], [0.3, 0.01, 0.2], [0.05, 0.05, 0.3]])
    exact = expected_improvement(means, stds, boxes)
    low, high = boxes
    for i in range(len(means)):
        samples = means[i] + stds[i] * rng.standard_normal((40000, 3))
        gains = np.prod(np.maximum(0.0, high[None] - np.maximum(samples[:, None, :], low[None])),
                        axis=2).sum(axis=1)
        assert exact[i] == pytest.approx(gains.mean(), rel=0.03, abs=1e-4)
    # Without uncertainty it is the improvement at the mean.
    at_mean = expected_improvement(means, np.full_like(stds, 1e-9), boxes)
    direct = np.prod(np.maximum(0.0, high[None] - np.maximum(means[:, None, :], low[None])),
                     axis=2).sum(axis=1)
    assert at_mean == pytest.approx(direct, abs=1e-9)


def zdt1(x: list[float]) -> tuple[float, float]:
    g = 1.0 + 9.0 * sum(x[1:]) / (len(x) - 1)
    return x[0], g * (1.0 - math.sqrt(x[0] / g))


OBJECTIVES = (Objective("f1"), Objective("f2"))
SPACE = dse.Space.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0}
                             for i in range(3)})


def observation(params: dict[str, Any], number: int, *, failed: bool = False,
                objectives: tuple[Objective, ...] = OBJECTIVES) -> Observation:
    if failed:
        return Observation(params=params, status=TrialStatus.FAILED, trial_number=number,
                           objectives=objectives)
    f = zdt1([params[f"x{i}"] for i in range(3)])
    scores = tuple(-v if o.direction is Direction.MAXIMIZE else v
                   for v, o in zip(f, objectives, strict=True))
    return Observation(params=params, status=TrialStatus.COMPLETED, metrics={},
                       score=scores[0], scores=scores, objectives=objectives,
                       trial_number=number)


def campaign(agent: Any, budget: int, batch: int) -> list[tuple[float, float]]:
    points: list[tuple[float, float]] = []
    while len(points) < budget:
        out = agent.propose(min(batch, budget - len(points)))
        assert len({json.dumps(p, sort_keys=True) for p in out}) == len(out)
        agent.observe([observation(p, len(points) + i + 1) for i, p in enumerate(out)])
        points += [zdt1([p[f"x{i}"] for i in range(3)]) for p in out]
    return points


@pytest.mark.parametrize("batch", [1, 4])
def test_the_agent_grows_the_front_faster_than_random_search(batch: int) -> None:
    ref = (1.1, 1.1)
    for seed in (0, 1):
        smart = hypervolume(campaign(BayesianAgent(SPACE, seed=seed), 28, batch), ref)
        blind = hypervolume(campaign(RandomAgent(SPACE, seed=seed), 28, batch), ref)
        # The front's best hypervolume here is 0.877 (f2 = 1 - sqrt(f1)).
        assert smart > blind + 0.05, (seed, smart, blind)
        assert smart > 0.75


def test_a_maximised_objective_is_learnt_as_its_negation() -> None:
    maximised = (Objective("f1"), Objective("f2", Direction.MAXIMIZE))
    agent = BayesianAgent(SPACE, seed=3)
    plain = BayesianAgent(SPACE, seed=3)
    for n in range(12):
        (p,) = agent.propose(1)
        (q,) = plain.propose(1)
        assert p == q
        obs = observation(p, n + 1, objectives=maximised)
        assert obs.losses == observation(p, n + 1).losses  # the same losses either way
        agent.observe([obs])
        plain.observe([observation(p, n + 1)])


def test_failures_teach_where_trials_succeed_and_a_snapshot_resumes_the_search() -> None:
    agent = BayesianAgent(SPACE, seed=5)
    n = 0
    for _ in range(4):
        out = agent.propose(3)
        told = []
        for p in out:
            n += 1
            told.append(observation(p, n, failed=p["x0"] > 0.8))
        agent.observe(told)
    state = agent.snapshot()
    assert state is not None
    assert len(state["v"]) == n
    assert state["objectives"] == [["f1", "minimize", None], ["f2", "minimize", None]]
    copy = BayesianAgent(SPACE, seed=99)
    copy.restore(json.loads(json.dumps(state)))
    assert copy.propose(2, in_flight=[{"x0": 0.5, "x1": 0.1, "x2": 0.1}]) == agent.propose(
        2, in_flight=[{"x0": 0.5, "x1": 0.1, "x2": 0.1}])


def test_the_gradient_of_the_log_improvement_matches_finite_differences() -> None:
    agent = BayesianAgent(SPACE, seed=2)
    campaign(agent, 16, 4)
    model = agent._multi.model  # the fitted models of a real search
    assert model is not None
    acquisition = model.acquisition(None)
    x = np.random.default_rng(0).random((6, 3))
    value, grad = acquisition.with_gradient(x)
    assert value == pytest.approx(acquisition(x))
    step = 1e-6
    for column in range(3):
        moved = x.copy()
        moved[:, column] += step
        numeric = (acquisition(moved) - acquisition(x - (moved - x))) / (2 * step)
        assert grad[:, column] == pytest.approx(numeric, rel=1e-3, abs=1e-4)
