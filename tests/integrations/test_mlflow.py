"""The MLflow integration against the real mlflow-skinny: what a trial's run holds, read back
with ``MlflowClient``; and exactly once — a writer cut between any two MLflow calls, or killed
by SIGKILL in a real process, leaves each trial in MLflow once after the next ``open``.

Most tests use MLflow's file store (``MLFLOW_ALLOW_FILE_STORE``); one uses a SQLite database,
where the integration takes the path a tracking server takes (filtered searches)."""

from __future__ import annotations

import collections
import importlib.util
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dse.integrations._mlflow import PARENT, WRITTEN, MlflowIntegration
from dse.model._errors import ConfigError
from dse.plugins._integration import CampaignExport, TrialExport, export_key

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator

tracking = pytest.importorskip("mlflow.tracking")

RUN_CREATED = 1_780_000_000.0
"""When run 1 of the campaign was recorded (part of every key)."""
CALLS = ("create_run", "log_batch", "set_terminated", "set_tag", "delete_run", "update_run",
         "search_runs", "get_experiment_by_name", "create_experiment")
"""The MlflowClient methods the integration calls."""


# -- values ---------------------------------------------------------------------------------


def campaign(name: str = "cnn", record: str = "/ws/.dse/record.db") -> CampaignExport:
    return CampaignExport(name=name, workspace=Path("/ws"), record=record,
                          params=(("lr", "float", (1e-4, 1.0)),),
                          objectives=(("acc", "maximize"),))


def trial(number: int, *, name: str = "cnn", run: int = 1, run_created: float = RUN_CREATED,
          status: str = "completed", params: dict[str, Any] | None = None,
          curve: tuple[tuple[int, dict[str, float], float], ...] | None = None,
          metrics: dict[str, float] | None = None, score: float | None = 0.5,
          message: str | None = "exit 0", failure: str | None = None,
          cache_of: str | None = None) -> TrialExport:
    created = run_created + 10 * number
    if curve is None:
        curve = tuple((s, {"loss": 1.0 / s}, created + s) for s in (1, 2, 3))
    return TrialExport(
        key=export_key(name, run, run_created, number), name=f"{name}-{run}-{number}",
        campaign=name, run=run, number=number, config_hash=f"h{number:03d}",
        params=params if params is not None else {"lr": 0.01 * number, "opt": "adam"},
        status=status, failure=failure, message=message,
        metrics=metrics if metrics is not None else {"loss": 1.0 / 3, "acc": 0.5},
        score=score, curve=curve, created_at=created, ended_at=created + 5,
        data_version="v1", cache_of=cache_of)


def wide_trials() -> list[TrialExport]:
    """Five trials of 120 params each: two ``log_batch`` calls a trial."""
    return [trial(n, params={f"p{i:03d}": i * n for i in range(120)}) for n in range(5)]


# -- reading MLflow back --------------------------------------------------------------------


def client(uri: str) -> Any:
    return tracking.MlflowClient(tracking_uri=uri)


def runs(uri: str, experiment: str = "cnn") -> list[Any]:
    """Every active run of *experiment*."""
    c = client(uri)
    found = c.get_experiment_by_name(experiment)
    return [] if found is None else list(c.search_runs([found.experiment_id], max_results=5000))


def by_key(uri: str, experiment: str = "cnn") -> collections.Counter[str]:
    """How many active runs carry each ``dse.key``, whole or not."""
    return collections.Counter(
        r.data.tags["dse.key"] for r in runs(uri, experiment) if "dse.key" in r.data.tags)


def unmarked(uri: str, experiment: str = "cnn") -> list[Any]:
    """The trials' runs without the mark."""
    return [r for r in runs(uri, experiment) if "dse.key" in r.data.tags
            and r.data.tags.get(WRITTEN) != "1"]


def parents(uri: str, experiment: str = "cnn") -> list[Any]:
    """The campaign's runs (a trial's is nested under one)."""
    return [r for r in runs(uri, experiment)
            if "dse.campaign" in r.data.tags and "dse.key" not in r.data.tags]


def nesting(uri: str) -> dict[str, str]:
    """The parent of each trial's run, by key."""
    return {r.data.tags["dse.key"]: r.data.tags[PARENT] for r in runs(uri)
            if "dse.key" in r.data.tags}


