"""Engine overhead: dse trials/s on zero-length trials against Optuna's ask/tell loop.

What is measured (one process, same machine, one run after the other):

* **dse**: ``Engine.run()`` of a campaign of zero-length trials on the probe backend (its default
  script: every trial ends on the first poll), proposed by ``dse_agents.RandomAgent`` on a mixed,
  infinite space, ``max_parallelism = 64``, in ``waves`` mode (the headline) and ``rolling`` mode.
  The record is a real SQLite file opened with ``dse.Store(path)`` (durable: WAL +
  ``synchronous=FULL``), so every trial's record is committed durably before dse acts on it.
  After each run the file is reopened with a fresh ``Store`` and must hold exactly N completed
  trials, otherwise the program exits non-zero.
* **Optuna** (imported only here; ``pip install optuna``): ``study.ask()`` / ``study.tell()`` with
  ``RandomSampler(seed=0)`` on the same space and a trivial objective value, with in-memory
  storage, ``JournalStorage`` on a file (fsync per append) and SQLite ``RDBStorage``. The durable
  Optuna storages are slow, so they run fewer trials; the table states each count.

Timings include opening the record (``Store`` / ``create_study``) and exclude verification and
imports (both peers import before their clock starts). The targets (issue 19): at least 10,000
durable dse trials/s on an idle machine, and at least 1.5x Optuna's in-memory storage in the
same run.

Usage::

    python benchmarks/engine_overhead.py            # full run (a few minutes at most)
    python benchmarks/engine_overhead.py --quick    # under a minute
    python benchmarks/engine_overhead.py --profile  # plus a cProfile of one dse waves run
    python benchmarks/engine_overhead.py --repeat 3 # best of 3 (dse modes, Optuna in-memory)

The last line printed is one JSON object with the measured rates.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import pstats
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from _peers import BenchmarkError, import_optuna, table

import dse
from dse.testing import ProbeBackend

if TYPE_CHECKING:
    from collections.abc import Callable

Mode = Literal["waves", "rolling"]

PARALLELISM = 64
# Records live beside the benchmark, as a user's `.dse/` lives beside the campaign file; the
# machine's /tmp may sit on a different, slower filesystem. Both peers write to the same place.
WORK_DIR = Path(__file__).resolve().parent / ".work"
DSE_TARGET_TRIALS_PER_S = 10_000.0
"""Durable trials/s on an idle machine (issue 19)."""
MEMORY_RATIO_TARGET = 1.5
"""dse (durable) against Optuna's in-memory storage, measured in the same run (issue 19)."""

SPACE: dict[str, Any] = {
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "adamw", "rmsprop"]},
    "layers": {"type": "int", "low": 1, "high": 32},
    "lr": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
}


@dataclass(frozen=True, slots=True)
class Counts:
    dse: int
    memory: int
    journal: int
    sqlite: int


FULL = Counts(dse=20_000, memory=20_000, journal=2_000, sqlite=500)
QUICK = Counts(dse=5_000, memory=5_000, journal=500, sqlite=200)


@dataclass(frozen=True, slots=True)
class Measurement:
    method: str
    trials: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.trials / self.seconds if self.seconds > 0 else math.inf


# -- dse -----------------------------------------------------------------------------------


def _random_agent_class() -> Any:
    try:
        from dse_agents import RandomAgent
    except ImportError as exc:
        raise BenchmarkError(
            f"cannot import dse_agents.RandomAgent ({exc}); install packages/agents"
        ) from None
    return RandomAgent


def _campaign(mode: Mode, trials: int, workspace: Path, name: str | None = None,
              parallelism: int | None = None) -> dse.Campaign:
    return dse.campaign_from_dict(
        {
            "campaign": {
                "name": name or f"overhead-{mode}",
                "agent": "random",
                "backend": "probe",
                "mode": mode,
                "max_parallelism": parallelism or PARALLELISM,
                "max_trials": trials,
                "seed": 0,
            },
            "space": SPACE,
            "objectives": [{"metric": "value", "direction": "minimize"}],
        },
        workspace=workspace,
    )


