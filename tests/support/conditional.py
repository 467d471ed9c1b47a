"""A conditional space of two levels (issue 42): the optimizer and its own params (``momentum``
for SGD, ``beta2`` for Adam), the number of layers and a width per layer — and a loss over
it whose best point is known. The model, agent and local-backend tests share it; the
Bayesian agent's imputation of inactive columns (``dse_agents._encoding.INACTIVE``) was
chosen on it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

SPACE: dict[str, Any] = {
    "optimizer": ["sgd", "adam"],
    "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
    "beta2": {"type": "float", "low": 0.9, "high": 0.999, "when": {"optimizer": "adam"}},
    "layers": {"type": "int", "low": 1, "high": 3},
    "width_1": {"type": "int", "low": 16, "high": 256, "log": True},
    "width_2": {"type": "int", "low": 16, "high": 256, "log": True, "when": {"layers": [2, 3]}},
    "width_3": {"type": "int", "low": 16, "high": 256, "log": True, "when": {"layers": 3}},
}
"""The space as a ``[space]`` table (continuous: for the Bayesian and random agents)."""

SMALL_SPACE_TOML = """\
[space]
optimizer = ["sgd", "adam"]
momentum = { type = "float", low = 0.0, high = 0.9, step = 0.9, when = { optimizer = "sgd" } }
beta2 = { type = "categorical", choices = [0.95], when = { optimizer = "adam" } }
layers = { type = "int", low = 1, high = 3 }
width_1 = [16, 64]
width_2 = { type = "int", low = 32, high = 64, step = 32, when = { layers = [2, 3] } }
width_3 = { type = "categorical", choices = [8], when = { layers = 3 } }
"""
"""A finite version for a grid: SGD with 2 momenta or Adam with one beta2, times 2 (one
layer), 4 (two) or 4 (three) widths: 30 points."""

SMALL_POINTS = (2 + 1) * (2 + 4 + 4)
"""The points of :data:`SMALL_SPACE_TOML`."""

BEST = 0.0
"""The loss of the best point: Adam at ``beta2 = 0.95``, two layers of 128 and 32."""


def loss(params: Mapping[str, Any]) -> float:
    """The loss of *params* (their active parameters: a missing one raises ``KeyError``)."""
    if params["optimizer"] == "sgd":
        value = 0.3 + 4 * (params["momentum"] - 0.9) ** 2
    else:
        value = 50 * (params["beta2"] - 0.95) ** 2
    targets = {1: [6.0], 2: [7.0, 5.0], 3: [7.5, 6.0, 4.5]}[params["layers"]]
    value += {1: 0.5, 2: 0.0, 3: 0.2}[params["layers"]]
    for layer, target in enumerate(targets, 1):
        value += 0.05 * (math.log2(params[f"width_{layer}"]) - target) ** 2
    return value


def expected_active(params: Mapping[str, Any]) -> set[str]:
    """The names a point of this space holds, from its optimizer and layers."""
    names = {"optimizer", "layers", "width_1"}
    names.add("momentum" if params["optimizer"] == "sgd" else "beta2")
    names.update(f"width_{layer}" for layer in range(2, params["layers"] + 1))
    return names
