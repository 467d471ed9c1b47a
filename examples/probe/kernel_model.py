"""A simulated GPU-kernel cost model for the probe backend.

Runtime of a tiled matrix-multiply kernel as a function of tile sizes, layout and unroll
factor: too small a tile wastes memory bandwidth, too large a tile spills registers. Each
trial "runs" for a few polling passes on the probe, longer for bigger tiles.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from dse.testing import ProbeScript

if TYPE_CHECKING:
    from collections.abc import Mapping


def kernel_time(params: Mapping[str, Any]) -> ProbeScript:
    tile_m, tile_n, unroll = params["tile_m"], params["tile_n"], params["unroll"]
    work = 4096.0**3 / (tile_m * tile_n)
    reuse = 1.0 / math.sqrt(tile_m * tile_n)
    spill = max(0.0, tile_m * tile_n * unroll / 4096.0 - 1.0) ** 2
    layout = 1.0 if params["layout"] == "row" else 1.15
    ms = (work * 1e-7 * (1.0 + 8.0 * reuse) + 5.0 * spill) * layout / (1 + 0.1 * unroll)
    passes = int(math.log2(tile_m * tile_n)) // 4
    return ProbeScript(passes=passes, metrics={"time_ms": round(ms, 4)})