@dataclass
class Split:
    """Where a dse run's seconds went: committing the record (``dse.Store.commit``: SQL and
    fsync, timed inside the run); and what one directory per trial would add (as many
    ``mkdir`` calls in a fresh directory, timed right after, relative to the directory's file
    descriptor as the engine makes them): the probe wants none (``dse.Backend.trial_dirs``),
    a backend that runs commands gets one per trial."""

    seconds: float = 0.0
    commits_s: float = 0.0
    commits: int = 0
    dirs_s: float = 0.0

    def floor_rate(self, trials: int) -> float:
        """Trials/s if the engine's own logic cost nothing: the record's commits only."""
        return trials / self.commits_s if self.commits_s > 0 else math.inf


def split_dse(mode: Mode, trials: int) -> Split:
    """One more dse run (not the timed ones) with its commits timed, then *trials* mkdirs."""
    split = Split()
    commit = dse.Store.commit

    def timed(store: dse.Store, batch: Any) -> None:
        start = time.perf_counter()
        try:
            commit(store, batch)
        finally:
            split.commits_s += time.perf_counter() - start
            split.commits += 1

    dse.Store.commit = timed  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory(prefix="dse-overhead-split-", dir=WORK_DIR) as tmp:
            split.seconds = _run_dse_once(mode, trials, Path(tmp))[0]
    finally:
        dse.Store.commit = commit  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="dse-overhead-dirs-", dir=WORK_DIR) as tmp:
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        try:
            start = time.perf_counter()
            for number in range(trials):
                os.mkdir(f"{number:06d}", dir_fd=fd)
            split.dirs_s = time.perf_counter() - start
        finally:
            os.close(fd)
    return split


def _run_dse_once(mode: Mode, trials: int, workspace: Path) -> tuple[float, int, Path]:
    """Run one campaign; return (seconds, campaign id, record path)."""
    random_agent = _random_agent_class()
    # Imported before the clock starts, as Optuna is: dse imports its engine lazily.
    engine_class = dse.Engine
    campaign = _campaign(mode, trials, workspace)
    db_path = workspace / "dse.sqlite"
    start = time.perf_counter()
    store = dse.Store(db_path)
    try:
        engine = engine_class(
            campaign,
            agent=random_agent(campaign.space, seed=0),
            backend=ProbeBackend(),
            store=store,
        )
        result = engine.run()
        seconds = time.perf_counter() - start
    finally:
        store.close()
    if result.status != "completed":
        raise BenchmarkError(
            f"dse {mode}: campaign ended {result.status} ({result.end_reason}), expected completed"
        )
    return seconds, result.campaign_id, db_path


def _verify_record(db_path: Path, campaign_id: int, trials: int, mode: Mode) -> None:
    """Reopen the record with a fresh Store: exactly *trials* completed trial rows."""
    store = dse.Store(db_path)
    try:
        by_status = {s.value: n for s, n in store.reads.trial_counts(campaign_id).items()}
        journal_mode = store.journal_mode
    finally:
        store.close()
    if by_status != {"completed": trials}:
        raise BenchmarkError(
            f"dse {mode}: {db_path} holds {by_status}, expected {{'completed': {trials}}}"
        )
    if str(journal_mode).lower() != "wal":
        raise BenchmarkError(f"dse {mode}: {db_path} journal_mode={journal_mode}, expected wal")


def bench_dse(mode: Mode, trials: int, repeat: int = 1) -> Measurement:
    """Best (shortest) of *repeat* runs, each in a fresh workspace and verified."""
    best = math.inf
    for _ in range(max(repeat, 1)):
        with tempfile.TemporaryDirectory(prefix=f"dse-overhead-{mode}-", dir=WORK_DIR) as tmp:
            seconds, campaign_id, db_path = _run_dse_once(mode, trials, Path(tmp))
            _verify_record(db_path, campaign_id, trials, mode)
        best = min(best, seconds)
    return Measurement(f"dse {mode} (P={PARALLELISM}, SQLite WAL+FULL)", trials, best)


