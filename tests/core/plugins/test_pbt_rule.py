"""The ``pbt`` rule alone: when a member is judged, who is exploited and which donor it
copies, that the same points give the same decisions (a resumed run's rule), and what explore
makes of params of each kind (always inside the space, deterministic for a key)."""

from __future__ import annotations

import math

import pytest

import dse
from dse.plugins._pbt import PbtRule


def rule(**options: object) -> PbtRule:
    return PbtRule(min_step=1, max_step=20, **options)  # type: ignore[arg-type]


def test_a_member_is_judged_every_interval_steps_from_where_it_started() -> None:
    r = rule(interval=4)
    assert [r.report(1, s, 1.0) for s in (1, 2, 3)] == [None] * 3
    judged = r.report(1, 4, 1.0)
    assert judged is not None
    assert judged.verdict is dse.Verdict.CONTINUE
    assert judged.reason == "the only member: nothing to compare with yet"
    assert [r.report(1, s, 1.0) for s in (5, 6, 7)] == [None] * 3
    assert r.report(1, 8, 1.0) is not None
    # A trial made by an exploit first reports the step after its copied checkpoint: its
    # interval counts from there.
    assert [r.report(2, s, 0.5) for s in (10, 11, 12)] == [None] * 3
    assert r.report(2, 13, 0.5) is not None


def test_the_worst_quantile_is_exploited_with_a_donor_from_the_best() -> None:
    r = rule(interval=2, quantile=0.25)
    for trial in range(1, 9):
        r.report(trial, 1, float(trial))  # trial 1 best ... trial 8 worst
    decisions = {t: r.report(t, 2, float(t)) for t in range(1, 9)}
    verdicts = {t: d.verdict for t, d in decisions.items() if d is not None}
    # 8 members, k = 2: the worst two are exploited as they are judged (the population
    # shrinks as they go: the 8th is judged among 7).
    assert verdicts[8] is dse.Verdict.EXPLOIT
    assert [t for t, v in verdicts.items() if v is dse.Verdict.EXPLOIT] == [7, 8]
    d8 = decisions[8]
    assert d8 is not None
    assert d8.donor in (1, 2)
    assert "replaced by a copy of trial" in d8.reason
    assert all(verdicts[t] is dse.Verdict.CONTINUE for t in range(1, 7))
    # An exploited trial is out for good; a trial at max_step too.
    assert r.report(8, 4, 0.0) is None
    assert r.report(1, 20, 0.1) is None
    assert r.report(1, 21, 0.1) is None


def test_the_same_points_give_the_same_decisions() -> None:
    points = [(t, s, math.sin(t * 7 + s) + t / 10) for s in range(1, 13) for t in range(1, 9)]

    def decide(seed: int) -> list[tuple[int, str, int | None]]:
        r = rule(interval=3, seed=seed)
        out = []
        for t, s, v in points:
            d = r.report(t, s, v)
            if d is not None:
                out.append((d.trial, d.verdict.value, d.donor))
        return out

    first = decide(0)
    assert first == decide(0)
    assert any(v == "exploit" for _, v, _ in first)


def test_a_step_told_again_changes_nothing() -> None:
    r = rule(interval=2)
    r.report(1, 1, 1.0)
    r.report(2, 1, 2.0)
    assert r.report(2, 2, 2.0) is not None
    assert r.report(2, 2, 2.0) is None  # a retried attempt going over its steps again


def test_nan_is_the_worst() -> None:
    r = rule(interval=1, quantile=0.5)
    r.report(1, 1, 1.0)
    d = r.report(2, 1, float("nan"))
    assert d is not None
    assert d.verdict is dse.Verdict.EXPLOIT
    assert d.donor == 1


SPACE = dse.Space.from_dict({
    "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "layers": {"type": "int", "low": 1, "high": 4},
    "width": {"type": "int", "low": 16, "high": 256, "step": 16},
    "opt": ["sgd", "adam", "lamb"],
    "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"opt": "sgd"}},
})


def test_explore_stays_inside_the_space_and_is_the_same_for_a_key() -> None:
    r = rule(resample_probability=0.2)
    params = {"lr": 0.01, "layers": 2, "width": 64, "opt": "sgd", "momentum": 0.9}
    seen = set()
    for key in range(300):
        out = r.explore(params, SPACE, str(key))
        assert out == SPACE.coerce(out)  # inside the space, coerced
        assert out == r.explore(params, SPACE, str(key))
        seen.add(out["opt"])
        if out["opt"] != "sgd":
            assert "momentum" not in out
    assert seen == {"sgd", "adam", "lamb"}  # neighbours and resampling reach every choice
    # A perturbed number is the donor's times a factor (clipped to its range), or resampled.
    lrs = [r.explore(params, SPACE, str(k))["lr"] for k in range(200)]
    assert sum(lr in (pytest.approx(0.008), pytest.approx(0.012)) for lr in lrs) > 120
    # A parent changed to sgd activates its child, drawn in range.
    adam = {"lr": 0.01, "layers": 1, "width": 16, "opt": "adam"}
    made = [r.explore(adam, SPACE, str(k)) for k in range(200)]
    assert any(m["opt"] == "sgd" and 0.0 <= m["momentum"] <= 0.99 for m in made)


def test_a_small_int_always_moves_and_a_grid_is_kept() -> None:
    r = rule(resample_probability=0.0)
    for key in range(50):
        out = r.explore({"lr": 0.5, "layers": 2, "width": 64, "opt": "adam"}, SPACE, str(key))
        assert out["layers"] in (1, 3)
        assert out["width"] % 16 == 0
        assert 16 <= out["width"] <= 256


@pytest.mark.parametrize(("options", "message"), [
    ({"population": 1}, "stopping.pbt.population: expected a whole number >= 2, got 1"),
    ({"interval": 20}, "stopping.pbt.interval: expected fewer steps than max_step (20), got 20"),
    ({"quantile": 0.7}, "stopping.pbt.quantile: expected a number in [0, 0.5], got 0.7"),
    ({"quantile": 0}, "stopping.pbt.quantile: expected a number in (0, 0.5], got 0"),
    ({"factors": []}, "stopping.pbt.factors: expected a non-empty list of positive numbers,"
                      " got []"),
    ({"factors": [0.8, -1]}, "stopping.pbt.factors: expected a non-empty list of positive"
                             " numbers, got [0.8, -1]"),
    ({"resample_probability": 2}, "stopping.pbt.resample_probability: expected a number in"
                                  " [0, 1], got 2"),
])
def test_a_bad_option_names_itself(options: dict[str, object], message: str) -> None:
    with pytest.raises(dse.ConfigError) as caught:
        rule(**options)
    assert str(caught.value) == message
