"""PED-ANOVA's importance of each param (`dse.report.ped_anova`): on functions whose active
params are known, the active ones rank first; categorical, log and integer params are read in
their own terms; too few trials, constant params and non-finite values are said, not
guessed."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

import dse
from dse.report import Importances, ped_anova
from dse.report._importance import MIN_TOP, quantile_set

FIVE = dse.Space.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0}
                            for i in range(5)})


def two_active(p: dict[str, Any]) -> float:
    """x0 and x1 matter; x2, x3 and x4 do not."""
    return (p["x0"] - 0.3) ** 2 + 2 * abs(p["x1"] - 0.7) + 0 * p["x2"] + 0 * p["x3"] + 0 * p["x4"]


MIXED = dse.Space.from_dict({
    "layout": ["row", "col", "tile", "strip"],
    "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
    "batch": {"type": "int", "low": 1, "high": 1024, "log": True},
    "n": {"type": "int", "low": 1, "high": 64},
    "kernel": ["k0", "k1", "k2", "k3", "k4", "k5"],
    "flag": [True, False],
    "z": {"type": "float", "low": -1.0, "high": 1.0},
})


def mixed(p: dict[str, Any]) -> float:
    """A categorical (``col`` is best), a log float (best at 0.01) and a log integer (best at
    32) matter; the rest do not."""
    return ((0.0 if p["layout"] == "col" else 1.0) + 0.5 * abs(math.log10(p["lr"]) + 2)
            + 0.3 * abs(math.log2(p["batch"]) - 5))


def sampled(space: dse.Space, f: Any, seed: int, count: int = 200
            ) -> list[tuple[dict[str, Any], float]]:
    rng = random.Random(seed)
    return [(p, f(p)) for p in (space.sample(rng) for _ in range(count))]


def test_the_two_active_params_rank_first_in_at_least_nine_seeds_of_ten() -> None:
    found = []
    for seed in range(10):
        result = ped_anova(FIVE, sampled(FIVE, two_active, seed))
        assert result.reason == ""
        assert (result.trials, result.top, result.region) == (200, 20, 200)
        assert sum(result.importance.values()) == pytest.approx(1.0)
        shares = list(result.importance.values())
        assert shares == sorted(shares, reverse=True)
        assert set(result.importance) == set(FIVE.names)
        found.append(set(result.ranked()[:2]) == {"x0", "x1"})
    assert sum(found) >= 9, found


def test_maximizing_the_negated_objective_gives_the_same_importances() -> None:
    trials = sampled(FIVE, two_active, 3)
    low = ped_anova(FIVE, trials)
    high = ped_anova(FIVE, [(p, -v) for p, v in trials], direction="maximize")
    assert high == low
    # The same trials read the wrong way round find what the worst trials share instead.
    assert ped_anova(FIVE, trials, direction="maximize").importance != low.importance


def test_categorical_log_and_integer_params_are_ranked_in_their_own_terms() -> None:
    found = []
    for seed in range(10):
        result = ped_anova(MIXED, sampled(MIXED, mixed, seed))
        assert set(result.importance) == set(MIXED.names)
        assert result.ranked()[0] == "layout"
        found.append(set(result.ranked()[:3]) == {"layout", "lr", "batch"})
    assert sum(found) >= 9, found


def test_a_log_param_is_read_on_its_log_scale() -> None:
    # Best at 1e-4..1e-3: a tenth of the log range, a thousandth of the linear one. On its
    # log scale the top trials sit in one place; read linearly they would all be "at 0".
    space = dse.Space.from_dict({"lr": {"type": "float", "low": 1e-6, "high": 1.0, "log": True},
                                 "u": {"type": "float", "low": 0.0, "high": 1.0}})
    trials = sampled(space, lambda p: abs(math.log10(p["lr"]) + 3.5) + 0.2 * p["u"], 0)
    result = ped_anova(space, trials)
    assert result.ranked() == ["lr", "u"]
    assert result.importance["lr"] > 0.8


def test_an_integer_of_few_values_and_a_stepped_float_have_a_point_per_value() -> None:
    space = dse.Space.from_dict({"cores": {"type": "int", "low": 1, "high": 4},
                                 "ratio": {"type": "float", "low": 0.0, "high": 1.0,
                                           "step": 0.25},
                                 "noise": {"type": "int", "low": 0, "high": 1000}})
    trials = sampled(space, lambda p: abs(p["cores"] - 3) + abs(p["ratio"] - 0.5), 1)
    result = ped_anova(space, trials)
    assert result.ranked()[2] == "noise"
    assert result.importance["noise"] < 0.1


def test_too_few_trials_say_so_and_how_many_are_needed() -> None:
    trials = sampled(FIVE, two_active, 0, count=11)
    assert ped_anova(FIVE, trials).reason == ""  # the best 10% of 11: 2 trials
    few = ped_anova(FIVE, trials[:10])
    assert few.importance == {}
    assert few.divergence == {}
    assert few.ranked() == []
    assert (few.trials, few.top) == (10, 1)
    assert few.reason == ("too few trials: the top 10% of 10 is 1, PED-ANOVA needs"
                          f" {MIN_TOP} (11 trials or more)")
    # A larger top share needs fewer.
    assert ped_anova(FIVE, trials[:4], target_quantile=0.5).reason == ""
    none = ped_anova(FIVE, [])
    assert none.reason == "no completed trial with a finite objective"
    assert none.as_dict()["importance"] == {}


def test_nan_and_infinite_values_and_refused_params_are_left_out() -> None:
    trials = sampled(FIVE, two_active, 2)
    clean = ped_anova(FIVE, trials)
    point = dict(trials[0][0])
    dirty = [*trials[:50], (point, math.nan), (point, math.inf), (point, -math.inf),
             ({**point, "x0": 2.0}, 0.0),  # outside the space
             ({"x0": 0.3}, 0.0),  # missing params
             *trials[50:]]
    result = ped_anova(FIVE, dirty)
    assert result.excluded == 5
    assert result.trials == 200
    assert result.importance == clean.importance
    # -inf is no best trial: it is left out, not taken as the best when maximizing either.
    assert ped_anova(FIVE, dirty, direction="maximize").excluded == 5


def test_a_constant_param_has_importance_zero_and_is_named() -> None:
    space = dse.Space.from_dict({**{f"x{i}": {"type": "float", "low": 0.0, "high": 1.0}
                                    for i in range(2)},
                                 "fixed": {"type": "int", "low": 3, "high": 3},
                                 "only": ["one"],
                                 "flat": {"type": "float", "low": 0.5, "high": 0.7,
                                          "step": 1.0}})
    trials = sampled(space, lambda p: (p["x0"] - 0.3) ** 2 + 2 * abs(p["x1"] - 0.7), 4)
    result = ped_anova(space, trials)
    assert result.constant == ("fixed", "only", "flat")
    assert result.ranked()[:2] in (["x1", "x0"], ["x0", "x1"])
    assert [result.importance[n] for n in ("fixed", "only", "flat")] == [0.0, 0.0, 0.0]
    assert sum(result.importance.values()) == pytest.approx(1.0)


def test_every_objective_equal_sets_no_trial_apart() -> None:
    trials = [(p, 1.0) for p, _ in sampled(FIVE, two_active, 0, count=50)]
    result = ped_anova(FIVE, trials)
    assert result.top == result.region == 50
    assert result.importance == {}
    assert "ties with every trial" in result.reason


def test_a_param_the_top_trials_took_anywhere_scores_near_zero() -> None:
    # Only x0 matters: the others share what is left, and it is little.
    trials = sampled(FIVE, lambda p: abs(p["x0"] - 0.5), 5, count=400)
    result = ped_anova(FIVE, trials)
    assert result.ranked()[0] == "x0"
    assert result.importance["x0"] > 0.9


def test_the_result_is_json_and_the_same_every_time() -> None:
    trials = sampled(MIXED, mixed, 7)
    result = ped_anova(MIXED, trials, target_quantile=0.2, region_quantile=0.8)
    assert (result.top, result.region) == (40, 160)
    doc = json.loads(json.dumps(result.as_dict()))
    assert doc["method"] == "PED-ANOVA"
    assert list(doc["importance"]) == result.ranked()
    assert (doc["target_quantile"], doc["region_quantile"]) == (0.2, 0.8)
    assert ped_anova(MIXED, list(reversed(trials)), target_quantile=0.2,
                     region_quantile=0.8).importance == pytest.approx(result.importance)
    assert isinstance(result, Importances)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"direction": "up"}, "direction must be"),
    ({"target_quantile": 0.0}, "quantiles must be"),
    ({"target_quantile": 0.5, "region_quantile": 0.5}, "quantiles must be"),
    ({"region_quantile": 1.5}, "quantiles must be"),
    ({"grid": 1}, "grid must be"),
])
def test_arguments_out_of_range_are_refused(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ped_anova(FIVE, [], **kwargs)


def test_the_top_set_keeps_every_trial_tied_with_its_last() -> None:
    assert quantile_set([3.0, 1.0, 2.0, 1.0, 5.0], 0.2) == [1, 3]
    assert quantile_set([float(i) for i in range(30)], 0.1) == [0, 1, 2]  # not 4: 0.1 * 30
    assert quantile_set([2.0, 1.0], 1.0) == [0, 1]
    assert quantile_set([], 0.1) == []
