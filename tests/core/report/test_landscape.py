"""The slices and contours of a run (`dse.report.slices`, `contour`, `landscape`): plain,
JSON-able data read from a real record, each param in its own terms (log axes where the param
is log, categoricals as their levels), and the same figures in `dse report --html`."""

from __future__ import annotations

import json
import math
import random
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.report import Observed, contour, landscape, slices, space_of, top_pair
from dse.report._plots import load_run
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent
from support.landscape import SPACE, loss, points

if TYPE_CHECKING:
    from pathlib import Path

@pytest.fixture
def run(tmp_path: Path) -> Any:
    """A finished run of 60 trials on the probe backend (every 15th fails), as the report
    reads it."""
    campaign = dse.campaign_from_dict(
        {"campaign": {"name": "land", "max_trials": 60}, "space": SPACE,
         "objectives": [{"metric": "loss"}]},
        workspace=tmp_path / ".dse",
    )
    store = dse.Store(tmp_path / ".dse" / "dse.sqlite")
    clock = FakeClock()

    def script(p: dict[str, Any]) -> ProbeScript:
        if p["x"] == 15:
            return ProbeScript(seconds=1.0, state=dse.JobState.FAILED, exit_code=3)
        return ProbeScript(seconds=1.0, metrics={"loss": loss(p)})

    result = dse.Engine(campaign, agent=ScriptedAgent(points(60)), store=store, clock=clock,
                        backend=ProbeBackend(script, clock=clock)).run()
    try:
        return load_run(store, result.campaign_id)
    finally:
        store.close()


def test_the_space_reads_back_from_the_record_and_the_trials_with_it(run: Any) -> None:
    view = landscape(run)
    assert view.space == dse.Space.from_dict(SPACE)
    completed = [t for t in run.trials if t["status"] == "completed"]
    assert [o.number for o in view.observed] == [t["number"] for t in completed]
    assert len(view.observed) < 60  # the failed ones are not points
    assert view.importances is not None
    assert view.importances.ranked()[0] == "x"
    assert view.ranked() == view.importances.ranked()
    assert space_of([{"name": "x", "type": "nonsense"}]) is None


def test_a_slice_is_every_completed_trial_in_the_params_own_terms(run: Any) -> None:
    view = landscape(run)
    assert view.space is not None
    by_param = {s.param: s for s in slices(view.space, view.observed)}
    assert list(by_param) == ["x", "lr", "layout", "noise"]
    x, lr, layout = by_param["x"], by_param["lr"], by_param["layout"]
    assert (x.scale, x.low, x.high, x.levels) == ("linear", 0.0, 15.0, ())
    assert (lr.scale, lr.low, lr.high) == ("log", 1e-4, 1.0)
    assert (layout.scale, layout.levels, layout.low) == ("categorical", ("row", "col", "tile"),
                                                         None)
    numbers = [o.number for o in view.observed]
    for one in by_param.values():
        assert list(one.trials) == numbers
        assert list(one.objectives) == [o.value for o in view.observed]
    first = view.observed[0]
    assert (x.values[0], lr.values[0], layout.values[0]) == (
        first.params["x"], first.params["lr"], first.params["layout"])
    assert all(isinstance(v, int) for v in x.values)
    doc = json.loads(json.dumps([s.as_dict() for s in by_param.values()]))
    assert doc[2]["levels"] == ["row", "col", "tile"]
    assert doc[0]["trials"] == numbers


def test_slices_leave_out_non_finite_values_and_refused_params() -> None:
    space = dse.Space.from_dict({"a": {"type": "float", "low": 0.0, "high": 1.0}})
    observed = [Observed(1, {"a": 0.5}, 1.0), Observed(2, {"a": 0.2}, math.nan),
                Observed(3, {"a": 0.1}, math.inf), Observed(4, {"a": 7.0}, 2.0),
                Observed(5, {}, 2.0), Observed(6, {"a": 0.25}, 0.5)]
    (one,) = slices(space, observed)
    assert (one.trials, one.values, one.objectives) == ((1, 6), (0.5, 0.25), (1.0, 0.5))


