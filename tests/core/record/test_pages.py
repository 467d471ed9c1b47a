"""The live view's reads (``Storage.pages``) on both records: a page of a run's trials sorted
by a column, a param or a metric, filtered by status, failure, data version and param range,
paged; and the change stamp, which moves with every trial, attempt and run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.record._records import TrialQuery
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from dse.record import Storage


def script(params: Mapping[str, Any]) -> ProbeScript:
    if params["x"] % 4 == 3:
        return ProbeScript(seconds=1.0, state=dse.JobState.FAILED, exit_code=4)
    return ProbeScript(seconds=1.0, metrics={"t": (params["x"] - 5) ** 2 + params["y"],
                                             "m": -params["x"]})


def campaign_of(tmp_path: Path, opener: Callable[[Path], Storage], points: list[dict[str, Any]]
                ) -> tuple[int, Storage]:
    camp = dse.campaign_from_dict({
        "campaign": {"name": "pg", "max_parallelism": 3},
        "space": {"x": {"type": "int", "low": 0, "high": 20},
                  "y": {"type": "float", "low": 0.0, "high": 1.0},
                  "k": {"type": "categorical", "choices": ["a", "b"]}},
        "objectives": [{"metric": "t"}],
        "environment": {"time_limit": "1m"},
    }, workspace=tmp_path / "ws")
    clock = FakeClock(100.0)
    store = opener(tmp_path / "ws")
    result = dse.Engine(camp, agent=ScriptedAgent(points), store=store, clock=clock,
                        backend=ProbeBackend(script, clock=clock)).run()
    return result.campaign_id, store


POINTS = [{"x": x, "y": round(0.05 * x, 2), "k": "ab"[x % 2]} for x in range(12)]


def numbers(store: Storage, run: int, **query: Any) -> tuple[int, list[int]]:
    page = store.pages.trial_page(run, TrialQuery(**query))
    return page.total, [t.number for t in page.trials]


def test_a_page_sorts_filters_and_pages_on_both_records(
    tmp_path: Path, opener: Callable[[Path], Storage]
) -> None:
    run, store = campaign_of(tmp_path, opener, POINTS)
    try:
        assert numbers(store, run, limit=5) == (12, [1, 2, 3, 4, 5])
        assert numbers(store, run, limit=5, offset=10) == (12, [11, 12])
        assert numbers(store, run, descending=True, limit=3) == (12, [12, 11, 10])
        # By the score (t: lowest at x = 5), failed trials (no score) last either way.
        _, order = numbers(store, run, sort="score", limit=12)
        assert order[:3] == [6, 5, 7]  # x = 5, 4, 6
        assert set(order[-3:]) == {4, 8, 12}  # x = 3, 7, 11 failed
        _, order = numbers(store, run, sort="score", descending=True, limit=12)
        assert order[:2] == [11, 1]  # x = 10 (t = 25.5), x = 0 (t = 25)
        assert set(order[-3:]) == {4, 8, 12}
        assert numbers(store, run, sort="param:y", descending=True, limit=2) == (12, [12, 11])
        assert numbers(store, run, sort="metric:m", limit=2)[1] == [11, 10]  # m = -x
        assert numbers(store, run, statuses=("failed",)) == (3, [4, 8, 12])
        assert numbers(store, run, failures=("nonzero_exit",))[0] == 3
        assert numbers(store, run, statuses=("completed",),
                       ranges=(("x", 2.0, 6.0),)) == (4, [3, 5, 6, 7])
        assert numbers(store, run, ranges=(("y", None, 0.1),)) == (3, [1, 2, 3])
        assert numbers(store, run, data_version="nope") == (0, [])
        for bad in ("param:x'); DROP TABLE trials; --", "secret", "metric:a.b"):
            with pytest.raises(dse.ConfigError, match="dashboard"):
                numbers(store, run, sort=bad)
    finally:
        store.close()


def test_the_stamp_moves_with_every_change_and_only_then(
    tmp_path: Path, opener: Callable[[Path], Storage]
) -> None:
    _, store = campaign_of(tmp_path, opener, POINTS[:2])
    try:
        first = store.pages.stamp()
        assert store.pages.stamp() == first
    finally:
        store.close()
    _, store = campaign_of(tmp_path, opener, POINTS[2:4])
    try:
        assert store.pages.stamp() != first
    finally:
        store.close()


def test_a_sample_holds_the_best_and_spreads_the_rest_over_the_run(
    tmp_path: Path, opener: Callable[[Path], Storage]
) -> None:
    run, store = campaign_of(tmp_path, opener, POINTS)
    try:
        # The best two by score (t lowest: x = 5, 4, i.e. numbers 6 and 5), then every 4th
        # number (12 trials over the 3 places left).
        assert [t.number for t in store.pages.sample(run, 5, best=2)] == [4, 5, 6, 8, 12]
        assert [t.number for t in store.pages.sample(run, 5, best=2, maximize=True)] == [
            1, 4, 8, 11, 12]  # t highest: x = 10 (number 11), x = 0 (number 1)
        assert len(store.pages.sample(run, 100)) == 12  # a small run: every trial
    finally:
        store.close()