def profile_dse(mode: Mode, trials: int, top: int = 25) -> str:
    """cProfile one dse run (not timed); return the top entries by tottime."""
    profiler = cProfile.Profile()
    with tempfile.TemporaryDirectory(prefix="dse-overhead-profile-", dir=WORK_DIR) as tmp:
        profiler.enable()
        seconds, campaign_id, db_path = _run_dse_once(mode, trials, Path(tmp))
        profiler.disable()
        _verify_record(db_path, campaign_id, trials, mode)
    out = io.StringIO()
    out.write(f"cProfile: dse {mode}, {trials} trials, {seconds:.2f} s under the profiler\n")
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(pstats.SortKey.TIME).print_stats(top)
    return out.getvalue()


# -- Optuna --------------------------------------------------------------------------------


def _import_optuna() -> Any:
    return import_optuna("optuna")


def _journal_storage(optuna: Any, path: Path) -> Any:
    storages = optuna.storages
    journal = getattr(storages, "journal", None)
    backend_cls = getattr(journal, "JournalFileBackend", None) if journal else None
    if backend_cls is not None:
        return storages.JournalStorage(backend_cls(str(path)))
    # Optuna < 4.0
    return storages.JournalStorage(storages.JournalFileStorage(str(path)))


def _ask_tell(optuna: Any, storage: Any, trials: int) -> None:
    study = optuna.create_study(
        storage=storage,
        sampler=optuna.samplers.RandomSampler(seed=0),
        direction="minimize",
        study_name="overhead",
    )
    for _ in range(trials):
        trial = study.ask()
        trial.suggest_categorical("optimizer", SPACE["optimizer"]["choices"])
        layers = trial.suggest_int("layers", 1, 32)
        lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
        dropout = trial.suggest_float("dropout", 0.0, 0.5)
        study.tell(trial, lr * layers + dropout)
    done = len(study.get_trials(deepcopy=False))
    if done != trials:
        raise BenchmarkError(f"optuna: the study holds {done} trials, expected {trials}")


def bench_optuna(
    kind: Literal["memory", "journal", "sqlite"], trials: int, repeat: int = 1
) -> Measurement:
    """Best (shortest) of *repeat* runs, like :func:`bench_dse`."""
    runs = [_bench_optuna_once(kind, trials) for _ in range(max(repeat, 1))]
    return min(runs, key=lambda m: m.seconds)


def _bench_optuna_once(kind: Literal["memory", "journal", "sqlite"], trials: int) -> Measurement:
    optuna = _import_optuna()
    with tempfile.TemporaryDirectory(prefix=f"optuna-overhead-{kind}-", dir=WORK_DIR) as tmp:
        start = time.perf_counter()
        if kind == "memory":
            storage: Any = None
            label = "optuna in-memory"
        elif kind == "journal":
            storage = _journal_storage(optuna, Path(tmp) / "journal.log")
            label = "optuna JournalStorage (file)"
        else:
            storage = optuna.storages.RDBStorage(f"sqlite:///{Path(tmp) / 'optuna.db'}")
            label = "optuna RDBStorage (SQLite)"
        _ask_tell(optuna, storage, trials)
        seconds = time.perf_counter() - start
        if kind == "sqlite":
            storage.engine.dispose()
    return Measurement(label, trials, seconds)


# -- a PostgreSQL record (--record URL) ------------------------------------------------------

PG_RATIO_TARGET = 20.0
"""dse waves on PostgreSQL against Optuna's RDBStorage on the same server (issue 40)."""
CONCURRENT_TARGET = 4.0
"""8 concurrent controllers' total trials/s against one controller's (issue 40)."""


