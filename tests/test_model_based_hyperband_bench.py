"""benchmarks/model_based_hyperband.py's bookkeeping: compute to target and regret of a
hand-made log (a promotion counted from where it resumed, the budget cutting the run), the
headline's ratios, and the JSON line of a tiny run through the engine. Syne Tune (an
environment of its own) is not used here."""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def mbh(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The benchmark, imported as it imports its siblings."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import model_based_hyperband

    return model_based_hyperband


def _run(mbh: ModuleType, points: list[tuple[float, int, int, int, float]],
         params: dict[int, Any], method: str = "m", seed: int = 0) -> Any:
    log = mbh.RunLog(method, [mbh.Point(*p) for p in points],
                     mbh._finals([mbh.Point(*p) for p in points], 3), 0.0)
    return mbh.Run(method, seed, log, params, len(params))


def test_compute_to_target_counts_a_promotion_from_its_rung_and_stops_at_the_budget(
    mbh: ModuleType,
) -> None:
    # max_step 3. Trial 1 runs to the end (3 steps, true value 0.5); trial 2 is stopped at
    # step 1, promoted, and resumes at step 2 (its second attempt: 2 more steps, true 0.1);
    # trial 3 runs to the end last (true 0.0) but only after the budget.
    points = [
        (1, 1, 1, 1, 0.9), (1, 2, 1, 1, 0.8),
        (2, 1, 1, 2, 0.7),
        (3, 1, 1, 3, 0.52),                     # compute 4: trial 1 is the pick
        (4, 2, 2, 2, 0.3), (5, 2, 2, 3, 0.11),  # compute 6: trial 2 (observed 0.11 < 0.52)
        (6, 3, 1, 1, 0.5), (7, 3, 1, 2, 0.2), (8, 3, 1, 3, 0.01),  # compute 7, 8, 9
    ]
    truth = {1: 0.5, 2: 0.1, 3: 0.0}
    params = {n: {"n": n} for n in truth}
    run = _run(mbh, points, params)
    got = mbh.score(run, lambda p: truth[p["n"]], 0.0, 0.15, budget=8, max_step=3)
    assert got.compute == 8
    assert got.to_target == 6           # trial 2 picked at compute 6: regret 0.1 <= 0.15
    assert got.regret == pytest.approx(0.1)   # trial 3's end falls past the budget
    assert got.curve == [(4, 0.5), (6, pytest.approx(0.1))]
    whole = mbh.score(run, lambda p: truth[p["n"]], 0.0, 0.05, budget=100, max_step=3)
    assert (whole.compute, whole.to_target, whole.regret) == (9, 9, 0.0)
    never = mbh.score(run, lambda p: truth[p["n"]], 0.0, 0.05, budget=8, max_step=3)
    assert never.to_target is None


def test_the_pick_is_the_best_observed_value_not_the_best_true_one(mbh: ModuleType) -> None:
    # Noise: trial 2 looks better at max_step but is truly worse; ties go to the lower number.
    points = [(1, 1, 1, 1, 0.3), (1, 2, 1, 1, 0.25), (2, 1, 1, 3, 0.3), (2, 2, 1, 3, 0.25),
              (3, 3, 1, 3, 0.25)]
    truth = {1: 0.2, 2: 0.4, 3: 0.0}
    run = _run(mbh, points, {n: {"n": n} for n in truth})
    got = mbh.score(run, lambda p: truth[p["n"]], 0.1, 0.05, budget=100, max_step=3)
    assert got.regret == pytest.approx(0.3)
    assert got.to_target is None


def test_ratios_and_the_best_peer_treat_never_as_infinite(mbh: ModuleType) -> None:
    assert mbh.ratio(50.0, 100.0) == 0.5
    assert mbh.ratio(math.inf, 100.0) == math.inf
    assert mbh.ratio(50.0, math.inf) == 0.0
    assert mbh.ratio(math.inf, math.inf) is None
    assert mbh.median_inf([10.0, None, None]) == math.inf
    assert mbh.median_inf([10.0, 30.0, None]) == 30.0

    def scored(method: str, seed: int, to_target: float | None, regret: float) -> Any:
        return mbh.Scored(method, seed, 100.0, to_target, regret, [],
                          _run(mbh, [], {}, method, seed))

    runs = {
        "a": [scored("a", 0, 40.0, 0.0), scored("a", 1, None, 0.2), scored("a", 2, 60.0, 0.0)],
        "b": [scored("b", 0, 50.0, 0.0), scored("b", 1, 55.0, 0.0), scored("b", 2, 70.0, 0.0)],
        "c": [scored("c", 0, 50.0, 0.1), scored("c", 1, 55.0, 0.1), scored("c", 2, 70.0, 0.1)],
    }
    # a's median is 60 (one seed never), b's and c's 55: b wins on the final regret.
    assert mbh.best_peer(runs, ["a", "b", "c"]) == "b"
    assert mbh.best_peer(runs, ["x"]) is None
    assert mbh.paired(runs["a"], runs["b"]) == [0.8, math.inf, pytest.approx(6 / 7)]


# The campaign is stopped at its step budget (request_stop): the local backend cancels the
# trials then running, and a cancelled wrapper may still be ending when its handle goes.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_tiny_run_ends_with_one_json_line(mbh: ModuleType,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code = mbh.main(["--quick", "--families", "synthetic", "--budget", "4", "--methods",
                     mbh.DSE_BOHB, mbh.OPTUNA_TPE, mbh.OPTUNA_RANDOM])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    family = summary["families"]["synthetic"]
    assert (family["budget"], family["max_step"]) == (36, 9)
    assert set(family["medians"]) == {mbh.DSE_BOHB, mbh.OPTUNA_TPE, mbh.OPTUNA_RANDOM}
    assert family["best_peer"] in (mbh.OPTUNA_TPE, mbh.OPTUNA_RANDOM)
    assert "dse_bohb_compute_ratio_to_best_peer" in summary
    assert summary["seeds"] == {"synthetic": 1}
    assert 0 < family["target_regret"] < 0.05  # the best 3 % of random configs at step 9
    for figures in family["medians"].values():
        assert figures["seeds"] == 1
        assert len(figures["final_regret_per_seed"]) == 1
    gc.collect()  # the cancelled wrappers' handles go here, under this test's filter


def test_the_lockstep_diagnostic_is_deterministic_and_stops_at_its_budget(
    mbh: ModuleType,
) -> None:
    import _mbh_lockstep

    w = mbh.families(True, 10.0)["synthetic"]
    runs = [_mbh_lockstep.run_agent_lockstep(w, 3, variant, mbh.synthetic_stepper, 45,
                                             mbh.plugins())
            for variant in ("as is", "as is", "log fidelity")]
    (first, params), (again, params_again), _ = runs
    assert [(p.number, p.step, p.value) for p in first.points] == [
        (p.number, p.step, p.value) for p in again.points]
    assert params == params_again
    assert len(first.points) == 45  # one point a step; the run ends at its budget
    assert first.stopped > 0
