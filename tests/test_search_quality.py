"""benchmarks/search_quality.py's problems and harness: what its docstring claims of the
problems (their optima, the failing region, the edge), the rolling simulation, dse's runs
through the engine and the log a run resumes from. The peers themselves (Optuna, Ax) are
benchmark-only dependencies and are not imported here."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import dse

if TYPE_CHECKING:
    from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def sq(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    """The benchmark's modules, imported as the benchmark imports them (siblings)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _sq_peers
    import _sq_problems
    import _sq_runs

    return {"problems": _sq_problems, "peers": _sq_peers, "runs": _sq_runs}


def test_each_new_problem_reaches_its_f_star_at_its_optimum_and_nowhere_lower(
    sq: dict[str, ModuleType],
) -> None:
    q = sq["problems"]
    optima: dict[str, dict[str, Any]] = {
        "levy7": dict(zip(q.LEVY_NAMES, q.LEVY_SHIFT, strict=True)),
        "training": {"optimizer": "adamw", "schedule": "cosine", "lr": 10**-2.9, "layers": 11,
                     "batch": 32, "dropout": 0.1},
        "edge4": dict(zip(q.EDGE_NAMES, q.EDGE_OPTIMUM, strict=True)),
        "embedded20": dict.fromkeys(q.EMB_NAMES, 0.0)
        | {q.EMB_NAMES[i]: v for i, v in zip(q.EMB_ACTIVE, q.EMB_OPTIMUM, strict=True)}
        | {q.EMB_NAMES[i]: v for i, v in zip(q.EMB_WEAK, q.EMB_WEAK_BEST, strict=True)},
    }
    rng = random.Random(0)
    for key, point in optima.items():
        problem = q.PROBLEMS[key]
        space = dse.Space.from_dict(dict(problem.space))
        assert problem.feasible(space.coerce(point))
        assert problem.f(point) == pytest.approx(problem.optimum, abs=1e-9), key
        samples = [space.sample(rng) for _ in range(2000)]
        assert min(problem.f(p) for p in samples) > problem.optimum, key


def test_edge4_fails_a_third_of_the_cube_and_its_optimum_lies_0_03_inside_the_edge(
    sq: dict[str, ModuleType],
) -> None:
    q = sq["problems"]
    problem = q.PROBLEMS["edge4"]
    assert 0.30 < q.failed_fraction(problem, points=50_000) < 0.37
    optimum = dict(zip(q.EDGE_NAMES, q.EDGE_OPTIMUM, strict=True))
    assert problem.edge(optimum) == pytest.approx(0.03)
    # One step of 0.031 towards the ball's centre crosses the edge: the optimum is next to it.
    inward = {n: o + 0.031 * (c - o) / (q.EDGE_RADIUS + 0.03)
              for n, o, c in zip(q.EDGE_NAMES, q.EDGE_OPTIMUM, q.EDGE_CENTRE, strict=True)}
    assert not problem.feasible(inward)


