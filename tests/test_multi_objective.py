"""benchmarks/multi_objective.py's problems and harness: the problems' fronts and the true
fronts' hypervolumes its docstring states, the hypervolume that scores every method (against
an exact union of boxes; the benchmark checks it against Optuna's before it runs), a peer's
rolling run, a dse Pareto campaign through the engine, and the log a report is made from.
Optuna is a benchmark-only dependency and is not imported here."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def mo(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    """The benchmark's modules, imported as the benchmark imports them (siblings)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _mo_peers
    import _mo_problems
    import _mo_runs
    import multi_objective

    return {"problems": _mo_problems, "peers": _mo_peers, "runs": _mo_runs,
            "main": multi_objective}


def _point(n: int, x: Sequence[float]) -> dict[str, float]:
    return {f"x{i}": v for i, v in enumerate(x, start=1)} | {
        f"x{i}": 0.0 for i in range(len(x) + 1, n + 1)}


def test_zdt_points_with_x2_on_zero_lie_on_the_stated_fronts_and_others_above_them(
    mo: dict[str, ModuleType],
) -> None:
    q = mo["problems"]
    for t in (0.0, 0.04, 0.25, 0.5, 0.81, 1.0):
        assert q.zdt1(_point(6, [t])) == pytest.approx((t, 1 - math.sqrt(t)))
        assert q.zdt2(_point(6, [t])) == pytest.approx((t, 1 - t * t))
        off = _point(6, [t, 0.1, 0.0, 0.3])
        for f in (q.zdt1, q.zdt2):
            assert f(off)[0] == t
            assert f(off)[1] > f(_point(6, [t]))[1]


def test_dtlz2_points_with_the_last_four_at_one_half_lie_on_the_unit_sphere(
    mo: dict[str, ModuleType],
) -> None:
    q = mo["problems"]
    rng = random.Random(0)
    for _ in range(20):
        a, b = rng.random(), rng.random()
        on = q.dtlz2({"x1": a, "x2": b} | {f"x{i}": 0.5 for i in range(3, 7)})
        assert math.fsum(v * v for v in on) == pytest.approx(1.0)
        assert min(on) >= -1e-12
        off = q.dtlz2({"x1": a, "x2": b, "x3": 0.9, "x4": 0.5, "x5": 0.1, "x6": 0.5})
        assert math.sqrt(math.fsum(v * v for v in off)) == pytest.approx(1 + 0.16 + 0.16)
    assert q.dtlz2(_point(6, [1.0, 0.0]) | {f"x{i}": 0.5 for i in range(3, 7)}) == (
        pytest.approx((0.0, 0.0, 1.0), abs=1e-12))


def test_the_true_fronts_hypervolumes_are_what_dense_fronts_approach(
    mo: dict[str, ModuleType],
) -> None:
    q = mo["problems"]
    problems = q.PROBLEMS
    assert problems["zdt1"].optimum == pytest.approx(0.876667, abs=1e-6)
    assert problems["zdt2"].optimum == pytest.approx(0.543333, abs=1e-6)
    assert problems["dtlz2"].optimum == pytest.approx(1.331 - math.pi / 6)
    # 201 front points miss 0.0026 of it (steps of 1/200), a grid of 11 x 11 on the sphere 0.065.
    for key in ("zdt1", "zdt2"):
        front = [problems[key].f(_point(6, [i / 200])) for i in range(201)]
        got = q.hypervolume(front, problems[key].reference)
        assert problems[key].optimum - 0.003 < got < problems[key].optimum
    sphere = [
        problems["dtlz2"].f({"x1": i / 10, "x2": j / 10} | {f"x{k}": 0.5 for k in range(3, 7)})
        for i in range(11) for j in range(11)
    ]
    got = q.hypervolume(sphere, problems["dtlz2"].reference)
    assert problems["dtlz2"].optimum - 0.07 < got < problems["dtlz2"].optimum


