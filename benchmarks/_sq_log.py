"""The peers' log of search_quality.py: the peers' finished runs kept in the repository, so a
report over 20 seeds recomputes only dse's side.

The peers (Optuna's samplers, Ax) are deterministic per seed and version, and Ax costs about
40 minutes per seed; so each run of a peer is recorded once (``search_quality.py
--record-peers``) and read back by every later report.

**Where**: :data:`PEER_LOG_DIR` (``benchmarks/peers/search_quality/``), one JSON-lines file
per peer and version of its main package, ``<peer>@<package>-<version>.jsonl`` (for example
``optuna-gp@optuna-5.1.0.jsonl``, ``ax-botorch@ax-platform-1.3.1.jsonl``). One line per run,
appended and flushed as the run ends: a recording cut short keeps what it finished, and the
next one runs only what is missing.

**An entry** (:class:`PeerEntry`): ``peer``, ``function``, ``setting`` (``P=1``, ``P=4
waves``, ``P=4 rolling``), ``seed``, ``budget``; the scores the report uses: ``regret``,
``found`` (noisy functions only; elsewhere it equals the regret), ``trials``, ``failed``,
``repeats``, ``exact_repeats``, ``edge`` (functions with failures only); the run's
``seconds`` and its asks' mean seconds and counts (``batch_ask_s``/``batch_asks``,
``single_ask_s``/``single_asks``); ``version``, the peer's packages as installed
(``optuna==5.1.0``, ``optuna==5.1.0 torch==2.13.0+cpu`` for GPSampler); and two digests:

- ``problem``: of the function's definition as it behaves (:func:`problem_digest`): its space,
  f*, noise, worst value, and f, the constraint, the edge distance and the evaluator's
  durations and noise at seeded points; a changed function gets a new digest, a changed
  docstring does not.
- ``peer_digest``: of the peer's settings at that parallelism (the Optuna sampler and its
  options; Ax's client and default generation strategy) and of the code that builds and
  drives it, docstrings left out (:func:`peer_digest`).

An entry whose digests are not today's is *stale*: never read, and dropped from its file by
the next ``--record-peers``. Entries of another version are kept (a cell then reads only the
version in use: the installed one, or, for a peer not installed, the one the log holds most
of) and named in one line of the report.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.metadata
import inspect
import json
import random
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import _sq_peers
from _bench import SETTINGS, Task, run_tasks
from _sq_peers import AX_METHOD, sampler_settings
from _sq_problems import PROBLEMS, Evaluator, random_point
from _sq_runs import RunResult, init_worker, run_task

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

PEER_LOG_DIR = Path(__file__).resolve().parent / "peers" / "search_quality"
RECORD_SEEDS = 20
"""Seeds ``--record-peers`` records by default (issue 44: every change judged on 20)."""
PEER_PACKAGES: dict[str, tuple[str, ...]] = {
    "optuna GP": ("optuna", "torch"),
    "optuna TPE": ("optuna",),
    "optuna TPE indep": ("optuna",),
    "optuna random": ("optuna",),
    AX_METHOD: ("ax-platform", "botorch", "torch"),
}
"""The packages whose versions decide a peer's runs; the first names its file."""
PEER_CODE: dict[str, tuple[str, ...]] = {
    "optuna": ("_suggest", "sampler_settings", "OptunaPeer", "drive", "run_peer"),
    "ax": ("_ax_parameters", "AxPeer", "drive", "run_peer"),
}
"""The functions and classes of ``_sq_peers.py`` that build and drive each kind of peer."""
_FINGERPRINT_POINTS = 32
_DIGITS = 9
"""Significant digits of the values digested (the last bits of libm may differ)."""


def _significant(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else float(f"{value:.{digits}g}")


# -- identity ------------------------------------------------------------------------------


@functools.cache
def problem_digest(key: str) -> str:
    """A digest of the function *key* as it behaves: its space, f*, noise, worst value, and
    at :data:`_FINGERPRINT_POINTS` seeded points f, feasibility, the edge distance and seed 0's
    evaluator (the virtual durations and the noise)."""
    problem = PROBLEMS[key]
    rng = random.Random(f"peer-log:{key}")
    evaluate = Evaluator(problem, 0)
    values = []
    for _ in range(_FINGERPRINT_POINTS):
        point = random_point(problem.space, rng)
        outcome = evaluate(point)
        edge = problem.edge(point) if problem.edge is not None else None
        values.append([
            _significant(problem.f(point), _DIGITS), problem.feasible(point),
            _significant(edge, _DIGITS), _significant(outcome.observed, _DIGITS),
            _significant(outcome.seconds, _DIGITS),
        ])
    identity = {
        "space": problem.space, "optimum": problem.optimum, "noise_sd": problem.noise_sd,
        "worst": problem.worst, "values": values,
    }
    return _hash(identity)


def _code(names: Iterable[str]) -> str:
    """The source of *names* in ``_sq_peers.py`` as an AST without docstrings."""
    parts = []
    for name in names:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(_sq_peers, name))))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
        parts.append(ast.dump(tree))
    return "\n".join(parts)


