"""benchmarks/early_stopping.py's schedule workload (``_es_schedule.py``) and how its PBT runs
are counted (``_es_pbt.py``): what the docstring claims of the workload's numbers (no fixed
learning rate reaches the target, a decaying schedule does, the greedy schedule is the best
there is), the trial resuming exactly from its checkpoint (its own or a copy of a donor's),
and the compute of a run whose members are replaced by copies. Ray Tune and Optuna are
benchmark-only dependencies and are not imported here."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
MAX_STEP = 40


@pytest.fixture
def es(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    """The benchmark's modules, imported as the benchmark imports them (siblings)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _es_pbt
    import _es_raytune
    import _es_schedule
    import early_stopping

    return {"schedule": _es_schedule, "pbt": _es_pbt, "ray": _es_raytune,
            "bench": early_stopping}


def test_no_fixed_learning_rate_reaches_the_target(es: dict[str, ModuleType]) -> None:
    s = es["schedule"]
    target = s.target_loss(MAX_STEP)
    best, lr = s.best_fixed(MAX_STEP)
    assert best == pytest.approx(1.248e-3, rel=1e-3)
    assert lr == pytest.approx(0.0222, rel=1e-2)
    assert best > 1.4 * target  # clearly above: 41 %
    rates = [math.exp(math.log(s.LR_LOW) + (math.log(s.LR_HIGH) - math.log(s.LR_LOW)) * i
                      / 2000) for i in range(2001)]
    assert min(s.run([r] * MAX_STEP) for r in rates) >= best * (1 - 1e-9)