@dataclass(frozen=True, slots=True)
class Postgres:
    rows: tuple[Measurement, ...]
    one: Any
    many: Any
    timed_one: Any
    """One controller whose trials take time (``_pg_record.TIMED_S``) ..."""
    timed_many: Any
    """... and 8 at once: the record's own scaling, the CPU left over."""

    def line(self) -> str:
        dse_pg, optuna_pg = self.rows
        ratio, scale = dse_pg.rate / optuna_pg.rate, self.many.rate / self.one.rate
        return (f"PostgreSQL: dse {dse_pg.rate:,.0f} trials/s, Optuna RDBStorage"
                f" {optuna_pg.rate:,.0f}: {ratio:.1f}x (target {PG_RATIO_TARGET:.0f}x:"
                f" {'met' if ratio >= PG_RATIO_TARGET else 'NOT met'}); {self.many.controllers}"
                f" controllers at once {self.many.rate:,.0f} trials/s in all, one alone"
                f" {self.one.rate:,.0f}: {scale:.2f}x (target {CONCURRENT_TARGET:.0f}x:"
                f" {'met' if scale >= CONCURRENT_TARGET else 'NOT met'}; {os.cpu_count()}"
                " cores, server included)" + self._cpu() + self._timed())

    def _timed(self) -> str:
        from _pg_record import TIMED_PARALLELISM, TIMED_S

        one, many = self.timed_one, self.timed_many
        busy = "" if many.cores_busy is None else f", {many.cores_busy:.2f} cores busy"
        return (f". Trials of {TIMED_S * 1000:.0f} ms, {TIMED_PARALLELISM} at once per"
                f" controller: {many.controllers} controllers at once {many.rate:,.0f}"
                f" trials/s in all, one alone {one.rate:,.0f}: {many.rate / one.rate:.2f}x"
                f" (at most {many.controllers}x{busy})")

    def _cpu(self) -> str:
        """What bounds the controllers' scaling: CPU per trial alone and at once, and the
        cores each run kept busy (the server's CPU read where it runs here)."""
        if self.one.cpu_ms_per_trial is None or self.many.cpu_ms_per_trial is None:
            return ""
        bound = (os.cpu_count() or 1) / self.one.cores_busy
        return (f"; CPU per trial (controllers and server) {self.one.cpu_ms_per_trial:.3f} ms"
                f" alone, {self.many.cpu_ms_per_trial:.3f} ms at once; one controller keeps"
                f" {self.one.cores_busy:.2f} cores busy, {self.many.controllers} kept"
                f" {self.many.cores_busy:.2f}: on {os.cpu_count()} cores, at once can reach at"
                f" most {bound:.2f}x one")

    def summary(self) -> dict[str, Any]:
        dse_pg, optuna_pg = self.rows
        return {
            "dse_trials_per_s": round(dse_pg.rate, 1),
            "optuna_rdb_trials_per_s": round(optuna_pg.rate, 1),
            "ratio_to_optuna_rdb": round(dse_pg.rate / optuna_pg.rate, 2),
            "one_controller_trials_per_s": round(self.one.rate, 1),
            "controllers": self.many.controllers,
            "concurrent_trials_per_s": round(self.many.rate, 1),
            "concurrent_ratio": round(self.many.rate / self.one.rate, 2),
            "trials_per_controller": self.many.trials,
            "cpu_ms_per_trial_one": self.one.cpu_ms_per_trial,
            "cpu_ms_per_trial_concurrent": self.many.cpu_ms_per_trial,
            "cores_busy_one": self.one.cores_busy,
            "cores_busy_concurrent": self.many.cores_busy,
            "timed_one_controller_trials_per_s": round(self.timed_one.rate, 1),
            "timed_concurrent_trials_per_s": round(self.timed_many.rate, 1),
            "timed_concurrent_ratio": round(self.timed_many.rate / self.timed_one.rate, 2),
            "timed_trials_per_controller": self.timed_many.trials,
            "timed_cores_busy_concurrent": self.timed_many.cores_busy,
            "ratio_target": PG_RATIO_TARGET,
            "concurrent_target": CONCURRENT_TARGET,
        }


