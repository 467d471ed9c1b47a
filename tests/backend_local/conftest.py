"""Fixtures for local-backend tests: a real workload script, campaigns run on real processes.

Every trial here is a real process tree. The workload records what it saw (its own start and
end times, pid, argv, params, ``CUDA_VISIBLE_DEVICES``) in ``trace.json`` in its trial dir, so a
test asserts on what the processes did, not on what the engine believes they did.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import dse
from dse.testing import ScriptedAgent
from dse_local import LocalBackend
from support.record import record

WORKLOAD = r"""
import json, os, signal, sys, time

start = time.time()
with open(os.environ["DSE_PARAMS_FILE"], encoding="utf-8") as handle:
    params = json.load(handle)
if params.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(float(params.get("sleep", 0)))
end = time.time()
trial_dir = os.environ["DSE_TRIAL_DIR"]


def dump(name, doc):
    path = os.path.join(trial_dir, name)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(doc, handle)
    os.replace(path + ".tmp", path)


dump("trace.json", {
    "start": start, "end": end, "pid": os.getpid(), "argv": sys.argv[1:], "params": params,
    "cwd": os.getcwd(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "place": {k: os.environ.get("DSE_" + k) for k in (
        "RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "NODE", "NODES")},
})
dump("result.json", {"complete": True, "metrics": {"value": float(params.get("x", 0))}})
"""


def trial_number(trial_id: str) -> int:
    """The trial number inside a trial id (``<campaign>-<run>-<number>``)."""
    return int(trial_id.rsplit("-", 1)[1])


class Run(NamedTuple):
    """What one campaign run on the local backend left behind."""

    result: dse.CampaignResult
    store: dse.Store
    engine: dse.Engine

    @property
    def trials(self) -> dict[int, Any]:
        """Trial number → its record row."""
        return {row["number"]: row for row in record(self.store).trials(self.result.campaign_id)}

    @property
    def attempts(self) -> dict[int, Any]:
        """Trial number → the record row of its (only) attempt."""
        return {trial_number(row["job_id"].rsplit(".", 1)[0]): row
                for row in record(self.store).attempts(self.result.campaign_id)}

    def trial_dir(self, number: int) -> Path:
        return self.engine.run_dir / f"{number:06d}"

    def traces(self) -> dict[int, dict[str, Any]]:
        """Trial number → what its workload recorded (only trials that got that far)."""
        out = {}
        for number in self.trials:
            path = self.trial_dir(number) / "trace.json"
            if path.exists():
                out[number] = json.loads(path.read_text())
        return out


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    """The tracing workload script (params: ``x``, ``sleep``, ``ignore_term``)."""
    path = tmp_path / "workload.py"
    path.write_text(WORKLOAD)
    return path


@pytest.fixture
def make_campaign(tmp_path: Path, workload: Path) -> Callable[..., dse.Campaign]:
    """Build a campaign on the local backend running the tracing workload.

    ``environment`` updates the ``[environment]`` table (default command: the workload);
    ``space`` replaces the default space (``x`` int, ``sleep`` float); other keywords are
    keys of the ``[campaign]`` table. Each campaign gets a workspace of its own.
    """
    counter = itertools.count(1)

    def make(
        *,
        space: Mapping[str, Any] | None = None,
        environment: Mapping[str, Any] | None = None,
        **campaign: Any,
    ) -> dse.Campaign:
        n = next(counter)
        table = {"name": f"local-{n}", "max_parallelism": 1, "mode": "waves",
                 "backend": "local"}
        table.update(campaign)
        env: dict[str, Any] = {"command": [sys.executable, "-S", str(workload)]}
        env.update(environment or {})
        data = {
            "campaign": table,
            "space": space or {
                "x": {"type": "int", "low": 0, "high": 1000},
                "sleep": {"type": "float", "low": 0.0, "high": 600.0},
            },
            "objectives": [{"metric": "value"}],
            "environment": env,
        }
        return dse.campaign_from_dict(data, workspace=tmp_path / f"ws-{n}")

    return make


@pytest.fixture
def run_local(make_campaign: Callable[..., dse.Campaign]) -> Iterator[Callable[..., Run]]:
    """Run a campaign with a scripted agent on a real :class:`LocalBackend`; return a Run.

    ``backend`` defaults to ``LocalBackend(cpus=8, gpus=0, grace=1.0)``; other keywords go to
    :func:`make_campaign`. Backends are shut down and stores closed at teardown.
    """
    backends: list[LocalBackend] = []
    stores: list[dse.Store] = []

    def run(
        proposals: Iterable[Mapping[str, Any]],
        *,
        backend: LocalBackend | None = None,
        listener: dse.EngineListener | None = None,
        **overrides: Any,
    ) -> Run:
        campaign = make_campaign(**overrides)
        backend = backend or LocalBackend(cpus=8, gpus=0, grace=1.0)
        backends.append(backend)
        store = dse.Store(campaign.workspace / "dse.sqlite")
        stores.append(store)
        engine = dse.Engine(
            campaign, agent=ScriptedAgent(proposals), backend=backend, store=store,
            listener=listener,
        )
        return Run(engine.run(), store, engine)

    yield run
    for backend in backends:
        backend.shutdown()
    for store in stores:
        store.close()
