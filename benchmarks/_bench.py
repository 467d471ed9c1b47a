"""What search_quality.py and multi_objective.py share: the task (a method on a problem in a
setting with a seed), a dse campaign run through the real engine on the probe backend in
virtual time, the log of finished runs kept per side's code digest, the processes that run the
tasks, and the helpers of their arguments and reports.

It is dse's side of those benchmarks (in their ``"dse"`` code digests, never the peers'): the
peers' runs, which take hours, do not depend on it."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar

from _peers import BenchmarkError, plugins

import dse
from dse.testing import FakeClock, ProbeBackend

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from dse.testing import ProbeScript

Mode = Literal["waves", "rolling"]

WORK_DIR = Path(__file__).resolve().parent / ".work"
# Longer than any trial: the probe's wait then jumps the fake clock straight to the next end,
# so each polling pass sees exactly the trials that ended (an event simulation, like the
# peers').
POLL_INTERVAL_S = 1e6
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True, slots=True)
class Setting:
    parallelism: int
    mode: Mode

    @property
    def label(self) -> str:
        return "P=1" if self.parallelism == 1 else f"P={self.parallelism} {self.mode}"


SETTINGS = {s.label: s for s in (Setting(1, "waves"), Setting(4, "waves"), Setting(4, "rolling"))}


@dataclass(frozen=True, slots=True)
class Task:
    method: str
    problem: str
    setting: str
    """A key of :data:`SETTINGS`."""
    budget: int
    seed: int

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        return (self.method, self.problem, self.setting, self.budget, self.seed)


class Run(Protocol):
    """A finished run of a task, as a log keeps it."""

    @property
    def task(self) -> Task: ...

    def to_json(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=Run)
L = TypeVar("L", bound="ResumableLog[Any]")


# -- dse -----------------------------------------------------------------------------------


def campaign_table(task: Task, agent: str) -> dict[str, Any]:
    """The ``[campaign]`` table of *task*'s campaign with *agent*."""
    setting = SETTINGS[task.setting]
    return {
        "name": f"{task.problem}-{agent}",
        "agent": agent,
        "mode": setting.mode,
        "max_parallelism": setting.parallelism,
        "max_trials": task.budget,
        "seed": task.seed,
        "poll_interval": POLL_INTERVAL_S,
    }


def describe(task: Task, agent: str) -> str:
    return f"dse {agent} on {task.problem} ({task.setting}, seed {task.seed})"


def run_campaign(
    task: Task,
    agent: str,
    campaign: Callable[[Path], dse.Campaign],
    script: Callable[[Mapping[str, Any]], ProbeScript],
    prefix: str,
) -> list[Any]:
    """One campaign (``campaign(workspace)``) through dse's engine on the probe backend
    (*script* answers each trial's params) with a fake clock, in a fresh workspace under
    :data:`WORK_DIR` (named from *prefix*); its trials as recorded. Raises
    :class:`BenchmarkError` unless it completed with the task's budget of trials."""
    WORK_DIR.mkdir(exist_ok=True)  # a fresh checkout has none (it is not in git)
    with tempfile.TemporaryDirectory(prefix=f"{prefix}-{task.problem}-", dir=WORK_DIR) as tmp:
        workspace = Path(tmp)
        clock = FakeClock()
        store = dse.Store(workspace / "dse.sqlite")
        try:
            engine = dse.build_engine(
                campaign(workspace),
                store=store,
                plugins=plugins(),
                clock=clock,
                backend=ProbeBackend(script, clock=clock),
            )
            result = engine.run()
            rows = store.reads.trials(result.campaign_id)
        finally:
            store.close()
    what = describe(task, agent)
    if result.status != "completed":
        raise BenchmarkError(f"{what}: ended {result.status} ({result.end_reason})")
    if len(rows) != task.budget:
        raise BenchmarkError(
            f"{what}: {len(rows)} trials recorded, expected {task.budget}"
            f" ({result.end_reason})"
        )
    return rows


# -- the log of finished runs --------------------------------------------------------------