def bench_postgres(url: str, counts: Counts, dse_trials: int, repeat: int) -> Postgres:
    """dse waves and Optuna's RDBStorage on the PostgreSQL server of *url*; then one and
    :data:`_pg_record.CONTROLLERS` controllers at once."""
    from _pg_record import CONTROLLERS, Schema, concurrent, optuna_postgres, run_dse

    best = math.inf
    for _ in range(max(repeat, 1)):
        print("running dse waves on PostgreSQL ...", file=sys.stderr, flush=True)
        with (Schema(url, "dse") as record,
              tempfile.TemporaryDirectory(prefix="dse-overhead-pg-", dir=WORK_DIR) as tmp):
            campaign = _campaign("waves", dse_trials, Path(tmp))
            seconds, _, done = run_dse(campaign, record, Path(tmp),
                                       _random_agent_class()(campaign.space, seed=0))
            if done != dse_trials:
                raise BenchmarkError(f"dse on PostgreSQL: {done} trials completed, expected"
                                     f" {dse_trials}")
        best = min(best, seconds)
    print("running optuna RDBStorage on PostgreSQL ...", file=sys.stderr, flush=True)
    with Schema(url, "optuna") as record:
        optuna_s = optuna_postgres(_import_optuna(), record, counts.sqlite, _ask_tell)
    each = max(dse_trials // 4, 500)
    print(f"running 1, then {CONTROLLERS} controllers at once on PostgreSQL ...",
          file=sys.stderr, flush=True)
    one = concurrent(url, 1, each, WORK_DIR)
    many = concurrent(url, CONTROLLERS, each, WORK_DIR)
    timed = 200 if dse_trials <= 2000 else 400
    print(f"running 1, then {CONTROLLERS} controllers at once, trials that take time ...",
          file=sys.stderr, flush=True)
    timed_one = concurrent(url, 1, timed, WORK_DIR, timed=True)
    timed_many = concurrent(url, CONTROLLERS, timed, WORK_DIR, timed=True)
    return Postgres((Measurement("dse waves (P=64, PostgreSQL)", dse_trials, best),
                     Measurement("optuna RDBStorage (PostgreSQL)", counts.sqlite, optuna_s)),
                    one, many, timed_one, timed_many)


# -- report --------------------------------------------------------------------------------


def _table(rows: list[Measurement], dse_rate: float) -> str:
    header = ("method", "trials", "seconds", "trials/s", "dse (waves) ratio")
    body = [
        (
            m.method,
            f"{m.trials:,}",
            f"{m.seconds:.3f}",
            f"{m.rate:,.0f}",
            f"{dse_rate / m.rate:.2f}x" if m.rate > 0 else "-",
        )
        for m in rows
    ]
    return table(header, body)


def main(argv: list[str] | None = None) -> int:
    WORK_DIR.mkdir(exist_ok=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller counts (under a minute)")
    parser.add_argument("--dse-trials", type=int, help="override the dse trial count")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each dse mode and Optuna in-memory this many times and keep the best"
        " (default 1)",
    )
    parser.add_argument(
        "--record", metavar="URL",
        help="also: dse waves on a PostgreSQL record at URL (a database the role may create"
        " schemas in) against Optuna's RDBStorage on the same server, and 8 concurrent dse"
        " controllers on one record against one",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile one (untimed) dse waves run and print the top 25 by tottime",
    )
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else FULL
    dse_trials = args.dse_trials or counts.dse

    steps: list[tuple[str, Callable[[], Measurement]]] = [
        ("dse waves", lambda: bench_dse("waves", dse_trials, args.repeat)),
        ("dse rolling", lambda: bench_dse("rolling", dse_trials, args.repeat)),
        ("optuna memory", lambda: bench_optuna("memory", counts.memory, args.repeat)),
        ("optuna journal", lambda: bench_optuna("journal", counts.journal)),
        ("optuna sqlite", lambda: bench_optuna("sqlite", counts.sqlite)),
    ]
    results: list[Measurement] = []
    try:
        for name, step in steps:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            results.append(step())
        postgres = None if args.record is None else bench_postgres(
            args.record, counts, dse_trials, args.repeat)
        print("running dse waves, its directories and commits timed ...", file=sys.stderr)
        split = split_dse("waves", dse_trials)
        profile = profile_dse("waves", dse_trials) if args.profile else None
    except BenchmarkError as exc:
        print(f"engine_overhead: error: {exc}", file=sys.stderr)
        return 1

    waves, rolling, memory, journal, sqlite = results
    print(
        f"engine overhead: zero-length trials, {sys.platform}, Python "
        f"{sys.version.split()[0]}, dse {dse.__version__}, optuna {_import_optuna().__version__}"
    )
    print(_table(results, waves.rate))
    ratio_journal = waves.rate / journal.rate
    ratio_memory = waves.rate / memory.rate
    met_rate = waves.rate >= DSE_TARGET_TRIALS_PER_S
    met_ratio = ratio_memory >= MEMORY_RATIO_TARGET
    print(
        f"targets: dse >= {DSE_TARGET_TRIALS_PER_S:,.0f} trials/s durable (idle machine): "
        f"{'met' if met_rate else 'NOT met'} ({waves.rate:,.0f}); "
        f">= {MEMORY_RATIO_TARGET:.1f}x optuna in-memory in the same run: "
        f"{'met' if met_ratio else 'NOT met'} ({ratio_memory:.2f}x)"
    )
    floor = split.floor_rate(dse_trials)
    mkdirs = dse_trials / split.dirs_s if split.dirs_s else math.inf
    print(
        f"where a waves run's time goes (one more run, {split.seconds:.3f} s): record commits"
        f" {split.commits_s:.3f} s ({split.commits} commits, SQL and fsync), which alone,"
        f" with no engine logic at all, allow {floor:,.0f} trials/s; a backend that wants"
        f" a directory per trial (any that runs commands; not the probe) adds"
        f" {split.dirs_s:.3f} s ({mkdirs:,.0f} mkdir/s on this disk)"
    )
    if profile is not None:
        print(profile)
    if postgres is not None:
        print(_table(list(postgres.rows), waves.rate))
        print(postgres.line())
    summary = {
        "dse_trials_per_s": round(waves.rate, 1),
        "dse_rolling_trials_per_s": round(rolling.rate, 1),
        "optuna_memory_trials_per_s": round(memory.rate, 1),
        "optuna_journal_trials_per_s": round(journal.rate, 1),
        "optuna_sqlite_trials_per_s": round(sqlite.rate, 1),
        "ratio_to_memory": round(ratio_memory, 3),
        "ratio_to_journal": round(ratio_journal, 3),
        "ratio_to_sqlite": round(waves.rate / sqlite.rate, 3),
        "split_run_s": round(split.seconds, 3),
        "dirs_s": round(split.dirs_s, 3),
        "commits_s": round(split.commits_s, 3),
        "commits": split.commits,
        "commits_ceiling_trials_per_s": round(floor, 1),
        "trials": {
            "dse": dse_trials,
            "optuna_memory": counts.memory,
            "optuna_journal": counts.journal,
            "optuna_sqlite": counts.sqlite,
        },
        "parallelism": PARALLELISM,
        "repeat": max(args.repeat, 1),
        "quick": bool(args.quick),
        "target_trials_per_s": DSE_TARGET_TRIALS_PER_S,
        "target_ratio_to_memory": MEMORY_RATIO_TARGET,
        "rate_target_met": met_rate,
        "ratio_target_met": met_ratio,
        "targets_met": met_rate and met_ratio,
    }
    if postgres is not None:
        summary["postgres"] = postgres.summary()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
