"""The landscape tests' function: four params of which two matter (x most, best at 7; then
lr, best at 0.01), and seeded random points of its space."""

from __future__ import annotations

import math
import random
from typing import Any

import dse

SPACE = {
    "x": {"type": "int", "low": 0, "high": 15},
    "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "layout": ["row", "col", "tile"],
    "noise": {"type": "float", "low": 0.0, "high": 1.0},
}


def loss(p: dict[str, Any]) -> float:
    """x matters most (best at 7), then lr (best at 0.01); layout and noise do not."""
    return (p["x"] - 7) ** 2 + 20 * abs(math.log10(p["lr"]) + 2)


def points(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """*count* points of :data:`SPACE`, sampled with *seed*."""
    space = dse.Space.from_dict(SPACE)
    rng = random.Random(seed)
    return [space.sample(rng) for _ in range(count)]
