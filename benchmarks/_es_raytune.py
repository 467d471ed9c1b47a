"""Ray Tune's population based training on the schedule workload (``_es_schedule.py``): the
peer of dse's ``pbt`` rule in ``early_stopping.py``.

One run is a ``ray.tune.Tuner`` over a function trainable that steps the same workload with
the same step function: it resumes from the step and loss in ``tune``'s checkpoint when it has
one (its own, after a pause, or a copy of its donor's after an exploit), sleeps the step's work,
and reports every step with a checkpoint (``ray.train.Checkpoint.from_directory``). The
scheduler is ``PopulationBasedTraining`` with ``time_attr="training_iteration"``,
``perturbation_interval``, ``quantile_fraction``, ``resample_probability`` and
``perturbation_factors`` as dse's rule gets them and ``hyperparam_mutations={"lr": the same
log-uniform range}``. The population is the given configs (the first N proposals of dse's
random agent with the seed, through ``BasicVariantGenerator(points_to_evaluate=...)``), all
running at once (``max_concurrent_trials`` = the population, Ray told of as many CPUs: the
trials sleep, they do not compute), each stopped at ``max_step`` by the run's ``stop``
criterion (so a member is never judged at its last step, as in dse). Ray's PBT draws from
Python's ``random`` and numpy's global generator in the driver; both are seeded with the seed
(the run still depends on timing, as dse's does).

Ray's asynchronous PBT pauses a member at its perturbation step whenever another is pending
or paused, and starts the one furthest behind (its fairness rule): members are restarted from
their own checkpoints many times a run (``reuse_actors``, as Ray advises for PBT, keeps the
worker processes). That costs wall time (about a minute a run of 8 members x 40 steps on 2
busy cores, against dse's 4 s), not steps: a restart goes on from the step it saved.

Every reported step is appended by the trainable as one JSON line (time, Ray trial, the
process's run, step, loss, lr) to a log file: the compute is the number of lines (every
iteration actually run, by every trial, after every restore), and the lines are the points the
scoring reads.

Ray Tune is a benchmark-only dependency: ``pip install 'ray[tune]==2.40.0'``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _peers import BenchmarkError

HERE = Path(__file__).resolve().parent
RAY_INSTALL = "'ray[tune]==2.40.0'"
_QUIET = {
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
    "RAY_DEDUP_LOGS": "0",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "1000",
    "RAY_TRAIN_V2_ENABLED": "0",
    "RAY_IGNORE_UNHANDLED_ERRORS": "1",
}
"""Environment that keeps Ray's console and result files to what a benchmark needs."""


def import_ray() -> Any:
    """Ray (with ``ray.tune`` and ``ray.train``) quietened, or a :class:`BenchmarkError`
    naming what to install."""
    for name, value in _QUIET.items():
        os.environ.setdefault(name, value)
    try:
        import ray
        import ray.train
        import ray.tune
        import ray.tune.schedulers
        import ray.tune.search
    except ImportError:
        raise BenchmarkError(
            f"ray is not installed; the schedule workload needs it: `.venv/bin/pip install"
            f" {RAY_INSTALL}`") from None
    for name in ("ray", "ray.tune", "ray.train", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="ray")
    return ray


@dataclass(frozen=True, slots=True)
class PbtOptions:
    """What both PBTs get: the campaign's ``[stopping.pbt]`` table."""

    population: int
    interval: int
    quantile: float
    factors: tuple[float, ...]
    resample_probability: float

    def table(self, seed: int) -> dict[str, Any]:
        """The ``[stopping.pbt]`` table of dse's campaign."""
        return {"population": self.population, "interval": self.interval,
                "quantile": self.quantile, "factors": list(self.factors),
                "resample_probability": self.resample_probability, "seed": seed}


@dataclass(frozen=True, slots=True)
class RayPoint:
    at: float
    trial: str
    run: str
    step: int
    loss: float
    lr: float


