"""The colours, units and small helpers (an axis label saying which way is better, an empty
figure's message) every figure of ``dse report --html`` shares.

The colours are the Okabe-Ito palette's (Okabe & Ito, "Color Universal Design", 2008): eight
colours told apart with the common colour-vision deficiencies, and in greyscale by lightness
for most pairs. Outcomes never rest on red against green: a success is blue, a failure
vermillion, and the figures that colour by outcome also hatch, mark or label what did not
succeed. Yellow is never drawn on white. Scores run through ``cividis``, a colour map made
for the same readers, its dark end the best.

Times and CPU times are shown in the unit their span reads in (:func:`time_unit`): seconds
under two minutes, minutes under two hours, hours under two days, days beyond.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BLACK",
    "BLUE",
    "GREEN",
    "GREY",
    "LIGHT_GREY",
    "ORANGE",
    "PURPLE",
    "SCORE_MAP",
    "SKY_BLUE",
    "STATE_COLOURS",
    "UNHATCHED",
    "VERMILLION",
    "better_label",
    "cpu_unit",
    "hatch",
    "nothing",
    "state_colour",
    "time_unit",
]

BLACK = "#000000"
ORANGE = "#E69F00"
SKY_BLUE = "#56B4E9"
GREEN = "#009E73"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"
GREY = "#999999"
"""Okabe-Ito, with a neutral grey for what is neither good nor bad (its yellow, ``#F0E442``,
is left out: unreadable on white)."""

SCORE_MAP = "cividis"
"""The colour map of a score: dark blue at the best end (``cividis_r`` for a maximised
objective), light at the worst."""

LIGHT_GREY = "#CCCCCC"

STATE_COLOURS = {
    "succeeded": BLUE, "completed": BLUE, "stopped": SKY_BLUE, "running": GREEN,
    "failed": VERMILLION, "timeout": ORANGE, "out_of_memory": PURPLE, "cancelled": GREY,
    "cached": LIGHT_GREY, "pending": LIGHT_GREY,
}
"""The colour of each attempt end state and trial status."""
UNHATCHED = frozenset({"succeeded", "completed", "stopped", "running", "cached", "pending"})
"""The states and statuses drawn plain: the others (failures, interruptions, a result found
wrong) are hatched too, told apart without their colour."""
_OTHER_STATE = BLACK  # interruptions: preempted, node_fail, lost, killed...

_UNITS = ((120.0, 1.0, "seconds"), (7200.0, 60.0, "minutes"), (172800.0, 3600.0, "hours"))


def state_colour(state: str) -> str:
    """The colour of attempt end state or trial status *state* (black for an interruption
    or anything else)."""
    return STATE_COLOURS.get(state, _OTHER_STATE)


def hatch(state: str) -> str | None:
    """The hatch of *state*'s bars: none for :data:`UNHATCHED`, else diagonal lines."""
    return None if state in UNHATCHED else "//"


def time_unit(span: float) -> tuple[float, str]:
    """The unit a span of *span* seconds reads in: ``(seconds per unit, plural name)``."""
    for below, scale, name in _UNITS:
        if span < below:
            return scale, name
    return 86400.0, "days"


def cpu_unit(seconds: float) -> tuple[float, str]:
    """The unit *seconds* of CPU time read in: ``(seconds per unit, "CPU-hours")`` and the
    like (no CPU-days: a budget is set in hours)."""
    scale, name = time_unit(seconds)
    if name == "days":
        scale, name = 3600.0, "hours"
    return scale, f"CPU-{name}"


def better_label(metric: str, direction: str) -> str:
    """An axis label naming *metric* and which way is better."""
    return f"{metric} ({'higher' if direction == 'maximize' else 'lower'} is better)"


def nothing(fig: Any, what: str) -> None:
    """Say *what* in the middle of an empty figure."""
    ax = fig.subplots()
    ax.text(0.5, 0.5, what, ha="center", va="center")
    ax.set_axis_off()
