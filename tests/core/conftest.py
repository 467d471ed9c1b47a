"""Fixtures for engine tests: a fake clock, campaigns in a fresh workspace, a probe run."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

import dse
from dse.model import _digests
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent
from support.record import record

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def file_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files whose content is digested from now on (the stat-keyed digests
    of data and code files read a file only when its stamp changed)."""
    read: list[str] = []
    digest = _digests.file_digest

    def counting(path: Path | str) -> str:
        read.append(os.path.basename(path))
        return digest(path)

    monkeypatch.setattr(_digests, "file_digest", counting)
    return read


def trial_number(trial_id: str) -> int:
    """The trial number inside a trial id (``<campaign>-<run>-<number>``)."""
    return int(trial_id.rsplit("-", 1)[1])


class Run(NamedTuple):
    """What one probe run left behind, with the views the engine tests read."""

    result: dse.CampaignResult
    store: dse.Store
    backend: ProbeBackend
    agent: ScriptedAgent

    @property
    def trials(self) -> list[Any]:
        """The record's trial rows, in number order."""
        return record(self.store).trials(self.result.campaign_id)

    @property
    def batches(self) -> list[list[int]]:
        """Trial numbers of each submit call, in order."""
        return [[trial_number(t) for t in batch] for batch in self.backend.cluster.batches]

    @property
    def starts(self) -> dict[int, int]:
        """Trial number → the pass after which it was submitted."""
        return self._timeline("start")

    @property
    def ends(self) -> dict[int, int]:
        """Trial number → the pass that reported its end."""
        return self._timeline("end")

    def _timeline(self, kind: str) -> dict[int, int]:
        return {
            trial_number(trial_id): at
            for at, what, trial_id in self.backend.cluster.timeline
            if what == kind
        }


def value_script(passes: Mapping[int, int]) -> Callable[[Mapping[str, Any]], ProbeScript]:
    """A probe script: ``x`` runs ``passes[x]`` passes (0 by default) and scores ``x``."""

    def script(params: Mapping[str, Any]) -> ProbeScript:
        x = params["x"]
        return ProbeScript(passes=passes.get(x, 0), metrics={"value": float(x)})

    return script


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_campaign(tmp_path: Path) -> Callable[..., dse.Campaign]:
    """Build a campaign (one int param ``x`` in [0, 100], minimise ``value``).

    Keyword arguments are keys of the ``[campaign]`` table; ``space`` and ``objectives``
    replace those tables. Every campaign gets a workspace of its own under ``tmp_path``, so
    two runs in one test never share a record (or its cache).
    """
    counter = itertools.count(1)

    def make(
        *,
        space: Mapping[str, Any] | None = None,
        objectives: Sequence[Mapping[str, Any]] | None = None,
        **campaign: Any,
    ) -> dse.Campaign:
        table = {"name": "probe-campaign", "max_parallelism": 1, "mode": "waves"}
        table.update(campaign)
        data = {
            "campaign": table,
            "space": space or {"x": {"type": "int", "low": 0, "high": 100}},
            "objectives": list(objectives or [{"metric": "value"}]),
        }
        return dse.campaign_from_dict(data, workspace=tmp_path / f"ws-{next(counter)}")

    return make


@pytest.fixture
def run_campaign(
    make_campaign: Callable[..., dse.Campaign], fake_clock: FakeClock
) -> Iterator[Callable[..., Run]]:
    """Run a campaign on the probe backend with a scripted agent; return a :class:`Run`.

    ``proposals`` are params or plain ints (``3`` stands for ``{"x": 3}``), possibly endless.
    ``passes`` maps ``x`` to its duration in passes (a sequence: ``passes[x - 1]``); ``script``
    replaces the probe script altogether; ``agent_type`` may be a ScriptedAgent subclass;
    ``queue_ahead`` is the probe's :attr:`dse.Backend.queue_ahead`, ``trial_dirs`` its
    :attr:`dse.Backend.trial_dirs`.
    Other keywords go to :func:`make_campaign`.
    """
    stores: list[dse.Store] = []

    def run(
        proposals: Iterable[Mapping[str, Any] | int],
        *,
        passes: Mapping[int, int] | Sequence[int] = (),
        script: Callable[[Mapping[str, Any]], ProbeScript] | None = None,
        campaign: dse.Campaign | None = None,
        wait_for_feedback: bool = False,
        agent_type: type[ScriptedAgent] = ScriptedAgent,
        environment: dse.Environment | None = None,
        listener: dse.EngineListener | None = None,
        queue_ahead: int = 0,
        trial_dirs: bool = False,
        **overrides: Any,
    ) -> Run:
        if campaign is None:
            campaign = make_campaign(**overrides)
        if not isinstance(passes, Mapping):
            passes = dict(enumerate(passes, start=1))
        params = ({"x": p} if isinstance(p, int) else p for p in proposals)
        agent = agent_type(params, wait_for_feedback=wait_for_feedback)
        backend = ProbeBackend(script or value_script(passes), clock=fake_clock)
        backend.queue_ahead = queue_ahead  # a backend that queues that many itself
        backend.trial_dirs = trial_dirs  # a backend that wants the trials' directories made
        store = dse.Store(campaign.workspace / "dse.sqlite")
        stores.append(store)
        engine = dse.Engine(
            campaign,
            agent=agent,
            backend=backend,
            store=store,
            environment=environment,
            clock=fake_clock,
            listener=listener,
        )
        return Run(engine.run(), store, backend, agent)

    yield run
    for store in stores:
        store.close()
