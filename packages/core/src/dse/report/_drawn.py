"""A figure of ``dse report --html`` drawn once into a PNG, with every text drawn on it and
where (:func:`draw_png`).

A plot is an image, so what it says in words is also kept as data: each text the renderer
drew, with its box in the image's pixels, and each axes' labels, scales and drawn tick
labels, read from the same matplotlib objects that drew them. The page carries both
(``data-texts``, ``data-axes``) with the pairs of texts that overlap (:func:`overlapping`,
``data-overlaps``): what a reader sees, checkable without looking at the pixels.
"""

from __future__ import annotations

import io
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["OVERLAP_SLACK", "AxesText", "Drawn", "TextBox", "draw_png", "overlapping"]

OVERLAP_SLACK = 1.0
"""Two boxes overlap when they share more than this many pixels each way (glyphs' boxes
touch where a line's letters do not)."""


@dataclass(frozen=True, slots=True)
class TextBox:
    """One text drawn on a figure."""

    text: str
    """What it says (one line of a text of several)."""
    box: tuple[float, float, float, float]
    """``(left, top, right, bottom)`` in the image's pixels, from its top left corner."""

    def overlaps(self, other: TextBox, slack: float = OVERLAP_SLACK) -> bool:
        """Whether the two boxes share more than *slack* pixels each way."""
        left, top, right, bottom = self.box
        o_left, o_top, o_right, o_bottom = other.box
        return (min(right, o_right) - max(left, o_left) > slack
                and min(bottom, o_bottom) - max(top, o_top) > slack)


@dataclass(frozen=True, slots=True)
class AxesText:
    """What one axes of a figure says: its labels, scales and the tick labels drawn."""

    name: str
    """The axes' label (``Axes.set_label``): a param's name on a parallel-coordinates axis,
    ``<colorbar>`` for a colour bar, empty for most."""
    xlabel: str
    """The x axis's label, when drawn."""
    ylabel: str
    xscale: str
    yscale: str
    xticks: tuple[str, ...]
    """The x tick labels drawn, in order (major then minor; empty ones left out)."""
    yticks: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the fields."""
        return {"name": self.name, "xlabel": self.xlabel, "ylabel": self.ylabel,
                "xscale": self.xscale, "yscale": self.yscale, "xticks": list(self.xticks),
                "yticks": list(self.yticks)}


@dataclass(frozen=True, slots=True)
class Drawn:
    """A figure drawn: the PNG and what it says."""

    png: bytes
    width: int
    height: int
    texts: tuple[TextBox, ...]
    """Every text drawn, in drawing order."""
    axes: tuple[AxesText, ...]
    """Every visible axes, in the figure's order."""

    def overlaps(self) -> list[tuple[TextBox, TextBox]]:
        """The pairs of :attr:`texts` that overlap."""
        return overlapping(self.texts)


def overlapping(texts: Sequence[TextBox], slack: float = OVERLAP_SLACK
                ) -> list[tuple[TextBox, TextBox]]:
    """The pairs of *texts* whose boxes share more than *slack* pixels each way."""
    return [(a, b) for a, b in itertools.combinations(texts, 2) if a.overlaps(b, slack)]


def _line_box(renderer: Any, x: float, y: float, s: str, prop: Any, angle: float,
              ismath: Any) -> tuple[float, float, float, float]:
    """The box of one line of text drawn from baseline point (*x*, *y*) (pixels from the top
    left), turned by *angle* degrees."""
    w, h, d = renderer.get_text_width_height_descent(s, prop, ismath)
    a = math.radians(angle)
    corners = [(u, v) for u in (0.0, w) for v in (-d, h - d)]
    xs = [x + u * math.cos(a) - v * math.sin(a) for u, v in corners]
    ys = [y - (u * math.sin(a) + v * math.cos(a)) for u, v in corners]
    return min(xs), min(ys), max(xs), max(ys)


def _recording_renderer(width: int, height: int, dpi: float) -> Any:
    """An Agg renderer that keeps what each ``draw_text`` drew."""
    from matplotlib.backends.backend_agg import RendererAgg

    # Matplotlib's Agg renderer has no annotations (the two calls into it are untyped).
    class Recording(RendererAgg):
        def __init__(self) -> None:
            super().__init__(width, height, dpi)  # type: ignore[no-untyped-call]
            self.artists: dict[int, Any] = {}
            self.lines: list[tuple[int | None, TextBox]] = []

        def draw_text(self, gc: Any, x: float, y: float, s: str, prop: Any, angle: float,
                      ismath: Any = False, mtext: Any = None) -> None:
            # A text of one line comes with its artist (boxed below from its own extent);
            # a line of a longer one without, and is boxed from what drew it.
            if mtext is not None:
                self.artists[id(mtext)] = mtext
                self.lines.append((id(mtext), TextBox(s, (0.0, 0.0, 0.0, 0.0))))  # see below
            else:
                self.lines.append((None, TextBox(s, _line_box(self, x, y, s, prop, angle,
                                                              ismath))))
            super().draw_text(  # type: ignore[no-untyped-call]
                gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    return Recording()


def _label(axis: Any, drawn: dict[int, Any]) -> str:
    return str(axis.label.get_text()) if id(axis.label) in drawn else ""


def _ticks(axis: Any, drawn: dict[int, Any]) -> tuple[str, ...]:
    labels = [*axis.get_ticklabels(), *axis.get_ticklabels(minor=True)]
    return tuple(t.get_text() for t in labels if id(t) in drawn and t.get_text())


def draw_png(fig: Any) -> Drawn:
    """Draw matplotlib figure *fig* once: the PNG, every text drawn with its box, and each
    visible axes' labels, scales and drawn tick labels."""
    import numpy as np
    from PIL import Image  # matplotlib's own dependency

    width, height = (round(v) for v in fig.bbox.size)
    renderer = _recording_renderer(width, height, fig.dpi)
    fig.draw(renderer)
    texts = []
    for artist_id, line in renderer.lines:
        if artist_id is None:
            texts.append(line)
            continue
        extent = renderer.artists[artist_id].get_window_extent(renderer)
        texts.append(TextBox(line.text, (extent.x0, height - extent.y1,
                                         extent.x1, height - extent.y0)))
    axes = tuple(
        AxesText(str(ax.get_label()), _label(ax.xaxis, renderer.artists),
                 _label(ax.yaxis, renderer.artists), ax.get_xscale(), ax.get_yscale(),
                 _ticks(ax.xaxis, renderer.artists), _ticks(ax.yaxis, renderer.artists))
        for ax in fig.axes if ax.get_visible() and ax.axison
    )
    # 256 colours: a plot of thousands of translucent lines compresses to half or less and
    # looks the same (median cut keeps white white, and the colour bars' steps fine).
    image = Image.fromarray(np.asarray(renderer.buffer_rgba())).convert("RGB").quantize(
        256, method=Image.Quantize.MEDIANCUT)
    buffer = io.BytesIO()
    image.save(buffer, format="png", dpi=(fig.dpi, fig.dpi))
    return Drawn(buffer.getvalue(), width, height, tuple(texts), axes)