def history(uri: str, run_id: str, key: str) -> list[tuple[int, float, int]]:
    return sorted((m.step, m.value, m.timestamp)
                  for m in client(uri).get_metric_history(run_id, key))


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll *check* until it holds (at most *timeout* seconds)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def write_all(uri: str, trials: list[TrialExport], which: CampaignExport | None = None,
              **options: Any) -> set[str]:
    """Open, write what is not held, close: the keys held at open."""
    integration = MlflowIntegration(tracking_uri=uri, **options)
    held = set(integration.open(which or campaign()))
    for t in trials:
        if t.key not in held:
            integration.write(t)
    integration.close()
    return held


class Killed(BaseException):
    """A kill between two MLflow calls: no ``except Exception`` sees it, as none sees SIGKILL."""


@contextmanager
def cut_before(call: int) -> Iterator[None]:
    """MlflowClient's *call*-th call from here on raises :class:`Killed` instead of running."""
    made = [0]
    originals = {name: getattr(tracking.MlflowClient, name) for name in CALLS}

    def wrap(name: str) -> Callable[..., Any]:
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            made[0] += 1
            if made[0] == call:
                raise Killed(name)
            return originals[name](self, *args, **kwargs)
        return wrapped

    for name in CALLS:
        setattr(tracking.MlflowClient, name, wrap(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(tracking.MlflowClient, name, original)


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _mlflow_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def uri(tmp_path: Path) -> str:
    """A file store of the test's own."""
    return (tmp_path / "mlruns").as_uri()


# -- what a run holds -----------------------------------------------------------------------


def test_a_fresh_store_holds_nothing_and_gets_the_campaigns_run(
        uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # MLflow's own default
    integration = MlflowIntegration()
    assert list(integration.open(campaign())) == []
    (parent,) = runs(uri)
    assert parent.info.run_name == "cnn"
    assert parent.data.tags["dse.campaign"] == "cnn"
    assert parent.data.tags["dse.record"] == "/ws/.dse/record.db"
    assert parent.info.status == "RUNNING"
    before = int(time.time() * 1000)
    integration.close()
    ended = client(uri).get_run(parent.info.run_id).info
    assert ended.status == "FINISHED"
    assert ended.end_time >= before


def test_a_trial_reads_back_whole(uri: str) -> None:
    t0 = RUN_CREATED + 10
    t = trial(1, params={"lr": 0.01, "layers": 3, "opt": "adam", "aug": True},
              curve=((1, {"loss": 0.9, "acc": 0.5}, t0 + 1),
                     (2, {"loss": 0.5, "acc": 0.7}, t0 + 2)),
              metrics={"loss": 0.5, "acc": 0.75, "f1": 0.6}, score=0.75, message="exit 0",
              cache_of="cnn-1-0")
    write_all(uri, [t], experiment="sweeps", tags={"team": "vision"})
    c = client(uri)
    experiment = c.get_experiment_by_name("sweeps")
    assert c.get_experiment_by_name("cnn") is None
    (parent,) = parents(uri, "sweeps")
    (child,) = [r for r in runs(uri, "sweeps") if r.info.run_id != parent.info.run_id]
    assert child.info.experiment_id == experiment.experiment_id
    assert child.info.run_name == "cnn-1-1"
    assert child.info.status == "FINISHED"
    assert (child.info.start_time, child.info.end_time) == (int(t0 * 1000), int((t0 + 5) * 1000))
    assert child.data.params == {"lr": "0.01", "layers": "3", "opt": "adam", "aug": "True"}
    run_id = child.info.run_id
    assert history(uri, run_id, "loss") == [(1, 0.9, int((t0 + 1) * 1000)),
                                            (2, 0.5, int((t0 + 2) * 1000))]  # final == curve
    end = int((t0 + 5) * 1000)
    assert history(uri, run_id, "acc") == [(1, 0.5, int((t0 + 1) * 1000)),
                                           (2, 0.7, int((t0 + 2) * 1000)), (2, 0.75, end)]
    assert history(uri, run_id, "f1") == [(2, 0.6, end)]
    assert history(uri, run_id, "score") == [(2, 0.75, end)]
    tags = child.data.tags
    assert {k: v for k, v in tags.items() if not k.startswith("mlflow.runName")} == {
        PARENT: parent.info.run_id, "dse.key": t.key, "dse.campaign": "cnn",
        "dse.record": "/ws/.dse/record.db", "dse.trial": "cnn-1-1",
        "dse.config_hash": "h001", "dse.status": "completed", "dse.message": "exit 0",
        "dse.data_version": "v1", "dse.cache_of": "cnn-1-0", "team": "vision", WRITTEN: "1"}
    assert parent.data.tags["team"] == "vision"


def test_outcomes_become_run_statuses(uri: str) -> None:
    outcomes = {"completed": "FINISHED", "cached": "FINISHED", "failed": "FAILED",
                "interrupted": "FAILED", "budget_exhausted": "FAILED", "stopped": "KILLED"}
    trials = [trial(n, status=s, failure="workload" if s in ("failed", "interrupted") else None,
                    score=None, metrics={})
              for n, s in enumerate(outcomes)]
    write_all(uri, trials)
    seen = {r.data.tags["dse.status"]: r for r in runs(uri) if "dse.status" in r.data.tags}
    assert {s: r.info.status for s, r in seen.items()} == outcomes
    assert seen["failed"].data.tags["dse.failure"] == "workload"
    assert "dse.failure" not in seen["completed"].data.tags
    assert "score" not in seen["failed"].data.metrics


def test_mlflows_limits_are_kept(uri: str) -> None:
    params: dict[str, Any] = {f"p{i:03d}": i for i in range(250)}
    params["long"] = "x" * 7000
    curve = tuple((s, {"loss": 1.0 / s, "top-1@val": s / 2000}, RUN_CREATED + s)
                  for s in range(1, 1501))
    write_all(uri, [trial(1, params=params, curve=curve, metrics={}, message="m" * 9000)])
    (child,) = [r for r in runs(uri) if PARENT in r.data.tags]
    assert len(child.data.params) == 251
    assert len(child.data.params["long"]) == 6000
    assert len(child.data.tags["dse.message"]) == 5000
    assert len(history(uri, child.info.run_id, "loss")) == 1500
    assert len(history(uri, child.info.run_id, "top-1_val")) == 1500  # '@' is not a name's


# -- exactly once ---------------------------------------------------------------------------


def test_reopening_returns_every_key_and_keeps_one_campaign_run(uri: str) -> None:
    trials = [trial(n) for n in range(3)]
    assert write_all(uri, trials) == set()
    (first,) = parents(uri)
    integration = MlflowIntegration(tracking_uri=uri)
    assert set(integration.open(campaign())) == {t.key for t in trials}
    (again,) = parents(uri)
    assert again.info.run_id == first.info.run_id
    assert again.info.status == "RUNNING"
    integration.close()
    assert by_key(uri) == {t.key: 1 for t in trials}


def test_two_records_of_one_campaign_do_not_collide(uri: str) -> None:
    a, b = campaign(record="/a/record.db"), campaign(record="postgresql://db/dse")
    ta, tb = trial(1), trial(1, run_created=RUN_CREATED + 3600)
    assert ta.name == tb.name
    assert ta.key != tb.key
    write_all(uri, [ta], a)
    write_all(uri, [tb], b)
    assert write_all(uri, [], a) == {ta.key}
    assert write_all(uri, [], b) == {tb.key}
    by_record = {p.data.tags["dse.record"]: p.info.run_id for p in parents(uri)}
    assert len(by_record) == 2
    assert nesting(uri) == {ta.key: by_record["/a/record.db"],
                            tb.key: by_record["postgresql://db/dse"]}


def test_a_write_cut_between_any_two_calls_is_rewritten_once(uri: str) -> None:
    trials = wide_trials()  # create_run, log_batch x2, set_terminated, set_tag: 5 calls
    for call, t in enumerate(trials, start=1):
        integration = MlflowIntegration(tracking_uri=uri)
        assert set(integration.open(campaign())) == {u.key for u in trials[:call - 1]}
        with cut_before(call), pytest.raises(Killed):
            integration.write(t)
        assert t.key not in write_all(uri, [t])  # not held: half written, deleted, rewritten
    assert write_all(uri, []) == {t.key for t in trials}
    assert by_key(uri) == {t.key: 1 for t in trials}
    assert unmarked(uri) == []


def test_two_whole_runs_of_one_key_become_one(uri: str) -> None:
    t = trial(1)
    integration = MlflowIntegration(tracking_uri=uri)
    integration.open(campaign())
    integration.write(t)
    integration.write(t)  # as a write retried after its mark landed unseen would
    integration.close()
    assert by_key(uri) == {t.key: 2}
    assert write_all(uri, []) == {t.key}
    assert by_key(uri) == {t.key: 1}


def test_runs_are_read_page_by_page(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MlflowIntegration, "local_page", 2)
    trials = [trial(n) for n in range(7)]
    write_all(uri, trials[:5])
    writers = [MlflowIntegration(tracking_uri=uri) for _ in trials[5:]]
    for integration in writers:
        integration.open(campaign())
    for integration, t in zip(writers, trials[5:], strict=True):  # two half written
        with cut_before(3), pytest.raises(Killed):
            integration.write(t)
    assert len(unmarked(uri)) == 2
    assert write_all(uri, trials) == {t.key for t in trials[:5]}
    assert by_key(uri) == {t.key: 1 for t in trials}
    assert unmarked(uri) == []


def test_a_lost_campaign_run_is_replaced_and_no_trial_written_again(uri: str) -> None:
    trials = [trial(n) for n in range(3)]
    write_all(uri, trials)
    (lost,) = parents(uri)
    client(uri).delete_run(lost.info.run_id)  # as in MLflow's UI
    assert write_all(uri, trials) == {t.key for t in trials}
    (parent,) = parents(uri)
    assert parent.info.run_id != lost.info.run_id
    assert nesting(uri) == {t.key: parent.info.run_id for t in trials}  # moved under it
    assert by_key(uri) == {t.key: 1 for t in trials}


def test_two_campaign_runs_of_one_record_become_one(uri: str) -> None:
    trials = [trial(n) for n in range(2)]
    write_all(uri, trials)
    (older,) = parents(uri)
    c = client(uri)  # as two controllers starting at once might leave it:
    newer = c.create_run(older.info.experiment_id, start_time=older.info.start_time + 1,
                         tags=dict(older.data.tags), run_name="cnn").info.run_id
    (second,) = [r for r in runs(uri) if r.data.tags.get("dse.key") == trials[1].key]
    c.set_tag(second.info.run_id, PARENT, newer)
    assert write_all(uri, trials) == {t.key for t in trials}
    assert [p.info.run_id for p in parents(uri)] == [older.info.run_id]
    assert nesting(uri) == {t.key: older.info.run_id for t in trials}


def test_open_mends_what_a_kill_inside_mlflows_writes_leaves(uri: str, tmp_path: Path) -> None:
    trials = [trial(n) for n in range(3)]
    write_all(uri, trials[:2])
    c = client(uri)
    experiment = c.get_experiment_by_name("cnn").experiment_id
    (parent,) = parents(uri)

    def run(name: str, tags: dict[str, str]) -> str:
        made = c.create_run(experiment, tags=tags, run_name=name).info.run_id
        c.delete_tag(made, "mlflow.runName")  # the file store's create_run writes it last
        return str(made)

    # killed inside the file store's create_run: before a tag, after the first ones
    stubs = [run("cnn-1-7", {}), run("cnn", {}), run("cnn", {"dse.campaign": "cnn"}),
             run("cnn-1-8", {"dse.key": "cnn-1-8-00000000", "dse.campaign": "cnn"})]
    theirs = c.create_run(experiment, tags={"note": "mine"}, run_name="cnn-9-9").info.run_id
    folder = tmp_path / "mlruns" / experiment
    dead = folder / ("a" * 32)
    dead.mkdir()
    (dead / "meta.yaml").touch()  # ... while writing meta.yaml
    with pytest.raises(AttributeError):  # then MLflow cannot read the experiment
        c.search_runs([experiment])
    (dead / "meta.yaml").unlink()
    integration = MlflowIntegration(tracking_uri=uri)
    integration.open(campaign())
    with cut_before(2), pytest.raises(Killed):
        integration.write(trials[2])
    (half,) = unmarked(uri)
    (folder / half.info.run_id / "metrics" / "loss").write_text("")  # ... inside log_batch
    with pytest.raises(ValueError, match="No data found"):  # nor with this
        c.search_runs([experiment])
    (dead / "meta.yaml").touch()
    (folder / parent.info.run_id / "meta.yaml").write_text("")  # ... inside update_run

    assert write_all(uri, trials) == {t.key for t in trials[:2]}
    (new_parent,) = parents(uri)
    left = {r.info.run_id for r in runs(uri)}
    assert left.isdisjoint({*stubs, half.info.run_id, parent.info.run_id})
    assert theirs in left
    assert nesting(uri) == {t.key: new_parent.info.run_id for t in trials}
    assert by_key(uri) == {t.key: 1 for t in trials}


# -- real processes killed by SIGKILL -----------------------------------------------------

FORKER = """
import sys
sys.path.insert(0, sys.argv[1])
import test_mlflow
test_mlflow.forker(sys.argv[2:])
"""

POINTS = {  # where a writer is killed: after the n-th call of a method; what is held then
    "delete_run:1": 1,  # open, deleting the half-written trial it found
    "set_terminated:2": 2,  # the second trial ended but not marked
    "set_tag:1": 2,     # the first trial marked, nothing after
    "random": 1,        # anywhere, inside MLflow's calls too
}
"""(Every point between two calls of a write: the test of a write cut.)"""


def forker(args: list[str]) -> None:
    """Fork a :func:`writer` for each (store, point, progress) of *args*, all at once (MLflow
    is imported once, not once a writer), and wait for them."""
    children = []
    for store, point, progress in zip(args[0::3], args[1::3], args[2::3], strict=True):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                writer(store, point, progress)
                code = 0
            finally:
                os._exit(code)
        Path(progress).with_suffix(".pid").write_text(str(pid))
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)


def writer(uri: str, point: str, progress: str) -> None:
    """A controller's writer: writes the campaign's trials, and holds still after call *point*
    (``method:n``), or at the end, until it is killed."""
    with Path(progress).open("a", buffering=1) as said:
        counts: collections.Counter[str] = collections.Counter()

        def wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(self, *args, **kwargs)
                counts[name] += 1
                if f"{name}:{counts[name]}" == point:
                    said.write("hold\n")
                    time.sleep(600)  # the test kills it here
                return result
            return wrapped

        for name in CALLS:
            setattr(tracking.MlflowClient, name, wrap(name, getattr(tracking.MlflowClient, name)))
        integration = MlflowIntegration(tracking_uri=uri)
        held = set(integration.open(campaign()))
        said.write("ready\n")
        for t in wide_trials():
            if t.key not in held:
                integration.write(t)
        integration.close()
        said.write("done\n")
        time.sleep(600)


def test_writers_killed_by_sigkill_leave_each_trial_once(tmp_path: Path) -> None:
    trials = wide_trials()
    args = []
    for point in POINTS:
        store = (tmp_path / point.replace(":", "-") / "mlruns").as_uri()
        write_all(store, trials[:1])  # held at open
        integration = MlflowIntegration(tracking_uri=store)
        integration.open(campaign())
        with cut_before(4), pytest.raises(Killed):  # half written: open deletes it
            integration.write(trials[1])
        args += [store, point, str(tmp_path / f"{point.replace(':', '-')}.progress")]
    with (tmp_path / "forker.err").open("w") as err:
        forked = subprocess.Popen([sys.executable, "-c", FORKER, str(Path(__file__).parent),
                                   *args], stderr=err, start_new_session=True)
    try:
        for point, progress in zip(POINTS, map(Path, args[2::3]), strict=True):
            sign = "ready" if point == "random" else "hold"
            wait_for(lambda p=progress, s=sign: (p.exists() and s in p.read_text())
                     or forked.poll() is not None, f"the writer to reach {point}")
            assert forked.poll() is None, (tmp_path / "forker.err").read_text()
            if point == "random":
                time.sleep(random.uniform(0, 0.08))  # where it is killed, not a proof
            os.kill(int(progress.with_suffix(".pid").read_text()), signal.SIGKILL)
        assert forked.wait(timeout=60) == 0
    finally:
        if forked.poll() is None:
            os.killpg(forked.pid, signal.SIGKILL)
            forked.wait()
    for point, store in zip(POINTS, args[0::3], strict=True):
        integration = MlflowIntegration(tracking_uri=store)
        held = set(integration.open(campaign()))
        assert len(held) >= POINTS[point], point
        assert held == {t.key for t in trials[:POINTS[point]]} or point == "random", point
        assert by_key(store) == dict.fromkeys(held, 1), point  # the rest deleted
        for t in trials:
            if t.key not in held:
                integration.write(t)
        integration.close()
        assert by_key(store) == {t.key: 1 for t in trials}, point
        assert unmarked(store) == [], point


# -- a database: the path a tracking server takes ----------------------------------------


@pytest.fixture
def database() -> Generator[str, None, None]:
    """A SQLite tracking database (in memory-backed /dev/shm when there is one: MLflow's
    schema migrations fsync a lot)."""
    folder = tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
    try:
        yield f"sqlite:///{folder}/mlflow.db"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# MLflow 3.18's SQL store on SQLAlchemy 2.1
@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")
def test_a_database_store_is_searched_by_tags(
        database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MlflowIntegration, "server_page", 2)
    trials = [trial(n) for n in range(6)]
    write_all(database, trials[:4])
    integration = MlflowIntegration(tracking_uri=database)
    integration.open(campaign())
    integration.write(trials[0])  # a second whole run of a key
    with cut_before(3), pytest.raises(Killed):
        integration.write(trials[4])
    assert write_all(database, trials) == {t.key for t in trials[:4]}
    assert by_key(database) == {t.key: 1 for t in trials}
    assert unmarked(database) == []
    assert len(parents(database)) == 1


# -- options --------------------------------------------------------------------------------


def test_a_deleted_experiment_is_a_config_error(uri: str) -> None:
    write_all(uri, [])
    c = client(uri)
    c.delete_experiment(c.get_experiment_by_name("cnn").experiment_id)
    with pytest.raises(ConfigError, match="'cnn' is deleted: restore it"):
        MlflowIntegration(tracking_uri=uri).open(campaign())


def test_a_missing_mlflow_is_a_one_line_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr("importlib.util.find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError) as caught:
        MlflowIntegration.from_options({}, where="dse.toml: integrations.mlflow")
    assert str(caught.value) == (
        "dse.toml: integrations.mlflow: needs the mlflow package, which is not installed"
        " (pip install 'dse-core[mlflow]')")


@pytest.mark.parametrize(("options", "says"), [
    ({"experimnet": "x"}, "experimnet"),
    ({"tags": {"team": 1}}, "tags must map strings to strings"),
    ({"tags": {"dse.key": "x"}}, "'dse.key' is the integration's own"),
    ({"tracking_uri": 5}, "tracking_uri must be a string"),
])
def test_a_bad_option_is_a_one_line_config_error(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match="bad option") as caught:
        MlflowIntegration.from_options(options, where="dse.toml: integrations.mlflow")
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("options", "says"), [
    ({}, "MLflow's default store, sqlite:///mlflow.db, needs the full mlflow package"),
    ({"tracking_uri": "sqlite:///runs.db"}, "'sqlite:///runs.db' needs the full mlflow package"),
])
def test_a_database_store_without_sqlalchemy_is_refused_before_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, options: dict[str, Any], says: str,
) -> None:
    # mlflow-skinny alone cannot open a database store: said when the campaign is built, not
    # as a warning once it runs. A tracking server needs neither.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sqlalchemy" else real(name, *a))
    with pytest.raises(ConfigError) as caught:
        MlflowIntegration.from_options(options, where="c.toml: integrations.mlflow")
    message = str(caught.value)
    assert message.startswith(f"c.toml: integrations.mlflow: {says}")
    assert "brings sqlalchemy" in message
    assert "\n" not in message
    served = MlflowIntegration.from_options({"tracking_uri": "http://mlflow:5000"},
                                            where="c.toml: integrations.mlflow")
    assert served.tracking_uri == "http://mlflow:5000"