def digest(files: Iterable[Path], extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def dse_sources() -> list[Path]:
    """The sources of dse and dse_agents, as imported."""
    import dse_agents

    sources: list[Path] = []
    for root in (Path(dse.__file__).resolve().parent, Path(dse_agents.__file__).resolve().parent):
        sources += sorted(root.rglob("*.py"))
    return sources


def versions(packages: Iterable[str]) -> str:
    """``name==version`` of each package installed (``name absent`` if not), space-separated."""
    found = []
    for name in packages:
        try:
            found.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} absent")
    return " ".join(found)


def side(method: str) -> str:
    """Which of a benchmark's code digests a method's runs depend on."""
    return "dse" if method.startswith("dse ") else "peers"


class ResumableLog(Generic[R]):
    """A JSON-lines file: a header (a benchmark's code digests per side, ``{"code": {"dse": ...,
    "peers": ...}}``), then one line per finished run, flushed as it ends.

    Resumed, the log keeps each run whose side's digest (:func:`side`) is today's (whatever
    tasks it was written for: runs are keyed by task) and rewrites itself without the others,
    which are run again: after a change to dse, its runs are redone and the peers' kept.

    A subclass names its benchmark (the script, which names its logs) and how a run is read
    back from what its ``to_json()`` wrote: ``class RunLog(ResumableLog[RunResult],
    benchmark="search_quality", load=RunResult.from_json)``."""

    benchmark: ClassVar[str]
    _load: ClassVar[Callable[[dict[str, Any]], Any]]

    def __init_subclass__(
        cls, *, benchmark: str, load: Callable[[dict[str, Any]], Run], **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls.benchmark = benchmark
        cls._load = load

    def __init__(self, path: Path, header: dict[str, Any], resume: bool) -> None:
        self.path = path
        self.done: dict[tuple[str, str, str, int, int], R] = {}
        self.dropped = 0
        if resume:
            theirs = self._digests(path)
            for result in self.results(path):
                part = side(result.task.method)
                if theirs.get(part) == header["code"][part]:
                    self.done[result.task.key] = result
                else:
                    self.dropped += 1
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = list(self.done.values())
        self._file = path.open("w", encoding="utf-8")
        self._write({"header": header})
        for result in kept:
            self.add(result)

    @classmethod
    def _digests(cls, path: Path) -> dict[str, Any]:
        try:
            first = path.read_text(encoding="utf-8").partition("\n")[0]
        except OSError as exc:
            raise BenchmarkError(f"cannot read {path}: {exc}") from None
        try:
            code = json.loads(first)["header"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
        if not isinstance(code, dict):
            raise BenchmarkError(
                f"{path} is not a {cls.benchmark} log with per-side code digests; not resumed"
            )
        return code

    @classmethod
    def results(cls, path: Path) -> list[R]:
        """The runs in the log at *path* (whatever its header)."""
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise BenchmarkError(f"cannot read {path}: {exc}") from None
        out = []
        for line in lines[1:]:
            try:
                out.append(cls._load(json.loads(line)["run"]))
            except (ValueError, KeyError, TypeError):
                continue  # the line being written when the run was interrupted
        return out

    def _write(self, data: dict[str, Any]) -> None:
        self._file.write(json.dumps(data) + "\n")
        self._file.flush()

    def add(self, result: R) -> None:
        self._write({"run": result.to_json()})

    def close(self) -> None:
        self._file.close()


def open_log(log: type[L], resume: Path | None, header: dict[str, Any]) -> L:
    """The log to resume (*resume*) or a new one under :data:`WORK_DIR` named for the
    benchmark and the time; says how many runs it dropped (see :class:`ResumableLog`)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    opened = log(resume or WORK_DIR / f"{log.benchmark}-{stamp}.jsonl", header,
                 resume=resume is not None)
    if opened.dropped:
        print(f"{opened.dropped} runs of {opened.path} were made by other code: run again",
              file=sys.stderr)
    return opened


def read_logs(
    paths: Iterable[Path], log: type[ResumableLog[R]], *,
    problems: Iterable[str] | None = None, settings: Iterable[str] | None = None,
) -> list[R]:
    """The runs in the logs at *paths* (a run in several counts once, from the last) of
    *problems* and *settings* (default: all), over the seeds every method and setting of a
    problem has: a log cut short (or logs made apart) may hold more seeds of one method than
    of another, and medians over different seeds are not a comparison. (Choosing the settings
    keeps a cell's extra seeds, run apart with ``--first-seed``, from being cut to those of
    the settings it has no extra seeds for.)"""
    keep_problems = None if problems is None else set(problems)
    keep_settings = None if settings is None else set(settings)
    by_task: dict[tuple[str, str, str, int, int], R] = {}
    for path in paths:
        by_task.update((r.task.key, r) for r in log.results(path)
                       if (keep_problems is None or r.task.problem in keep_problems)
                       and (keep_settings is None or r.task.setting in keep_settings))
    seeds: dict[str, dict[tuple[str, str], set[int]]] = {}
    for r in by_task.values():
        cells = seeds.setdefault(r.task.problem, {})
        cells.setdefault((r.task.method, r.task.setting), set()).add(r.task.seed)
    common = {key: set.intersection(*cells.values()) for key, cells in seeds.items()}
    return [r for r in by_task.values() if r.task.seed in common[r.task.problem]]


def present(
    results: Iterable[Run], methods: Iterable[str], problems: Iterable[str]
) -> tuple[list[str], list[str], list[str]]:
    """The methods, problems and settings (each in the order given) that *results* have."""
    cells = {(r.task.method, r.task.problem, r.task.setting) for r in results}
    return (
        [m for m in methods if any(c[0] == m for c in cells)],
        [k for k in problems if any(c[1] == k for c in cells)],
        [s for s in SETTINGS if any(c[2] == s for c in cells)],
    )


# -- running -------------------------------------------------------------------------------


def prepare_process() -> None:
    """One BLAS/OpenMP thread per process unless set (before numpy or torch is imported:
    plugins import numpy; inherited by the workers), and a SIGTERM that ends the run as a
    Ctrl+C does (the workers are stopped, the log kept)."""
    for var in THREAD_VARS:
        os.environ.setdefault(var, "1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def require_torch() -> None:
    """Fail before the runs when Optuna's GPSampler cannot run."""
    try:
        import torch  # noqa: F401  (GPSampler needs it)
    except ImportError:
        raise BenchmarkError(
            "GPSampler needs torch: `.venv/bin/pip install torch==2.13.0` (or --no-gp)"
        ) from None


def announce(
    log: ResumableLog[Any], tasks: Sequence[Task], methods: Sequence[str], jobs: int,
    note: str = "",
) -> None:
    """Say on stderr what will run (*note*, before the log's name: more on the runs)."""
    todo = sum(t.key not in log.done for t in tasks)
    print(
        f"running {todo} runs ({len(tasks) - todo} already in the log) of {', '.join(methods)}"
        f" on {jobs} worker(s); {note}log {log.path} (--report LOG prints the runs so far)",
        file=sys.stderr, flush=True,
    )


def run_tasks(
    todo: Sequence[Task],
    run_task: Callable[[Task], R],
    finished: Callable[[R], None],
    jobs: int,
    init_worker: Callable[..., None],
    initargs: tuple[Any, ...],
) -> None:
    """``run_task`` of each task of *todo*, in that order, each result passed to *finished*
    as it ends: in this process if *jobs* <= 1, else on *jobs* spawned processes; each
    process first calls ``init_worker(*initargs)``. Interrupted or failed, the workers' runs
    are stopped at once."""
    if jobs <= 1:
        init_worker(*initargs)
        for task in todo:
            finished(run_task(task))
        return
    import multiprocessing

    # spawn: torch and SQLite connections do not survive a fork well.
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=init_worker,
                               initargs=initargs)
    try:
        pending: set[Future[R]] = {pool.submit(run_task, t) for t in todo}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                finished(future.result())
    except BaseException:
        # Interrupted (Ctrl+C, SIGTERM) or failed: stop the workers' runs now, not after them.
        pool.shutdown(wait=False, cancel_futures=True)
        for child in multiprocessing.active_children():
            child.terminate()
        raise
    pool.shutdown()


def run_all(
    tasks: list[Task],
    log: ResumableLog[R],
    jobs: int,
    run_task: Callable[[Task], R],
    init_worker: Callable[..., None],
    initargs: tuple[Any, ...],
    order: Callable[[Task], Any] = lambda task: task.seed,
) -> list[R]:
    """Every task not already in *log*, each appended to it as it ends (:func:`run_tasks`),
    sorted by *order*: seed by seed by default, so a run cut short has whole seeds of every
    cell. The results of all *tasks*; progress to stderr."""
    results = [log.done[t.key] for t in tasks if t.key in log.done]
    todo = sorted((t for t in tasks if t.key not in log.done), key=order)
    started = time.perf_counter()
    total = len(todo)

    def finished(result: R) -> None:
        log.add(result)
        results.append(result)
        n = len(results) - (len(tasks) - total)
        if n % max(total // 20, 1) == 0 or n == total:
            print(f"  {n}/{total} runs, {time.perf_counter() - started:.0f} s", file=sys.stderr,
                  flush=True)

    run_tasks(todo, run_task, finished, jobs, init_worker, initargs)
    return results


# -- arguments -----------------------------------------------------------------------------


def add_choices(parser: argparse.ArgumentParser, methods: Sequence[str]) -> None:
    """``--methods`` (of *methods*) and ``--settings``."""
    parser.add_argument(
        "--methods", nargs="+", choices=methods, default=list(methods),
        help="methods to run (default: all)",
    )
    parser.add_argument(
        "--settings", nargs="+", choices=list(SETTINGS), help="settings to run (default: all)"
    )


def add_logs(parser: argparse.ArgumentParser, report: str) -> None:
    """``--resume LOG`` and ``--report LOG [LOG ...]`` (*report*: its help)."""
    parser.add_argument(
        "--resume", type=Path, metavar="LOG", help="skip the runs in LOG and append to it"
    )
    parser.add_argument("--report", type=Path, nargs="+", metavar="LOG", help=report)


def choose_methods(
    args: argparse.Namespace, methods: Sequence[str], optional: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The *methods* to run, and why each other one is left out: dse bayesian when not
    installed, those of *optional* (method -> the flag that leaves it out) with ``--quick`` or
    their flag, and those not in ``--methods``."""
    skipped: dict[str, str] = {}
    if "bayesian" not in plugins().agents:
        skipped["dse bayesian"] = "not installed"
    for method, flag in optional.items():
        if args.quick or getattr(args, flag.removeprefix("--").replace("-", "_")):
            skipped[method] = "skipped (--quick)" if args.quick else f"skipped ({flag})"
    for method in methods:
        if method not in args.methods:
            skipped.setdefault(method, "skipped (--methods)")
    return [m for m in methods if m not in skipped], skipped


# -- report --------------------------------------------------------------------------------


def quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def significant(value: float | None) -> float | None:
    """*value* to 6 significant digits (for the JSON summary)."""
    return None if value is None else float(f"{value:.6g}")


def seeds_and_budgets(
    results: Sequence[Run], problems: Iterable[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """Per problem, how many seeds *results* have and their largest budget."""
    seeds, budgets = {}, {}
    for k in problems:
        seeds[k] = len({r.task.seed for r in results if r.task.problem == k})
        budgets[k] = max((r.task.budget for r in results if r.task.problem == k), default=0)
    return seeds, budgets


def run_head(optuna: Any, wall: float) -> str:
    """What a report's first line says of the run that made it."""
    return (f"optuna {optuna.__version__}, threads {os.environ.get('OMP_NUM_THREADS')},"
            f" load {os.getloadavg()[0]:.1f}, {wall:.0f} s")


def run_fields(
    args: argparse.Namespace, skipped: dict[str, str], optuna: Any, path: Path, wall: float
) -> dict[str, Any]:
    """The run's parameters in the last line's JSON."""
    return {
        "skipped": skipped,
        "quick": bool(args.quick),
        "optuna_version": optuna.__version__,
        "log": str(path),
        "wall_s": round(wall, 1),
    }