class _Random:
    """A peer proposing uniform points (the simplest ask/tell), recording what it is told."""

    def __init__(self, problem: Any) -> None:
        self.space = dse.Space.from_dict(dict(problem.space))
        self.rng = random.Random(1)
        self.asked = 0
        self.told: list[int] = []
        self.running_at_ask: list[int] = []

    def ask(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        self.running_at_ask.append(self.asked - len(self.told))
        out = []
        for _ in range(n):
            out.append((self.asked, dict(self.space.sample(self.rng))))
            self.asked += 1
        return out

    def tell(self, handle: Any, params: Any, outcome: Any) -> None:
        self.told.append(handle)


def test_rolling_workers_ask_one_at_a_time_with_three_running_and_waves_ask_four(
    sq: dict[str, ModuleType],
) -> None:
    q, peers = sq["problems"], sq["peers"]
    problem = q.PROBLEMS["edge4"]
    rolling = _Random(problem)
    got = peers.drive(rolling, q.Evaluator(problem, 0), 20, 4, rolling=True)
    assert len(got) == 20
    assert rolling.running_at_ask[0] == 0
    assert set(rolling.running_at_ask[1:]) == {3}
    assert rolling.told != sorted(rolling.told)  # trials end out of order (log-normal times)
    waves = _Random(problem)
    peers.drive(waves, q.Evaluator(problem, 0), 20, 4, rolling=False)
    assert waves.running_at_ask == [0] * 5
    assert waves.told == sorted(waves.told)


def test_a_dse_run_goes_through_the_engine_and_a_resumed_log_skips_it(
    sq: dict[str, ModuleType], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = sq["runs"]
    task = runs.Task("dse random", "edge4", "P=4 rolling", 16, 3)
    result = runs.run_task(task)
    assert result.trials == 16
    assert 0 < result.failed < 16  # a third of the cube fails
    assert result.edge is not None
    assert result.edge > 0
    peer = dataclasses.replace(result, task=dataclasses.replace(task, method="optuna random"))
    path = tmp_path / "log.jsonl"
    header = {"code": {"dse": "d1", "peers": "p1"}}
    log = runs.RunLog(path, header, resume=False)
    log.add(result)
    log.add(peer)
    log.close()
    with path.open("a", encoding="utf-8") as f:
        f.write('{"run": {"task": ')  # the line being written when the run was interrupted
    resumed = runs.RunLog(path, header, resume=True)
    resumed.close()
    assert resumed.done == {task.key: result, peer.task.key: peer}
    assert resumed.dropped == 0
    # dse changed: its run is dropped (to be run again), the peer's kept, the log rewritten.
    changed = runs.RunLog(path, {"code": {"dse": "d2", "peers": "p1"}}, resume=True)
    changed.close()
    assert changed.done == {peer.task.key: peer}
    assert changed.dropped == 1
    assert runs.RunLog.results(path) == [peer]
    # --report reads a dse log beside a peers' log: one report over both.
    import search_quality

    other = tmp_path / "dse.jsonl"
    log = runs.RunLog(other, header, resume=False)
    log.add(result)
    log.close()
    assert search_quality.report_log([path, other]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["methods"] == ["dse random", "optuna random"]
    path.write_text(json.dumps({"header": {"code": "old"}}) + "\n")
    with pytest.raises(Exception, match="per-side code digests"):
        runs.RunLog(path, header, resume=True)


def test_the_peers_digest_does_not_depend_on_dse(
    sq: dict[str, ModuleType], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dse_agents

    digests = sq["runs"].code_digests()
    assert set(digests) == {"dse", "peers"}
    # Other dse_agents sources (an agent changed): dse's digest changes, the peers' does not.
    other = tmp_path / "dse_agents"
    other.mkdir()
    (other / "__init__.py").write_text("# another agent\n")
    monkeypatch.setattr(dse_agents, "__file__", str(other / "__init__.py"))
    changed = sq["runs"].code_digests()
    assert changed["peers"] == digests["peers"]
    assert changed["dse"] != digests["dse"]
    assert [sq["runs"].side(m) for m in ("dse bayesian", "optuna GP", "ax botorch")] == [
        "dse", "peers", "peers"]


def test_record_peers_with_estimate_records_nothing(
    sq: dict[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    # `--record-peers --estimate` says what the peers' log lacks and how long recording it
    # would take; it once started recording instead (on every core).
    import search_quality

    log = BENCHMARKS / "peers" / "search_quality"
    before = {path.name: path.read_bytes() for path in log.glob("*.jsonl")}
    code = search_quality.main(["--record-peers", "--estimate", "--peers", "optuna random",
                                "--functions", "branin", "--seeds", "2", "--jobs", "1"])
    assert code == 0
    out = capsys.readouterr().out
    # The committed log holds Optuna's random sampler on Branin for seeds 0-19 in every
    # setting (P=1, waves, rolling): none lacks in the version it holds, all 2 x 3 in another.
    import _sq_log

    installed = _sq_log.installed_version("optuna random")
    logged = _sq_log.PeerLog().versions("optuna random")
    lacking = 0 if installed is None or installed in logged else 6
    assert out.startswith(f"{lacking} peer runs to record ({6 - lacking} already in the log)")
    assert out.rstrip().endswith("worker(s)")
    assert {path.name: path.read_bytes() for path in log.glob("*.jsonl")} == before


def test_the_agent_alone_gives_the_engines_run_seed_for_seed(
    sq: dict[str, ModuleType], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # search_quality_agent.py drives the agent without the engine: the same points, the same
    # regret and failures as the engine's run of the same task (rolling, with failures).
    import search_quality_agent as alone

    task = sq["runs"].Task("dse bayesian", "edge4", "P=4 rolling", 60, 0)
    engine = sq["runs"].run_task(task)
    run = alone.run_one(("edge4", "P=4 rolling", 0))
    assert (run["regret"], run["found"], run["failed"]) == (
        engine.regret, engine.found, engine.failed)
    assert 0 < run["failed"] < 60
    # Its log is resumed (nothing run twice) and a log paired with itself gives 1.
    log = tmp_path / "runs.jsonl"
    log.write_text(json.dumps(run) + "\n" + '{"function": ')  # an interrupted last line
    assert alone.main(["--functions", "edge4", "--settings", "P=4 rolling", "--seeds", "1",
                       "--jobs", "1", "--log", str(log), "--against", str(log)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["edge4 P=4 rolling"]["median"] == engine.regret
    assert summary["edge4 P=4 rolling"]["against"] == 1.0
    assert len(log.read_text().splitlines()) == 2  # no run added
    # The cost column: the agent's CPU per ask of one trial beside Ax's logged seconds.
    cell = summary["edge4 P=4 rolling"]
    assert cell["cpu_per_ask_s"] == run["single_cpu_s"] > 0
    import _sq_log

    ax = _sq_log.PeerLog().get(sq["runs"].Task("ax botorch", "edge4", "P=4 rolling", 60, 0))
    assert ax is not None
    assert cell["ax_per_ask_s"] == ax.single_ask_s
    assert cell["ax_over_dse"] == pytest.approx(ax.single_ask_s / run["single_cpu_s"])


def test_the_latency_is_timed_in_cpu_seconds_too(sq: dict[str, ModuleType]) -> None:
    # Issue 44's target is CPU seconds of propose(4) after 1,000 observations.
    latency = sq["runs"].measure_latency("bayesian", sq["problems"].PROBLEMS["mixed"])
    assert len(latency.propose_s) == len(latency.propose_cpu_s) == 3
    assert all(cpu > 0 for cpu in latency.propose_cpu_s)