def test_the_contour_of_the_two_most_important_params_bins_the_mean(run: Any) -> None:
    view = landscape(run)
    assert view.space is not None
    data = contour(view.space, view.observed, direction="minimize")
    assert data is not None
    assert (data.x.param, data.y.param) == tuple(view.importances.ranked()[:2])  # type: ignore[union-attr]
    assert (data.x.param, data.y.param) == ("x", "lr")
    # x takes 16 values, more than 10 bins: 10 even bins over [0, 15].
    assert data.x.scale == "linear"
    assert data.x.edges == pytest.approx([1.5 * i for i in range(11)])
    # lr is log: its edges are evenly spaced in log space, a decade in 2.5 bins.
    assert data.y.scale == "log"
    assert data.y.edges[0] == pytest.approx(1e-4)
    assert data.y.edges[-1] == pytest.approx(1.0)
    ratios = [b / a for a, b in zip(data.y.edges, data.y.edges[1:], strict=False)]
    assert ratios == pytest.approx([10 ** 0.4] * 10)
    assert len(data.means) == 10
    assert all(len(row) == 10 for row in data.means)
    # Each cell is the mean of the trials in it, counted; an empty cell is None.
    cells: dict[tuple[int, int], list[float]] = {}
    for o in view.observed:
        column = min(int(o.params["x"] / 1.5), 9)
        row = min(int(math.log10(o.params["lr"] / 1e-4) / 0.4), 9)
        cells.setdefault((row, column), []).append(o.value)
    for row in range(10):
        for column in range(10):
            found = cells.get((row, column), [])
            assert data.counts[row][column] == len(found)
            mean = data.means[row][column]
            assert (mean is None) == (not found)
            if found:
                assert mean == pytest.approx(sum(found) / len(found))
    assert sum(map(sum, data.counts)) == len(view.observed) == len(data.trials)
    doc = json.loads(json.dumps(data.as_dict()))
    assert doc["x"]["param"] == "x"
    assert None in [v for row in doc["means"] for v in row]


def test_a_categorical_has_a_cell_per_level_and_a_small_integer_one_per_value() -> None:
    space = dse.Space.from_dict({"layout": ["row", "col"],
                                 "cores": {"type": "int", "low": 1, "high": 4},
                                 "batch": {"type": "int", "low": 2, "high": 16, "step": 2,
                                           "log": True}})
    observed = [Observed(i, p, float(p["cores"]) + (p["layout"] == "col"))
                for i, p in enumerate(points_of(space, 40))]
    data = contour(space, observed, ("layout", "cores"))
    assert data is not None
    assert (data.x.scale, data.x.levels, data.x.edges) == (
        "categorical", ("row", "col"), (-0.5, 0.5, 1.5))
    assert data.y.centres == (1, 2, 3, 4)
    assert data.y.edges == pytest.approx([0.5, 1.5, 2.5, 3.5, 4.5])
    for row, cores in enumerate((1, 2, 3, 4)):
        assert data.means[row][0] in (None, pytest.approx(cores))
        assert data.means[row][1] in (None, pytest.approx(cores + 1))
    logged = contour(space, observed, ("cores", "batch"))
    assert logged is not None
    # Eight values of a log integer: a cell around each, its edges halfway in log space.
    assert logged.y.centres == (2, 4, 6, 8, 10, 12, 14, 16)
    assert logged.y.edges[1] == pytest.approx(math.sqrt(2 * 4))


def points_of(space: dse.Space, count: int) -> list[dict[str, Any]]:
    rng = random.Random(3)
    return [space.sample(rng) for _ in range(count)]


def test_without_importances_the_pair_is_the_first_two_params_that_vary() -> None:
    space = dse.Space.from_dict({"fixed": ["only"], "a": {"type": "int", "low": 0, "high": 3},
                                 "b": ["p", "q"], "c": {"type": "float", "low": 0, "high": 1}})
    assert top_pair(space) == ("a", "b")
    few = [Observed(i, p, 1.0 * i) for i, p in enumerate(points_of(space, 5))]
    data = contour(space, few)  # too few trials for importances
    assert data is not None
    assert (data.x.param, data.y.param) == ("a", "b")
    single = dse.Space.from_dict({"a": {"type": "int", "low": 0, "high": 3}})
    assert top_pair(single) is None
    assert contour(single, few) is None
