"""The objective ``python_objective.py`` runs through dse and Optuna alike: it sleeps the
trial's ``sleep`` param and returns a quadratic of ``x``. A module of its own, so dse's worker
imports this, not the benchmark (which imports Optuna)."""

from __future__ import annotations

import time
from typing import Any


def objective(params: dict[str, Any]) -> float:
    time.sleep(params["sleep"])
    return float((params["x"] - 0.3) ** 2)