def _trainable(config: dict[str, Any]) -> None:
    """One member: resume from ``tune``'s checkpoint if any, then step to ``max_step``,
    reporting every step with its checkpoint and appending it to the log."""
    import _es_schedule as workload
    import ray.train

    lr, max_step = float(config["lr"]), int(config["max_step"])
    step_seconds, log = float(config["step_seconds"]), str(config["log"])
    trial = ray.train.get_context().get_trial_id()
    run = uuid.uuid4().hex[:12]
    saved = ray.train.get_checkpoint()
    at, loss = 0, workload.INITIAL
    if saved is not None:
        with saved.as_directory() as directory:
            at, loss = workload.load(Path(directory))
    while at < max_step:
        time.sleep(step_seconds)
        at, loss = at + 1, workload.step(loss, lr)
        line = json.dumps({"at": time.time(), "trial": trial, "run": run, "step": at,
                           "loss": loss, "lr": lr}) + "\n"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one line in one write: lines never interleave
        finally:
            os.close(fd)
        with tempfile.TemporaryDirectory() as directory:
            workload.save(Path(directory), at, loss)
            ray.train.report({"loss": loss, "step": at},
                             checkpoint=ray.train.Checkpoint.from_directory(directory))


_STARTED: list[Any] = []


def start_ray(population: int) -> Any:
    """Ray started once per process, with as many (logical) CPUs as the population, the
    benchmarks' directory on the workers' path (the trainable imports the workload)."""
    ray = import_ray()
    if not _STARTED:
        path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
        ray.init(num_cpus=population, include_dashboard=False, log_to_driver=False,
                 configure_logging=True, logging_level=logging.ERROR,
                 runtime_env={"env_vars": {"PYTHONPATH": path, **_QUIET}})
        _STARTED.append(ray)
    return ray


def stop_ray() -> None:
    if _STARTED:
        _STARTED.pop().shutdown()


def run_ray_pbt(configs: list[dict[str, Any]], seed: int, max_step: int,
                step_seconds: float, options: PbtOptions, work_dir: Path,
                ) -> tuple[list[RayPoint], float]:
    """One PBT run of Ray Tune over *configs*: every step any member ran, in time order, and
    the wall time of the run."""
    ray = start_ray(options.population)
    import numpy as np
    from _es_schedule import LR_HIGH, LR_LOW

    tune = ray.tune
    random.seed(seed)  # PBT's choices (donor, factor, resample or not)
    np.random.seed(seed)  # what a resample draws
    scheduler = tune.schedulers.PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=options.interval,
        quantile_fraction=options.quantile, resample_probability=options.resample_probability,
        perturbation_factors=options.factors,
        hyperparam_mutations={"lr": tune.loguniform(LR_LOW, LR_HIGH)})
    with tempfile.TemporaryDirectory(prefix="ray-pbt-", dir=work_dir) as scratch:
        log = Path(scratch) / "points.jsonl"
        points = [{"lr": float(c["lr"])} for c in configs]
        tuner = tune.Tuner(
            _trainable,
            param_space={"lr": tune.loguniform(LR_LOW, LR_HIGH), "max_step": max_step,
                         "step_seconds": step_seconds, "log": str(log)},
            tune_config=tune.TuneConfig(
                metric="loss", mode="min", scheduler=scheduler, num_samples=len(configs),
                max_concurrent_trials=options.population, reuse_actors=True,
                search_alg=tune.search.BasicVariantGenerator(points_to_evaluate=points)),
            run_config=ray.train.RunConfig(
                name=f"pbt-{seed}", storage_path=str(Path(scratch) / "results"), verbose=0,
                stop={"training_iteration": max_step},
                checkpoint_config=ray.train.CheckpointConfig(num_to_keep=None)),
        )
        start = time.perf_counter()
        grid = tuner.fit()
        wall = time.perf_counter() - start
        if grid.num_errors:
            raise BenchmarkError(f"ray tune pbt, seed {seed}: {grid.num_errors} trial(s)"
                                 f" failed: {grid.errors[0]}")
        with open(log, encoding="utf-8") as handle:
            got = [RayPoint(**json.loads(line)) for line in handle if line.strip()]
    got.sort(key=lambda p: (p.at, p.trial, p.step))
    started = {}
    for p in got:  # the population really started from the given configs
        started.setdefault(p.trial, p)
    initial = sorted(p.lr for p in started.values())
    wanted = sorted(float(c["lr"]) for c in configs)
    if len(initial) != len(wanted) or any(abs(a - b) > 1e-12 * b
                                          for a, b in zip(initial, wanted, strict=True)):
        raise BenchmarkError(f"ray tune pbt, seed {seed}: the members started at {initial},"
                             f" not the seed's configs {wanted}")
    return got, wall