def test_a_decaying_schedule_reaches_the_target(es: dict[str, ModuleType]) -> None:
    s = es["schedule"]
    best = s.best_achievable(MAX_STEP)
    target = s.target_loss(MAX_STEP)
    assert best == pytest.approx(5.057e-4, rel=1e-3)
    assert target == pytest.approx(1.75 * best)
    inverse_time = [min(1.0, 0.3 / t) for t in range(1, MAX_STEP + 1)]
    assert s.run(inverse_time) < 1.15 * best
    every_4 = [0.2 * 0.6 ** ((t - 1) // 4) for t in range(1, MAX_STEP + 1)]  # what PBT can do
    assert s.run(every_4) < target
    assert s.run(s.optimal_schedule(MAX_STEP, 4)) < 1.06 * best
    schedule = s.optimal_schedule(MAX_STEP)
    assert schedule[0] == pytest.approx(0.414, rel=1e-2)
    assert schedule[-1] == pytest.approx(0.0051, rel=2e-2)
    assert all(a >= b for a, b in itertools.pairwise(schedule))  # it decays


def test_nothing_beats_the_greedy_schedule(es: dict[str, ModuleType]) -> None:
    s = es["schedule"]
    best = s.best_achievable(MAX_STEP)
    optimal = list(s.optimal_schedule(MAX_STEP))
    rng = random.Random(0)
    for _ in range(300):
        jittered = [lr * math.exp(rng.gauss(0.0, 0.3)) for lr in optimal]
        assert s.run(jittered) >= best * (1 - 1e-9)
        drawn = sorted((math.exp(rng.uniform(math.log(1e-3), 0.0)) for _ in range(MAX_STEP)),
                       reverse=True)
        assert s.run(drawn) >= best * (1 - 1e-9)


def test_a_step_is_the_closed_form_of_its_updates(es: dict[str, ModuleType]) -> None:
    s = es["schedule"]
    loss, lr = 0.37, 0.21
    expected = loss
    for _ in range(s.INNER):
        expected = (1 - lr) ** 2 * expected + lr * lr * s.NOISE
    assert s.step(loss, lr) == pytest.approx(expected, rel=1e-12)
    assert s.step(loss, 1.0) == pytest.approx(s.NOISE)
    assert s.step(loss, 2.5) > loss  # diverges, and stops at DIVERGED
    assert s.run([2.5] * 100) == s.DIVERGED


def _trial(tmp_path: Path, name: str, lr: float, max_step: int,
           checkpoint: Path) -> list[tuple[int, float]]:
    """Run the workload's trial script as dse runs it; the points it reported."""
    trial = tmp_path / name
    trial.mkdir(exist_ok=True)
    (trial / "params.json").write_text(json.dumps({"lr": lr}))
    env = dict(os.environ, DSE_TRIAL_ID=f"t-1-{name}", DSE_TRIAL_DIR=str(trial),
               DSE_PARAMS_FILE=str(trial / "params.json"), DSE_CHECKPOINT_DIR=str(checkpoint),
               DSE_ATTEMPT="1")
    subprocess.run([sys.executable, str(BENCHMARKS / "_es_schedule.py"), str(max_step), "0"],
                   env=env, check=True, timeout=60)
    progress = trial / "progress.jsonl"
    lines = progress.read_text().splitlines() if progress.exists() else []
    return [(p["step"], p["metrics"]["loss"]) for p in map(json.loads, lines)]


def test_the_trial_resumes_exactly_from_its_checkpoint_or_a_donors(
    es: dict[str, ModuleType], tmp_path: Path,
) -> None:
    s = es["schedule"]
    own = tmp_path / "ckpt-a"
    first = _trial(tmp_path, "a", 0.2, 5, own)
    assert first == [(t, s.run([0.2] * t)) for t in range(1, 6)]
    assert s.load(own) == (5, first[-1][1])
    assert (own / ".dse-checkpointed").exists()
    child = tmp_path / "ckpt-b"  # a PBT child: a copy of the donor's checkpoint, a new lr
    shutil.copytree(own, child)
    resumed = _trial(tmp_path, "a", 0.2, 9, own)  # the same trial goes on
    assert resumed == first + [(t, s.run([0.2] * t)) for t in range(6, 10)]
    copied = _trial(tmp_path, "b", 0.05, 9, child)
    assert copied == [(t, s.run([0.2] * 5 + [0.05] * (t - 5))) for t in range(6, 10)]
    result = json.loads((tmp_path / "b" / "result.json").read_text())
    assert result["metrics"]["loss"] == copied[-1][1]
    assert _trial(tmp_path, "c", 0.05, 9, child) == []  # a copy already at max_step
    result = json.loads((tmp_path / "c" / "result.json").read_text())
    assert result["metrics"]["loss"] == copied[-1][1]  # ran nothing: its donor's result


def test_a_copy_counts_the_steps_it_ran_from_where_it_resumed(
    es: dict[str, ModuleType],
) -> None:
    ray = es["ray"]
    points = [ray.RayPoint(float(t), "a", "a1", t, 1.0 / t, 0.1) for t in range(1, 5)]
    points += [ray.RayPoint(float(t), "b", "b1", t, 2.0 / t, 0.3) for t in range(1, 5)]
    # b paused at 4 and went on (its own checkpoint, its own lr): no copy
    points += [ray.RayPoint(10.0 + t, "b", "b2", t, 2.0 / t, 0.3) for t in range(5, 9)]
    # a exploited at 4: a copy of b's checkpoint at step 8, lr perturbed
    points += [ray.RayPoint(20.0 + t, "a", "a2", t, 1.5 / t, 0.24) for t in range(9, 13)]
    run = es["pbt"].read_ray_pbt(points, 12, 1.0)
    assert (run.exploited, run.children) == (1, 1)
    assert run.finals == {1: 1.5 / 12}
    assert run.resumed == {(1, 1): 0, (2, 1): 0, (2, 2): 4, (1, 2): 8}
    log = es["bench"].pbt_log("ray tune pbt", run)
    assert log.timeline()[-1][0] == 4 + 4 + 4 + 4  # every step reported, once
    # without the resume points a copy would count its donor's steps again
    assert es["bench"].pbt_log("x", type(run)(run.points, run.finals, 1.0)).timeline()[-1][0] \
        > 16


def test_the_per_seed_ratio_to_ray(es: dict[str, ModuleType]) -> None:
    ratio = es["pbt"].SeedRatio
    assert ratio(0, 200.0, 250.0, 330.0).ratio == pytest.approx(0.8)
    assert ratio(0, 200.0, None, 330.0).ratio == pytest.approx(200 / 330)  # at most this
    assert ratio(0, None, 250.0, 330.0).ratio == math.inf
    assert ratio(0, None, None, 330.0).ratio is None


def test_dse_pbt_campaign_is_the_issues_and_the_rule_takes_it(
    es: dict[str, ModuleType], tmp_path: Path,
) -> None:
    bench = es["bench"]
    workload = bench.workloads(quick=False, step_ms=50.0)["schedule"]
    doc: dict[str, Any] = bench.campaign_dict(workload, 3, bench.PBT, tmp_path)
    assert doc["stopping"]["pbt"] == {
        "population": 8, "interval": 4, "quantile": 0.25, "factors": [0.8, 1.2],
        "resample_probability": 0.25, "seed": 3}
    assert (doc["stopping"]["max_step"], doc["stopping"]["metric"]) == (40, "loss")
    assert doc["campaign"]["max_parallelism"] == 8
    assert "max_trials" not in doc["campaign"]  # the population caps the proposals
    import dse

    dse.campaign_from_dict(doc, workspace=tmp_path)
    rule = bench.plugins().stopping_rule_class(bench.PBT)
    rule(min_step=1, max_step=40, **doc["stopping"]["pbt"])
