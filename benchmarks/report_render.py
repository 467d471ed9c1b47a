"""Report rendering: how long `dse report --html` takes on a campaign of 100,000 trials, against
Optuna's matplotlib plots of a study of the same trials, in the same run.

The campaign is a real record: the engine runs 100,000 trials (quick: 10,000) of a
four-parameter space on the probe backend in virtual time (64 at a time, one in ten failing),
into a SQLite file. dse then renders the whole HTML report: the console report and its eight
plots (convergence against trials and spend, the timeline of every attempt per slot, parallel
coordinates, parameter importance, slices, contour, cost per effective result, outcomes).
Optuna gets the same trials as an in-memory study (values, params, start and end times) and
draws its three matplotlib counterparts: optimisation history, timeline and parallel
coordinates, each saved to PNG.

Usage::

    python benchmarks/report_render.py          # 100,000 trials
    python benchmarks/report_render.py --quick  # 10,000 trials, under a minute

The last line printed is one JSON object: ``trials``, ``dse_render_s``, ``optuna_render_s``,
``ratio_to_optuna`` (dse over Optuna: below 1 is faster), ``html_bytes``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _peers import BenchmarkError, import_optuna, table

import dse
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent

START = 1_000_000.0
SPACE = {
    "x": {"type": "float", "low": -5.0, "high": 5.0},
    "y": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "n": {"type": "int", "low": 1, "high": 64},
    "layout": {"type": "categorical", "choices": ["row", "col", "tile"]},
}


def points(count: int) -> list[dict[str, Any]]:
    rng = random.Random(0)
    return [{"x": rng.uniform(-5, 5), "y": 10 ** rng.uniform(-4, 0), "n": rng.randint(1, 64),
             "layout": rng.choice(["row", "col", "tile"])} for _ in range(count)]


def loss(p: dict[str, Any]) -> float:
    return (p["x"] - 1.0) ** 2 + abs(p["y"] - 0.01) * 10 + (p["n"] - 32) ** 2 / 100


def script(params: dict[str, Any]) -> ProbeScript:
    seconds = 30.0 + 3.0 * params["n"]
    if params["n"] % 10 == 0:
        return ProbeScript(seconds=seconds, state=dse.JobState.FAILED, metrics=None)
    return ProbeScript(seconds=seconds, metrics={"loss": loss(params)})


def record(count: int, root: Path) -> tuple[dse.Store, int]:
    """Run *count* trials through the engine into a record under *root*."""
    campaign = dse.campaign_from_dict({
        "campaign": {"name": "render", "mode": "rolling", "max_parallelism": 64,
                     "max_trials": count},
        "space": SPACE, "objectives": [{"metric": "loss"}],
    }, workspace=root)
    store = dse.Store(root / "dse.sqlite")
    clock = FakeClock(START)
    engine = dse.Engine(campaign, agent=ScriptedAgent(points(count)),
                        backend=ProbeBackend(script, clock=clock), store=store, clock=clock)
    result = engine.run()
    if result.stats.steps != count:
        raise BenchmarkError(f"the campaign ran {result.stats.steps} trials, not {count}")
    return store, result.campaign_id


def render_dse(store: dse.Store, run: int, out: Path) -> float:
    began = time.perf_counter()
    dse.write_html_report(store, run, out)
    return time.perf_counter() - began


def render_optuna(store: dse.Store, run: int, out: Path) -> float:
    optuna = import_optuna("optuna matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.trial import FrozenTrial, TrialState

    distributions = {
        "x": FloatDistribution(-5.0, 5.0), "y": FloatDistribution(1e-4, 1.0, log=True),
        "n": IntDistribution(1, 64), "layout": CategoricalDistribution(["row", "col", "tile"]),
    }
    by_row = {t.id: t for t in store.reads.trials(run)}
    trials = []
    for a in store.reads.attempts(run):
        t = by_row[a.trial_id]
        done = t.status is dse.TrialStatus.COMPLETED
        # Optuna's timeline reads the start and end times: the record's virtual seconds.
        trials.append(FrozenTrial(
            number=len(trials), trial_id=len(trials),
            state=TrialState.COMPLETE if done else TrialState.FAIL,
            value=t.score if done else None, params=t.params,
            distributions=distributions, user_attrs={}, system_attrs={},
            intermediate_values={}, datetime_start=_at(a.started_at),
            datetime_complete=_at(a.ended_at),
        ))
    study = optuna.create_study(direction="minimize")
    study.add_trials(trials)
    began = time.perf_counter()
    plots = optuna.visualization.matplotlib
    for name, draw in (("history", plots.plot_optimization_history),
                       ("timeline", plots.plot_timeline),
                       ("parallel", plots.plot_parallel_coordinate)):
        ax = draw(study)
        ax.figure.savefig(out / f"optuna-{name}.png", bbox_inches="tight")
        plt.close("all")
    return time.perf_counter() - began


def _at(seconds: float | None) -> datetime.datetime:
    assert seconds is not None  # every attempt of the record ran to its end
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).replace(tzinfo=None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10,000 trials")
    parser.add_argument("--trials", type=int, help="trials (default 100,000; quick 10,000)")
    args = parser.parse_args(argv)
    count = args.trials or (10_000 if args.quick else 100_000)
    try:
        with tempfile.TemporaryDirectory(prefix="dse-report-render-") as tmp:
            root = Path(tmp)
            began = time.perf_counter()
            store, run = record(count, root / "ws")
            built = time.perf_counter() - began
            out = root / "report.html"
            dse_s = render_dse(store, run, out)
            size = out.stat().st_size
            optuna_s = render_optuna(store, run, root)
            store.close()
    except BenchmarkError as exc:
        print(f"report_render: {exc}", file=sys.stderr)
        return 1
    print(f"report rendering: {count:,} trials (record built by the engine in {built:.0f} s)")
    print(table(("method", "plots", "seconds", "ratio"), [
        ("dse report --html (whole page)", "8 + report", f"{dse_s:.1f}", "1.00"),
        ("optuna.visualization.matplotlib", "3", f"{optuna_s:.1f}", f"{optuna_s / dse_s:.2f}"),
    ]))
    print(f"HTML page: {size / 1e6:.2f} MB, self-contained")
    print(json.dumps({
        "trials": count, "dse_render_s": round(dse_s, 2), "optuna_render_s": round(optuna_s, 2),
        "ratio_to_optuna": round(dse_s / optuna_s, 3), "html_bytes": size,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