def _union_of_boxes(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """The volume dominated by *points* within *reference*, exactly: the cells of the grid
    of every point's coordinates, each counted when a point dominates its lower corner."""
    inside = [p for p in points if all(x < r for x, r in zip(p, reference, strict=True))]
    axes = [sorted({p[d] for p in inside} | {reference[d]}) for d in range(len(reference))]
    total = 0.0
    for cell in itertools.product(*(range(len(a) - 1) for a in axes)):
        corner = [axes[d][i] for d, i in enumerate(cell)]
        if any(all(x <= c for x, c in zip(p, corner, strict=True)) for p in inside):
            total += math.prod(axes[d][i + 1] - axes[d][i] for d, i in enumerate(cell))
    return total


def test_the_hypervolume_scoring_every_method_is_the_exact_union_of_boxes(
    mo: dict[str, ModuleType],
) -> None:
    hypervolume = mo["problems"].hypervolume
    rng = random.Random(0)
    for m in (2, 3):
        for _ in range(25):
            points = [tuple(rng.choice((rng.random(), round(rng.random(), 1)))
                            for _ in range(m)) for _ in range(rng.randint(1, 14))]
            reference = (0.9,) * m
            assert hypervolume(points, reference) == pytest.approx(
                _union_of_boxes(points, reference), abs=1e-12)
    assert hypervolume([(1.0, 0.1), (0.95, 0.95)], (0.9, 0.9)) == 0.0


class _Random:
    """A peer proposing uniform points (the simplest ask/tell), counting what it is told."""

    def __init__(self, problem: Any) -> None:
        self.names = problem.names
        self.rng = random.Random(1)
        self.running_at_ask: list[int] = []
        self.asked = 0
        self.told = 0

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        self.running_at_ask.append(self.asked - self.told)
        self.asked += n
        return [(None, {name: self.rng.random() for name in self.names}) for _ in range(n)]

    def tell(self, handle: Any, params: Any, outcome: Any) -> None:
        self.told += 1


def test_a_rolling_peer_and_a_dse_pareto_campaign_each_evaluate_the_budget(
    mo: dict[str, ModuleType], tmp_path: Path,
) -> None:
    q, peers, runs = mo["problems"], mo["peers"], mo["runs"]
    problem = q.PROBLEMS["dtlz2"]
    peer = _Random(problem)
    got = peers.drive(peer, q.Evaluator(problem, 0), 14, 4, rolling=True)
    assert len(got) == peer.told == 14
    assert set(peer.running_at_ask[1:]) == {3}  # a worker asks as soon as its trial ends
    assert all(losses == problem.f(params) for params, losses in got)

    task = runs.Task("dse random", "dtlz2", "P=4 rolling", 14, 3)
    assert runs.campaign(task, "random", problem, tmp_path).pareto
    evaluated = runs.run_dse(task, "random")
    assert len(evaluated) == 14
    # The objective values read back from the record are those of the trials' params.
    assert all(losses == pytest.approx(problem.f(params)) for params, losses in evaluated)
    result = runs.run_task(task)
    assert len(result.losses) == 14
    assert 0 < result.hypervolume == q.final_hypervolume(problem, evaluated)


def test_a_report_from_logs_ends_with_one_ratio_per_problem_and_setting(
    mo: dict[str, ModuleType], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    runs, main = mo["runs"], mo["main"]
    ours = runs.RunResult(runs.Task("dse bayesian", "zdt1", "P=1", 2, 0),
                          ((0.2, 0.5), (0.5, 0.2)), 1.0)
    theirs = runs.RunResult(runs.Task("optuna GP", "zdt1", "P=1", 2, 0),
                            ((0.2, 0.6), (0.6, 0.2)), 2.0)
    path = tmp_path / "log.jsonl"
    header = {"code": {"dse": "d1", "peers": "p1"}}
    log = runs.RunLog(path, header, resume=False)
    log.add(ours)
    log.add(theirs)
    log.close()
    with path.open("a", encoding="utf-8") as f:
        f.write('{"run": {"task": ')  # the line being written when the run was interrupted
    resumed = runs.RunLog(path, {"code": {"dse": "d2", "peers": "p1"}}, resume=True)
    resumed.close()
    assert list(resumed.done.values()) == [theirs]  # dse changed: its run is made again
    assert resumed.dropped == 1
    other = tmp_path / "dse.jsonl"
    log = runs.RunLog(other, header, resume=False)
    log.add(ours)
    log.close()

    assert main.report_log([path, other]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # (1.1 - 0.2) * (1.1 - 0.5) + (1.1 - 0.5) * (0.5 - 0.2) = 0.72, against 0.9 * 0.5 + 0.5 * 0.4
    assert summary["ratios"] == {"zdt1 P=1": pytest.approx(0.72 / 0.65, abs=1e-4)}
    assert summary["met"] == {"zdt1 P=1": True}
    assert summary["best_peer"] == {"zdt1 P=1": "optuna GP"}
    assert summary["methods"] == ["dse bayesian", "optuna GP"]


def test_a_report_of_chosen_settings_keeps_a_cells_extra_seeds(
    mo: dict[str, ModuleType], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # Seeds 0-1 of both settings, then seeds 2-3 of P=1 alone (run apart, --first-seed 2):
    # the whole report compares the 2 seeds every cell has; --settings "P=1" all 4.
    runs, main = mo["runs"], mo["main"]
    path = tmp_path / "log.jsonl"
    log = runs.RunLog(path, {"code": {"dse": "d", "peers": "p"}}, resume=False)
    for seed in range(4):
        for setting in ("P=1", "P=4 waves") if seed < 2 else ("P=1",):
            for method, y in (("dse bayesian", 0.5), ("optuna GP", 0.6 - 0.1 * seed)):
                log.add(runs.RunResult(runs.Task(method, "zdt1", setting, 2, seed),
                                       ((0.2, y), (y, 0.2)), 1.0))
    log.close()

    assert main.report_log([path]) == 0
    whole = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert whole["seeds"] == {"zdt1": 2}
    assert set(whole["ratios"]) == {"zdt1 P=1", "zdt1 P=4 waves"}
    assert main.report_log([path], ["zdt1"], ["P=1"]) == 0
    chosen = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert chosen["seeds"] == {"zdt1": 4}
    assert set(chosen["ratios"]) == {"zdt1 P=1"}
    # GP's median over seeds 0-3 (y = 0.6, 0.5, 0.4, 0.3) differs from over 0-1.
    assert chosen["ratios"]["zdt1 P=1"] != whole["ratios"]["zdt1 P=1"]