@functools.cache
def peer_digest(method: str, parallel: int) -> str:
    """A digest of *method*'s settings at *parallel* and of the code that builds and drives
    it (:data:`PEER_CODE`, docstrings left out)."""
    if method == AX_METHOD:
        settings: dict[str, Any] = {"client": "ax.api.client.Client(random_seed=seed)",
                                    "generation_strategy": "default", "objective": "-value"}
        code = _code(PEER_CODE["ax"])
    else:
        name, options = sampler_settings(method, parallel)
        settings = {"sampler": name, "options": options, "seed": "seed"}
        code = _code(PEER_CODE["optuna"])
    return _hash({"method": method, "settings": settings, "code": code})


def _hash(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@functools.cache
def installed_version(method: str) -> str | None:
    """``name==version`` of *method*'s packages (:data:`PEER_PACKAGES`), or ``None`` when one
    is not installed."""
    try:
        return " ".join(f"{name}=={importlib.metadata.version(name)}"
                        for name in PEER_PACKAGES[method])
    except importlib.metadata.PackageNotFoundError:
        return None


def log_file(method: str, version: str) -> Path:
    """The file of *method*'s entries of *version*: ``<peer>@<package>-<version>.jsonl``."""
    package, _, number = version.split()[0].partition("==")
    return PEER_LOG_DIR / f"{method.lower().replace(' ', '-')}@{package}-{number}.jsonl"


# -- entries -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerEntry:
    """One recorded run of a peer (the module docstring lists the fields; a line leaves
    out ``found`` where it equals the regret, ``edge`` where there is none and the asks of a kind
    the run made none of)."""

    peer: str
    function: str
    setting: str
    seed: int
    budget: int
    regret: float
    found: float
    trials: int
    failed: int
    repeats: int
    exact_repeats: int
    edge: float | None
    seconds: float
    batch_ask_s: float | None
    batch_asks: int
    single_ask_s: float | None
    single_asks: int
    version: str
    problem: str
    """:func:`problem_digest` of the function when the run was made."""
    peer_digest: str
    """:func:`peer_digest` of the peer at the setting's parallelism when the run was made."""

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        """The key of the task it is a run of (``Task.key``)."""
        return (self.peer, self.function, self.setting, self.budget, self.seed)

    def is_current(self) -> bool:
        """Whether the function and the peer are still what they were when it was recorded."""
        return (self.function in PROBLEMS and self.setting in SETTINGS
                and self.problem == problem_digest(self.function)
                and self.peer_digest == peer_digest(
                    self.peer, SETTINGS[self.setting].parallelism))

    @classmethod
    def of(cls, result: RunResult, version: str) -> PeerEntry:
        """The entry of a peer's run *result*, made with *version* installed."""
        task, problem = result.task, PROBLEMS[result.task.problem]
        batch, single = result.batch_ask_s, result.single_ask_s
        return cls(
            peer=task.method, function=task.problem, setting=task.setting, seed=task.seed,
            budget=task.budget, regret=_significant(result.regret) or 0.0,
            found=_significant(result.found) or 0.0, trials=result.trials,
            failed=result.failed, repeats=result.repeats, exact_repeats=result.exact_repeats,
            edge=_significant(result.edge, 4), seconds=round(result.seconds, 2),
            batch_ask_s=_significant(sum(batch) / len(batch), 4) if batch else None,
            batch_asks=len(batch),
            single_ask_s=_significant(sum(single) / len(single), 4) if single else None,
            single_asks=len(single), version=version, problem=problem_digest(problem.key),
            peer_digest=peer_digest(task.method, SETTINGS[task.setting].parallelism),
        )

    def result(self) -> RunResult:
        """The run as the report reads it; each ask's seconds is the mean of its kind (so the
        report's means over asks are the recorded ones)."""
        return RunResult(
            task=Task(self.peer, self.function, self.setting, self.budget, self.seed),
            regret=self.regret, found=self.found, trials=self.trials, failed=self.failed,
            repeats=self.repeats, exact_repeats=self.exact_repeats, seconds=self.seconds,
            edge=self.edge, batch_ask_s=(self.batch_ask_s or 0.0,) * self.batch_asks,
            single_ask_s=(self.single_ask_s or 0.0,) * self.single_asks,
        )

    def to_json(self) -> dict[str, Any]:
        """The entry's line: ``found`` left out where it equals the regret (no noise),
        ``edge`` where the function has no failures."""
        data = dataclasses.asdict(self)
        if self.found == self.regret:
            del data["found"]
        if self.edge is None:
            del data["edge"]
        for kind in ("batch", "single"):
            if not data[f"{kind}_asks"]:
                del data[f"{kind}_asks"], data[f"{kind}_ask_s"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PeerEntry:
        """The entry of a line :meth:`to_json` wrote."""
        absent = {"found": data["regret"], "edge": None, "batch_ask_s": None, "batch_asks": 0,
                  "single_ask_s": None, "single_asks": 0}
        return cls(**{**absent, **data})


# -- the log -------------------------------------------------------------------------------


class PeerLog:
    """The entries of :data:`PEER_LOG_DIR`: read once, looked up per task in the version in
    use per peer, appended to as runs are recorded."""

    def __init__(self, directory: Path = PEER_LOG_DIR) -> None:
        self.directory = directory
        self.entries: dict[tuple[tuple[str, str, str, int, int], str], PeerEntry] = {}
        """Current entries by (task key, version); a later line replaces an earlier one."""
        self.stale: Counter[str] = Counter()
        """Entries per file whose digests are not today's."""
        for path in sorted(directory.glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = PeerEntry.from_json(json.loads(line))
                except (ValueError, TypeError):
                    continue  # the line being written when a recording was interrupted
                if entry.is_current():
                    self.entries[entry.key, entry.version] = entry
                else:
                    self.stale[path.name] += 1

    def versions(self, method: str) -> Counter[str]:
        """The versions of *method* the log holds, with their entries."""
        return Counter(v for (key, v) in self.entries if key[0] == method)

    def version(self, method: str) -> str | None:
        """The version of *method* a report reads: the installed one, or, when the peer is
        not installed, the one the log holds most entries of."""
        logged = self.versions(method)
        return installed_version(method) or (logged.most_common(1)[0][0] if logged else None)

    def get(self, task: Task) -> PeerEntry | None:
        """The entry of *task* in the version in use, if recorded."""
        version = self.version(task.method)
        return None if version is None else self.entries.get((task.key, version))

    def add(self, result: RunResult) -> PeerEntry:
        """Append the peer's run *result* (made with the installed version) to its file."""
        version = installed_version(result.task.method)
        assert version is not None  # the run was made, so the peer is installed
        entry = PeerEntry.of(result, version)
        path = log_file(entry.peer, version)
        path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry.to_json(), separators=(",", ":")) + "\n"
        with path.open("a+", encoding="utf-8") as file:
            end = file.tell()
            if end:
                file.seek(end - 1)
                # A line cut short by an interrupted recording is ended, not continued.
                if file.read(1) != "\n":
                    line = "\n" + line
            file.write(line)
        self.entries[entry.key, version] = entry
        return entry

    def prune(self) -> int:
        """Drop the stale entries from their files; the number dropped."""
        dropped = 0
        for name in list(self.stale):
            path = self.directory / name
            kept = [line for line in path.read_text(encoding="utf-8").splitlines()
                    if _current_line(line)]
            path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
            dropped += self.stale.pop(name)
        return dropped

    def notes(self, methods: Iterable[str]) -> list[str]:
        """One line per peer whose log holds entries of a version other than the one in use,
        and one for the stale entries, if any."""
        out = []
        for method in methods:
            used, others = self.version(method), self.versions(method)
            other = {v: n for v, n in others.items() if v != used}
            if other:
                held = ", ".join(f"{n} of {v}" for v, n in sorted(other.items()))
                out.append(f"peer log: {method} installed as {used or 'nothing'}; the log's"
                           f" entries of another version are not used ({held})")
        if self.stale:
            out.append(f"peer log: {sum(self.stale.values())} stale entries (function or peer"
                       " changed since recorded) are not used; --record-peers drops them")
        return out


def _current_line(line: str) -> bool:
    try:
        return PeerEntry.from_json(json.loads(line)).is_current()
    except (ValueError, TypeError):
        return False


# -- what search_quality.py does with it ---------------------------------------------------


def fill(tasks: list[Task], peer_log: PeerLog, done: dict[Any, RunResult],
         add: Callable[[RunResult], None], only: bool) -> tuple[list[Task], set[Any]]:
    """Take the peers' runs of *tasks* from *peer_log*: each one not in *done* (the run's own
    log) and recorded is put there and passed to *add*; with *only*, the peers' tasks not
    recorded are left out. Returns the tasks to report and the keys taken from the log."""
    kept, taken = [], set()
    for task in tasks:
        if task.method not in PEER_PACKAGES or task.key in done:
            kept.append(task)
            continue
        entry = peer_log.get(task)
        if entry is not None:
            result = entry.result()
            done[task.key] = result
            add(result)
            taken.add(task.key)
        elif only:
            continue
        kept.append(task)
    return kept, taken


def sources(
    tasks: list[Task], kept: list[Task], taken: set[Any], peer_log: PeerLog
) -> tuple[list[str], dict[str, Any]]:
    """Lines saying where each peer's runs of *tasks* come from (*kept*: those reported,
    *taken*: the keys read from *peer_log*), and the same as JSON."""
    lines, data = [], {}
    reported = {t.key for t in kept}
    for method in PEER_PACKAGES:
        mine = [t for t in tasks if t.method == method]
        if not mine:
            continue
        logged = sum(t.key in taken for t in mine)
        run = sum(t.key in reported and t.key not in taken for t in mine)
        version = peer_log.version(method)
        data[method] = {"version": version, "from_log": logged, "run": run,
                        "left_out": len(mine) - logged - run}
        where = "" if version is None else (
            f" {log_file(method, version).relative_to(PEER_LOG_DIR.parents[2])} ({version})")
        lines.append(f"peer log: {method}: {logged} of {len(mine)} runs from{where or ' -'},"
                     f" {run} run now" + (f", {len(mine) - logged - run} not in the log (left"
                                         " out)" if len(mine) - logged - run else ""))
    return lines + peer_log.notes(data), data


def record_tasks(methods: Iterable[str], functions: Iterable[str], settings: Iterable[str],
                 seeds: int, budget: int | None, ax_p1: bool) -> list[Task]:
    """The peers' tasks ``--record-peers`` would record: seeds ``0 .. seeds - 1``, each
    function at its full budget (or *budget*), Ax at P=1 only with *ax_p1*."""
    return [
        Task(method, key, label, budget or PROBLEMS[key].budget, seed)
        for method in methods for key in functions for label in settings
        if not (method == AX_METHOD and label == "P=1" and not ax_p1)
        for seed in range(seeds)
    ]


def record(
    tasks: list[Task], jobs: int, order: Callable[[Task], Any],
    estimate: Callable[[Task], float] | None = None,
) -> int:
    """Run the peers' *tasks* the log lacks (in *order*), each appended to its file as it
    ends; progress to stderr, and at the end each peer's seconds per seed. With *estimate*
    (a run's estimated seconds), only say how many runs the log lacks and how long they
    would take, changing nothing."""
    peer_log = PeerLog()
    if estimate is not None:
        lacking = [t for t in tasks if peer_log.get(t) is None]
        hours = sum(estimate(t) for t in lacking) / max(jobs, 1) / 3600
        print(f"{len(lacking)} peer runs to record ({len(tasks) - len(lacking)} already in the"
              f" log): about {hours:.1f} h on {jobs} worker(s)")
        return 0
    dropped = peer_log.prune()
    if dropped:
        print(f"peer log: dropped {dropped} stale entries", file=sys.stderr)
    for line in peer_log.notes({t.method for t in tasks}):
        print(line, file=sys.stderr)
    todo = sorted((t for t in tasks if peer_log.get(t) is None), key=order)
    missing = sorted({t.method for t in todo if installed_version(t.method) is None})
    if missing:
        print(f"search_quality: error: not installed, cannot record: {', '.join(missing)}"
              f" (needs {', '.join(p for m in missing for p in PEER_PACKAGES[m])})",
              file=sys.stderr)
        return 1
    print(f"recording {len(todo)} peer runs ({len(tasks) - len(todo)} already in the log)"
          f" on {jobs} worker(s) into {PEER_LOG_DIR}", file=sys.stderr, flush=True)
    spent: dict[str, dict[int, float]] = {}
    remaining = list(range(len(todo)))
    started = time.perf_counter()

    def finished(result: RunResult) -> None:
        peer_log.add(result)
        task = result.task
        cell = spent.setdefault(task.method, {})
        cell[task.seed] = cell.get(task.seed, 0.0) + result.seconds
        print(f"  {len(todo) - remaining.pop()}/{len(todo)} {task.method} {task.problem}"
              f" {task.setting} seed {task.seed}: {result.seconds:.1f} s"
              f" (total {time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)

    gp = any(t.method == "optuna GP" for t in todo)
    ax = any(t.method == AX_METHOD for t in todo)
    run_tasks(todo, run_task, finished, jobs, init_worker, (gp, ax))
    for method, seconds in spent.items():
        per_seed = sum(seconds.values()) / len(seconds)
        print(f"{method}: {per_seed:.0f} s per seed (the runs recorded now, all their"
              f" functions and settings)")
    return 0
