"""A synthetic family of learning curves, and the dse trial that walks one of them.

The family (``early_stopping.py`` runs it): a config is two numbers ``u``, ``v`` in [0, 1];
its loss after ``t`` steps is ``a + (L0 - a) / (1 + r t)`` with a learning rate
``r = 0.02 e^(5.5 u)`` (0.02 to 4.9 per step) and a plateau ``a = 0.1 + 0.5 (v - 0.55)^2 +
0.05 u^2``: a config that learns fast plateaus higher, so curves cross and the early ranking is
imperfect. How much they cross (``FAST_PLATEAU``) was set to resemble the mlp's curves: over
samples of 81 configs, the config best at step 81 is, in the median, at rank fraction 0.14 at
step 1, 0.10 at step 3, 0.06 at step 9 (the mlp's best at epoch 27 of 27: 0.04 at epoch 1,
0.15 at 3, 0 at 9). With 0.15 instead, the best config at step 81 is at rank fraction 0.32 at
steps 1 and 3, and successive halving (dse's asha, Optuna's pruner) found it in none of 10
seeds. Each observed point carries Gaussian noise (sd ``NOISE_SD``) drawn from a generator
seeded by the config and the step, so a config's curve is the same in every method and every
attempt.

As a trial (``python _es_curve.py MAX_STEP STEP_SECONDS``): resumes from the step in its
checkpoint (``state.json`` in ``DSE_CHECKPOINT_DIR``) if there is one, then for each step sleeps
``STEP_SECONDS`` (the step's work), saves the checkpoint for the step, and only then reports
the step's loss (``dse.trial.report_progress``); after ``MAX_STEP`` it writes the result. Only
the standard library and ``dse.trial``: no numpy to import at each start.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from typing import Any

L0 = 2.3
NOISE_SD = 0.004
FAST_PLATEAU = 0.05
"""How much higher a fast learner plateaus: ``a`` grows by ``FAST_PLATEAU * u^2``."""
DECAY = 1.0


def true_loss(u: float, v: float, step: int) -> float:
    """The loss of config (u, v) after *step* steps, without noise."""
    rate = 0.02 * math.exp(5.5 * u)
    plateau = 0.1 + 0.5 * (v - 0.55) ** 2 + FAST_PLATEAU * u * u
    return plateau + (L0 - plateau) / float((1.0 + rate * step) ** DECAY)


def observed_loss(u: float, v: float, step: int) -> float:
    """The loss reported at *step*: :func:`true_loss` plus the config's noise at that step."""
    noise = random.Random(f"{u!r}:{v!r}:{step}").gauss(0.0, NOISE_SD)
    return true_loss(u, v, step) + noise


def _save(path: str, step: int) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"step": step}, handle)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    import dse.trial

    max_step, step_seconds = int(argv[0]), float(argv[1])
    params: dict[str, Any] = dse.trial.params()
    u, v = float(params["u"]), float(params["v"])
    state = str(dse.trial.checkpoint_dir() / "state.json")
    step = 0
    if os.path.exists(state):
        with open(state, encoding="utf-8") as handle:
            step = int(json.load(handle)["step"])
    loss = observed_loss(u, v, step) if step else L0
    while step < max_step:
        time.sleep(step_seconds)
        step += 1
        loss = observed_loss(u, v, step)
        _save(state, step)  # the checkpoint of a step is saved before the step is reported
        dse.trial.checkpointed()
        dse.trial.report_progress(step, {"loss": loss})
    dse.trial.report({"loss": loss}, steps=step)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
