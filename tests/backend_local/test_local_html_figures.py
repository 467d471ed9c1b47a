"""The figures of `dse report --html` drawn with matplotlib (the report extra), on runs made up
to reach their edges: time axes over a span of seconds to days, parallel coordinates of many
params and many categories. What a figure says is read back as the page gets it
(``dse.report._drawn.draw_png``): its axes' labels and drawn tick labels, every text's box, and the
pairs that overlap, a check shown here to catch an overlap when there is one. Beside the local
backend's tests, which run with every package and extra installed."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pytest

from dse.report._drawn import draw_png
from dse.report._palette import time_unit
from dse.report._parallel import CATEGORIES_NAMED, draw_parameters
from dse.report._plots import RunData, cost, timeline

if TYPE_CHECKING:
    from dse.report._drawn import Drawn


def figure() -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def made_up(space: list[dict[str, Any]], trials: list[dict[str, Any]],
            attempts: list[dict[str, Any]], *, direction: str = "minimize") -> RunData:
    return RunData(name="made", run=1, direction=direction, metric="loss", currency="USD",
                   created=1000.0, status="completed", now=1000.0, space=space,
                   trials=trials, attempts=attempts)


def test_two_texts_drawn_on_each_other_are_caught() -> None:
    fig = figure()
    ax = fig.subplots()
    ax.text(0.5, 0.5, "one label", ha="center")
    ax.text(0.5, 0.5, "another", ha="center")
    ax.text(0.5, 0.9, "two\nlines", ha="center")
    ax.set_xlabel("x axis")
    drawn = draw_png(fig)
    assert [(a.text, b.text) for a, b in drawn.overlaps()] == [("one label", "another")]
    said = [t.text for t in drawn.texts]
    assert {"one label", "another", "two", "lines", "x axis"} <= set(said)
    (axes,) = drawn.axes
    assert axes.xlabel == "x axis"
    assert axes.ylabel == ""  # none drawn
    assert axes.xticks == ("0.0", "0.2", "0.4", "0.6", "0.8", "1.0")
    assert drawn.png.startswith(b"\x89PNG")
    assert (drawn.width, drawn.height) == (1000, 420)


def assert_readable(drawn: Drawn) -> None:
    assert drawn.overlaps() == []
    for t in drawn.texts:
        left, top, right, bottom = t.box
        assert 0 <= left < right <= drawn.width, t
        assert 0 <= top < bottom <= drawn.height, t


@pytest.mark.parametrize(("span", "unit"), [
    (20.0, "seconds"), (100.0, "seconds"), (600.0, "minutes"), (5 * 3600.0, "hours"),
    (3 * 86400.0, "days"),
])
def test_time_axes_read_in_the_unit_of_their_span(span: float, unit: str) -> None:
    assert time_unit(span)[1] == unit
    trials = [{"row": i, "number": i, "status": "completed", "failure": None, "score": 1.0,
               "params": {}, "valid": True, "ended": 1000.0 + span * i / 8, "cached": False}
              for i in range(1, 9)]
    attempts = [{"number": i, "state": "succeeded", "start": 1000.0 + span * (i - 1) / 8,
                 "end": 1000.0 + span * i / 8, "money": 0.0, "cpu_s": span / 8}
                for i in range(1, 9)]
    run = made_up([], trials, attempts)
    for draw, since in ((timeline, "the first attempt started"), (cost, "the run started")):
        fig = figure()
        draw(fig, run)
        drawn = draw_png(fig)
        axes = drawn.axes[0]
        assert axes.xlabel == f"{unit} since {since}"
        ticks = [float(t.replace("\N{MINUS SIGN}", "-")) for t in axes.xticks]
        assert 3 <= len(ticks) <= 9
        scale = time_unit(span)[0]
        assert ticks[0] == 0
        assert ticks[-1] <= 1.03 * span / scale
        assert_readable(drawn)


def test_parallel_coordinates_of_many_params_and_categories_stay_readable() -> None:
    rng = random.Random(1)
    kernels = [f"kernel-{i}" for i in range(40)]
    space: list[dict[str, Any]] = [
        {"name": "learning_rate_of_the_first_layer", "type": "float", "low": 1e-7,
         "high": 0.5, "log": True},
        {"name": "kernel", "type": "categorical", "choices": kernels},
        {"name": "flag", "type": "categorical", "choices": [True, False]},
    ]
    space += [{"name": f"p{i}", "type": "float", "low": 1e5, "high": 3.3e7} for i in range(6)]
    space += [{"name": f"n{i}", "type": "int", "low": -3, "high": 1000} for i in range(6)]

    def value(p: dict[str, Any]) -> Any:
        if "choices" in p:
            return rng.choice(p["choices"])
        if p.get("log"):
            return 10 ** rng.uniform(-7, -0.3)
        if p["type"] == "int":
            return rng.randint(p["low"], p["high"])
        return rng.uniform(p["low"], p["high"])

    trials = [{"row": i, "number": i, "status": "completed", "failure": None,
               "score": rng.uniform(0, 1), "params": {p["name"]: value(p) for p in space},
               "valid": True, "ended": 1000.0 + i, "cached": False} for i in range(300)]
    fig = figure()
    caption = draw_parameters(fig, made_up(space, trials, [], direction="maximize"))
    drawn = draw_png(fig)
    assert_readable(drawn)
    host = drawn.axes[0]
    assert len(host.xticks) == len(space) == 15
    # A long name is cut to what fits (names on two rows: about twice the axes' spacing).
    assert host.xticks[0].startswith("learning_rate")
    assert host.xticks[0].endswith("\N{HORIZONTAL ELLIPSIS}")
    assert host.xticks[1:4] == ("kernel", "flag", "p0")
    axes = {a.name: a for a in drawn.axes if a.name}
    assert axes["learning_rate_of_the_first_layer"].yscale == "log"
    named = axes["kernel"].yticks
    assert named[0] == "kernel-0"
    assert 2 <= len(named) <= CATEGORIES_NAMED
    assert axes["flag"].yticks == ("True", "False")
    assert axes["<colorbar>"].ylabel == "loss (higher is better)"
    assert "kernel: too many categories to name each" in caption
    assert "the best 5 in vermillion" in caption
