"""What the agents learn from trials stopped early (issue 21): a stopped trial's loss is a
result at the fidelity ``step / max_step``, not a failure; a trial told again (stopped, then
promoted and stopped higher or completed) is one point, at its latest result. The grid and
random agents learn nothing and must not change; the Bayesian agent models the fidelity, keeps
it through a snapshot, and stays deterministic across processes.

How much the model helps a campaign is measured by ``tests/support/curves.py`` (a synthetic
family of learning curves under dse's ``asha``), not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import dse
from dse_agents import BayesianAgent, GridAgent, RandomAgent
from dse_agents._stopped import fidelity_column
from support.curves import SPACE, Curves, simulate

if TYPE_CHECKING:
    from collections.abc import Sequence

LINE = dse.Space((dse.FloatRange("x", 0.0, 1.0),))
MAX_STEP = 27


def completed(x: float, number: int, loss: float) -> dse.Observation:
    return dse.Observation(params={"x": x}, status=dse.TrialStatus.COMPLETED, score=loss,
                           metrics={"loss": loss}, trial_number=number, max_step=MAX_STEP)


def stopped(x: float, number: int, loss: float, step: int = 9) -> dse.Observation:
    return dse.Observation(params={"x": x}, status=dse.TrialStatus.STOPPED, score=loss,
                           metrics={"loss": loss}, trial_number=number, step=step,
                           max_step=MAX_STEP)


def failed(x: float, number: int) -> dse.Observation:
    return dse.Observation(params={"x": x}, status=dse.TrialStatus.FAILED, trial_number=number,
                           failure=dse.FailureClass.NONZERO_EXIT)


def next_four(observations: Sequence[dse.Observation], seed: int) -> list[float]:
    """Where the Bayesian agent's model goes next (four proposals) once told *observations*
    (none of them drawn at random: ``random_fraction = 0``)."""
    agent = BayesianAgent(LINE, seed=seed, initial=1, random_fraction=0.0)
    agent.propose(1, [])  # the one design point: the model proposes from now on
    agent.observe(observations)
    return sorted(p["x"] for p in agent.propose(4, []))


# Full runs improve towards x = 1; trials stopped at a third of their run say how much worse a
# third of a run is (about 0.6 at the same x), so a stopped loss can be read at full fidelity.
DOWNHILL = [completed(0.1, 1, 0.9), completed(0.3, 2, 0.7), completed(0.5, 3, 0.5),
            stopped(0.2, 4, 1.4), stopped(0.4, 5, 1.2), stopped(0.6, 6, 1.0)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trials_stopped_at_a_bad_value_steer_proposals_away(seed: int) -> None:
    # Without them the model follows the slope to x = 1; trials stopped there at a loss far
    # worse than a third of a run explains send it back to the middle.
    assert any(x > 0.8 for x in next_four(DOWNHILL, seed))
    bad = [stopped(0.85, 7, 5.0), stopped(0.95, 8, 5.0)]
    assert all(x < 0.8 for x in next_four(DOWNHILL + bad, seed))


# Full runs get worse towards x = 1; a stopped trial is worse than a full run at the same x.
UPHILL = [completed(0.5, 1, 1.0), completed(0.7, 2, 1.2), completed(0.9, 3, 1.5),
          stopped(0.6, 4, 1.6), stopped(0.8, 5, 1.9)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_stopped_trial_with_a_good_value_attracts_where_a_failure_repels(seed: int) -> None:
    # Two trials near x = 0.1 stopped at a third of their run with losses better than any
    # full run: the region is promising. Told as failures the same trials repel.
    good = [stopped(0.1, 6, 0.8), stopped(0.15, 7, 0.8)]
    assert sum(x < 0.25 for x in next_four(UPHILL + good, seed)) >= 3
    as_failures = [failed(0.1, 6), failed(0.15, 7)]
    assert all(x > 0.3 for x in next_four(UPHILL + as_failures, seed))


def learnt(agent: BayesianAgent) -> list[tuple[list[float], float | None, float]]:
    """What the agent holds: (point, loss, fidelity) of each observation it learnt from."""
    state = agent.snapshot()
    assert state is not None
    return list(zip(state["x"], state["y"], state["t"], strict=True))


def test_a_trial_told_stopped_then_completed_is_one_point_at_its_full_fidelity() -> None:
    agent = BayesianAgent(LINE, seed=0, initial=1)
    agent.observe([stopped(0.4, 1, 2.0, step=3), completed(0.6, 2, 0.7)])
    assert learnt(agent) == [([0.4], 2.0, 3 / 27), ([0.6], 0.7, 1.0)]
    agent.observe([stopped(0.4, 1, 1.5, step=9)])  # promoted, stopped at the next rung
    assert learnt(agent) == [([0.4], 1.5, 9 / 27), ([0.6], 0.7, 1.0)]
    agent.observe([dse.Observation(params={"x": 0.4}, status=dse.TrialStatus.INTERRUPTED,
                                   trial_number=1)])  # an end that teaches nothing
    assert learnt(agent) == [([0.4], 1.5, 9 / 27), ([0.6], 0.7, 1.0)]
    agent.observe([completed(0.4, 1, 0.9)])  # promoted again, ran to its end
    assert learnt(agent) == [([0.4], 0.9, 1.0), ([0.6], 0.7, 1.0)]
    agent.observe([failed(0.6, 2)])  # a later failure of a promoted trial replaces it too
    assert learnt(agent) == [([0.4], 0.9, 1.0), ([0.6], None, 1.0)]


def test_a_stopped_observation_that_does_not_say_its_step_teaches_nothing() -> None:
    agent = BayesianAgent(LINE, seed=0, initial=1)
    agent.observe([
        dse.Observation(params={"x": 0.2}, status=dse.TrialStatus.STOPPED, score=1.0,
                        trial_number=1, step=None, max_step=MAX_STEP),
        dse.Observation(params={"x": 0.3}, status=dse.TrialStatus.STOPPED, score=1.0,
                        trial_number=2, step=9, max_step=None),
        dse.Observation(params={"x": 0.4}, status=dse.TrialStatus.STOPPED, score=None,
                        trial_number=3, step=9, max_step=MAX_STEP),
        stopped(0.5, 4, 1.0),
    ])
    assert learnt(agent) == [([0.5], 1.0, 9 / 27)]


def test_a_trial_number_reused_for_another_point_is_another_point() -> None:
    # Only the same trial told again replaces its entry: same number, same params.
    agent = BayesianAgent(LINE, seed=0, initial=1)
    agent.observe([completed(0.2, 0, 1.0), completed(0.3, 0, 2.0)])
    assert learnt(agent) == [([0.2], 1.0, 1.0), ([0.3], 2.0, 1.0)]


# -- the agents that do not learn --------------------------------------------------------


@pytest.mark.parametrize("factory", [
    lambda space: GridAgent(space, points=4),
    lambda space: RandomAgent(space, seed=3),
    lambda space: RandomAgent(space, seed=3, sampler="sobol"),
], ids=["grid", "random", "sobol"])
def test_grid_and_random_propose_the_same_whatever_they_are_told_of_stopped_trials(
    factory: Any,
) -> None:
    told, untold = factory(SPACE), factory(SPACE)
    for wave in range(6):
        batch = told.propose(4, [])
        assert batch == untold.propose(4, [])
        for number, params in enumerate(batch, start=4 * wave + 1):
            obs = dse.Observation(params=SPACE.coerce(params), status=dse.TrialStatus.STOPPED,
                                  score=1.0, trial_number=number, step=3, max_step=MAX_STEP)
            told.observe([obs])
            told.observe([dse.Observation(params=obs.params, status=dse.TrialStatus.COMPLETED,
                                          score=0.5, trial_number=number)])  # promoted, ended
    assert told.exhausted == untold.exhausted


# -- snapshot, restore, determinism ------------------------------------------------------

def asha_world(seed: int, budget: int) -> dict[str, Any]:
    """The Bayesian agent on a simulated campaign with asha (stopped trials, promotions), and
    what it proposes next."""
    agent = BayesianAgent(SPACE, seed=seed, candidates=64)
    run = simulate(agent, Curves(seed), budget=budget)
    return {"agent": agent, "run": run}


def test_the_simulated_campaign_stops_and_promotes_trials() -> None:
    # The scenario the snapshot and determinism tests rely on: stopped trials, some of them
    # promoted (told twice), and the model in use.
    run = asha_world(1, 12 * 27)["run"]
    assert run.stopped >= 10
    assert run.promoted >= 1
    assert run.trials > 14  # past the initial design


def settled(state: dict[str, Any] | None) -> dict[str, Any]:
    """*state* with its set of points seen in one order (a set's order is not kept)."""
    assert state is not None
    return {**state, "seen": sorted(state["seen"], key=repr)}


@pytest.mark.parametrize("budget", [4 * 27, 12 * 27], ids=["in-the-design", "model-started"])
def test_a_restored_snapshot_with_stopped_trials_proposes_what_the_agent_would_have(
    budget: int,
) -> None:
    agent = asha_world(2, budget)["agent"]
    state = json.loads(json.dumps(agent.snapshot(), allow_nan=False))  # as the record holds it
    if budget > 4 * 27:
        assert min(state["t"]) < 1.0
        assert state["gp_fidelity"] is not None  # the fidelity model was fitted
    restored = BayesianAgent(SPACE, seed=99, candidates=64)  # another seed: the snapshot decides
    restored.restore(state)
    assert settled(restored.snapshot()) == settled(state)
    curves = Curves(5)
    expected = simulate(agent, curves, budget=6 * 27)
    got = simulate(restored, curves, budget=6 * 27)
    assert got.finals == expected.finals
    assert repr(restored.propose(4, [])) == repr(agent.propose(4, []))


def test_a_snapshot_of_the_earlier_version_restores() -> None:
    # A 0.1.0 snapshot has no fidelities, trial entries nor fidelity model: every point it
    # holds is a full result.
    agent = asha_world(3, 4 * 27)["agent"]
    state = json.loads(json.dumps(agent.snapshot()))
    for key in ("t", "trials", "gp_fidelity"):
        del state[key]
    restored = BayesianAgent(SPACE, seed=3, candidates=64)
    restored.restore(state)
    assert learnt(restored) == [(x, y, 1.0) for x, y, _ in learnt(agent)]


_PROCESS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from dse_agents import BayesianAgent
from support.curves import SPACE, Curves, simulate
agent = BayesianAgent(SPACE, seed=4, candidates=64)
run = simulate(agent, Curves(4), budget=10 * 27)
print(json.dumps({"finals": run.finals, "stopped": run.stopped, "promoted": run.promoted,
                  "next": repr(agent.propose(4, []))}))
"""


def test_the_same_campaign_with_stopped_trials_is_the_same_in_another_process() -> None:
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outputs = []
    for hash_seed in ("1", "2"):  # sets iterate in another order
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run([sys.executable, "-c", _PROCESS, tests], capture_output=True,
                              text=True, env=env, check=False, timeout=600)
        assert proc.returncode == 0, proc.stderr
        outputs.append(json.loads(proc.stdout))
    assert outputs[0]["stopped"] > 0
    assert outputs[0] == outputs[1]


# -- the random share and the fidelity scale (issue 45) ---------------------------------------


def proposals_after(observations: Sequence[dse.Observation], **options: Any) -> list[float]:
    """Twelve proposals, one at a time, once told *observations*."""
    agent = BayesianAgent(LINE, seed=0, initial=1, **options)
    agent.propose(1, [])
    agent.observe(observations)
    return [agent.propose(1, [])[0]["x"] for _ in range(12)]


def test_once_trials_are_stopped_early_a_third_of_the_proposals_are_random() -> None:
    # Without stopping no proposal is random by default; with it a third are (BOHB's share),
    # the same proposals as random_fraction = 1/3 given, others than with none.
    full = [completed(0.1, 1, 0.9), completed(0.3, 2, 0.7), completed(0.5, 3, 0.5)]
    unstopped = [dse.Observation(params=o.params, status=o.status, score=o.score,
                                 trial_number=o.trial_number) for o in full]
    assert proposals_after(unstopped) == proposals_after(unstopped, random_fraction=0.0)
    default = proposals_after(DOWNHILL)
    assert default == proposals_after(DOWNHILL, random_fraction=1 / 3)
    assert default != proposals_after(DOWNHILL, random_fraction=0.0)
    # The model follows the slope to the edge at x = 1 (DOWNHILL); the random third lands
    # anywhere, and the model's picks between them are its own.
    modelled = proposals_after(DOWNHILL, random_fraction=0.0)
    assert all(x > 0.99 for x in modelled)
    assert sum(x < 0.99 for x in default) >= 3
    assert [x for x in default if x > 0.99] == modelled[:8]


@pytest.mark.parametrize("value", [1.0, -0.1, "a third", True])
def test_a_random_fraction_outside_zero_to_one_is_refused_naming_the_key(value: Any) -> None:
    with pytest.raises(dse.ConfigError, match=r"agent\.bayesian\.random_fraction: expected"):
        BayesianAgent(LINE, random_fraction=value)


def test_the_fidelity_column_puts_the_rungs_evenly_on_a_log_scale() -> None:
    t = np.array([1, 3, 9, 27, 81]) / 81
    assert np.allclose(fidelity_column(t, 81), [0.0, 0.25, 0.5, 0.75, 1.0])
    assert np.array_equal(fidelity_column(t, None), t)  # max_step unknown: as told


def test_a_snapshot_keeps_max_step_and_one_without_it_restores() -> None:
    agent = asha_world(6, 12 * 27)["agent"]
    state = json.loads(json.dumps(agent.snapshot()))
    assert state["max_step"] == 27
    del state["max_step"]  # a 0.2 snapshot: the next result told brings it
    restored = BayesianAgent(SPACE, seed=6, candidates=64)
    restored.restore(state)
    assert restored.snapshot()["max_step"] is None  # type: ignore[index]
