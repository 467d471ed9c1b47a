"""Reading the record for people: ``dse status``, ``report``, ``show`` and ``export`` as text,
JSON and HTML with figures, and ``dse.load``'s results. Reads the record; never imports the
engine.

Its face: what the figures of ``dse report --html`` are computed from, as plain data any page
can draw — the importance of each param by PED-ANOVA (:func:`ped_anova`), the slices
(:func:`slices`) and the contour of a pair of params (:func:`contour`), and a run's
:class:`Landscape` read once for all three (:func:`landscape`). Names are imported on first
use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.model._lazy import lazy_names

if TYPE_CHECKING:
    from dse.report._importance import Importances, ped_anova
    from dse.report._landscape import (
        Contour,
        GridAxis,
        Landscape,
        Observed,
        Slice,
        contour,
        landscape,
        slices,
        space_of,
        top_pair,
    )

_LAZY: dict[str, str] = {
    "Contour": "dse.report._landscape",
    "GridAxis": "dse.report._landscape",
    "Importances": "dse.report._importance",
    "Landscape": "dse.report._landscape",
    "Observed": "dse.report._landscape",
    "Slice": "dse.report._landscape",
    "contour": "dse.report._landscape",
    "landscape": "dse.report._landscape",
    "ped_anova": "dse.report._importance",
    "slices": "dse.report._landscape",
    "space_of": "dse.report._landscape",
    "top_pair": "dse.report._landscape",
}

__all__ = ["Contour", "GridAxis", "Importances", "Landscape", "Observed", "Slice", "contour",
           "landscape", "ped_anova", "slices", "space_of", "top_pair"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, __all__)
