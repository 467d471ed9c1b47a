"""engine_overhead.py --record postgresql://…: dse's engine on a PostgreSQL record, beside
Optuna's RDBStorage on the same server, and several controllers writing one record at once.

Each measurement gets a schema of its own in the database the URL names (created, then
dropped: the role needs CREATE on the database), so dse's tables and Optuna's never meet and
every run starts from an empty record. Run as a program (``--controller``), this module is one
controller of the concurrent measurement: it waits for the start time it is given, runs its
campaign, and prints when it started and ended.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONTROLLERS = 8
TIMED_S = 0.1
"""The duration of each trial in the timed measurement (seconds of the real clock)."""
TIMED_PARALLELISM = 8
"""Each controller's parallelism in the timed measurement: one alone runs at most
``TIMED_PARALLELISM / TIMED_S`` trials/s, and 8 at once keep well under this machine's cores
busy, so what bounds their total is the record, not the CPU."""


@dataclass(frozen=True, slots=True)
class Concurrent:
    """N controllers, each running its own campaign of *trials* on one record at once."""

    controllers: int
    trials: int
    seconds: float
    """From the first controller's start to the last one's end."""
    client_cpu_s: float
    """The controllers' CPU seconds (user and system), summed."""
    server_cpu_s: float | None
    """The PostgreSQL server's CPU seconds meanwhile (``None``: not on this machine)."""

    @property
    def rate(self) -> float:
        return self.controllers * self.trials / self.seconds

    @property
    def cpu_ms_per_trial(self) -> float | None:
        """CPU per trial, controllers and server together (ms)."""
        if self.server_cpu_s is None:
            return None
        return 1000 * (self.client_cpu_s + self.server_cpu_s) / (self.controllers * self.trials)

    @property
    def cores_busy(self) -> float | None:
        """Cores the run kept busy on average."""
        if self.server_cpu_s is None:
            return None
        return (self.client_cpu_s + self.server_cpu_s) / self.seconds


def server_cpu_s() -> float | None:
    """CPU seconds of this machine's ``postgres`` processes so far, those that ended included
    (a connection's backend ends with it: its time is the server's children's), ``None``:
    none here."""
    total, found = 0.0, False
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        if "(postgres)" in text:
            fields = text.rsplit(")", 1)[1].split()
            total += sum(map(int, fields[11:15])) / os.sysconf("SC_CLK_TCK")
            found = True
    return total if found else None


def in_schema(url: str, schema: str) -> str:
    """*url* with *schema* first on the search path (libpq's ``options``)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query)
    query.append(("options", f"-csearch_path={schema}"))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


class Schema:
    """A schema of its own in the database of *url*, dropped on exit."""

    count = 0

    def __init__(self, url: str, label: str) -> None:
        Schema.count += 1
        self.url = url
        self.name = f"bench_{label}_{os.getpid()}_{Schema.count}"

    def __enter__(self) -> str:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as db:
            db.execute(f"CREATE SCHEMA {self.name}")
        return in_schema(self.url, self.name)

    def __exit__(self, *exc: object) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as db:
            db.execute(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")


def timed_script(params: Any) -> Any:
    """A probe trial that runs :data:`TIMED_S` seconds of the real clock."""
    from dse.testing import default_script

    return dataclasses.replace(default_script(params), seconds=TIMED_S)


def run_dse(campaign: Any, url: str, workspace: Path, agent: Any, *, timed: bool = False
            ) -> tuple[float, int, int]:
    """Run *campaign* on the PostgreSQL record *url*: seconds, its run id, and how many of its
    trials the record holds completed (read back by a store of its own). *timed*: each trial
    runs :data:`TIMED_S` seconds, else it ends at the first poll."""
    from dse.engine import Engine
    from dse.record.postgres import PostgresStore
    from dse.testing import ProbeBackend

    start = time.perf_counter()
    store = PostgresStore(url, workspace)
    backend = ProbeBackend(timed_script if timed else None)
    try:
        result = Engine(campaign, agent=agent, backend=backend, store=store).run()
        seconds = time.perf_counter() - start
    finally:
        store.close()
    check = PostgresStore(url, workspace, read_only=True)
    try:
        done = {s.value: n for s, n in check.reads.trial_counts(result.campaign_id).items()}
    finally:
        check.close()
    return seconds, result.campaign_id, int(done.get("completed", 0))


def optuna_postgres(optuna: Any, url: str, trials: int, ask_tell: Any) -> float:
    """Seconds of Optuna's ask/tell loop of *trials* on RDBStorage at *url* (psycopg 3 through
    SQLAlchemy)."""
    parts = urllib.parse.urlsplit(url)
    storage_url = urllib.parse.urlunsplit(parts._replace(scheme="postgresql+psycopg"))
    start = time.perf_counter()
    storage = optuna.storages.RDBStorage(storage_url)
    ask_tell(optuna, storage, trials)
    seconds = time.perf_counter() - start
    storage.engine.dispose()
    return seconds


def concurrent(url: str, controllers: int, trials: int, workdir: Path, *, timed: bool = False
               ) -> Concurrent:
    """*controllers* processes, each a dse campaign of *trials* (names of their own) on one
    PostgreSQL record, started together. *timed*: trials of :data:`TIMED_S` seconds,
    :data:`TIMED_PARALLELISM` at once per controller; else trials that end at once, 64 at
    once."""
    from dse.record.postgres import PostgresStore

    with Schema(url, "many") as record:
        PostgresStore(record, workdir).close()  # the tables, made once before the clock
        begin = time.time() + 3.0  # every process has imported everything by then
        server_before = server_cpu_s()
        procs = [subprocess.Popen(
            [sys.executable, __file__, "--controller", record, f"c{k}", str(trials),
             str(begin), str(workdir / f"c{k}"), "timed" if timed else "instant"],
            stdout=subprocess.PIPE, text=True)
            for k in range(controllers)]
        outs = [json.loads(p.communicate(timeout=3600)[0]) for p in procs]
        server_after = server_cpu_s()
        if any(p.returncode for p in procs) or any(o["completed"] != trials for o in outs):
            raise RuntimeError(f"a controller failed: {outs}")
    server = (None if server_before is None or server_after is None
              else server_after - server_before)
    return Concurrent(controllers, trials,
                      max(o["end"] for o in outs) - min(o["start"] for o in outs),
                      sum(o["cpu_s"] for o in outs), server)


def _controller(argv: list[str]) -> None:
    record, name, trials, begin, workspace, kind = argv
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from engine_overhead import _campaign, _random_agent_class

    timed = kind == "timed"
    campaign = _campaign("rolling" if timed else "waves", int(trials), Path(workspace),
                         name=name, parallelism=TIMED_PARALLELISM if timed else None)
    # A seed of its own: the same proposals would be cache hits of another controller's.
    agent = _random_agent_class()(campaign.space, seed=int(name[1:]))
    import resource

    from dse.engine import Engine  # noqa: F401 - imported before the clock, as the rest

    time.sleep(max(float(begin) - time.time(), 0.0))
    start = time.time()
    before = resource.getrusage(resource.RUSAGE_SELF)
    seconds, _, completed = run_dse(campaign, record, Path(workspace), agent, timed=timed)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(json.dumps({"start": start, "end": start + seconds, "completed": completed,
                      "cpu_s": cpu}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--controller"]:
        _controller(sys.argv[2:])
