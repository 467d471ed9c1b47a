"""A workload with a schedule to discover, and the dse trial that runs one member of it.

The ``schedule`` workload of ``early_stopping.py`` (population based training: dse's ``pbt``
rule against Ray Tune's PBT). One param, the learning rate ``lr`` (log-uniform on
``[LR_LOW, LR_HIGH]``). The value after each step is the expected loss of SGD on a
one-dimensional quadratic with noisy gradients: ``x <- x - lr (x + noise)``, ``E[noise^2] =
NOISE``, loss ``E[x^2]`` starting at ``INITIAL``. One step is ``INNER`` such updates at the
step's ``lr``, in closed form::

    a = (1 - lr)^2
    loss <- a^INNER * loss + lr^2 * NOISE * (1 + a + ... + a^(INNER - 1))

So the state carried from step to step (the checkpoint) is the step and the loss, the curve is
deterministic (an attempt resumed from a checkpoint goes on exactly where the interrupted one
was) and a step costs nothing but its ``--step-ms`` of sleep. A fixed ``lr`` converges at a rate
about ``2 lr`` per update to a noise floor about ``lr NOISE / 2``: a large ``lr`` gets down fast
and stays high, a small one would end low but gets there too slowly. No fixed ``lr`` reaches the
best loss at ``max_step``; a decaying one does.

The constants (``INITIAL = 1``, ``NOISE = 0.1``, ``INNER = 5``, ``lr`` in ``[1e-3, 1]``), at
``max_step = 40``:

* **best achievable** (:func:`best_achievable`): 5.06e-4, the loss of the optimal schedule
  that sets ``lr`` at each step (0.41 at the first step, 0.025 at step 9, 0.0051 at step 40).
  The map from a loss to the next is increasing in the loss for any ``lr``, so choosing at each
  step the ``lr`` that minimises the next loss (the greedy schedule) is optimal: a lower loss now
  is never worse later.
* **best fixed lr** (:func:`best_fixed`): 1.25e-3 (2.47 times the best), at ``lr = 0.022``;
  a schedule allowed to change ``lr`` only every 4 steps (what PBT with ``interval = 4`` can
  express) ends at 5.3e-4 (1.05 times).
* **target**: a loss at most ``TARGET_FACTOR`` (1.75) times the best achievable at
  ``max_step`` (regret at most 0.75 times the best): no fixed ``lr`` reaches it (the best is
  41 % above it), a schedule does. PBT (8 members, interval 4, quantile 0.25, factors 0.8 and
  1.2, resample probability 0.25), simulated in lockstep in process over 200 seeds of 8
  log-uniform initial rates, ends within it in 77 % of the seeds (1.5 times: 58 %; 2 times:
  85 %): its perturbations change ``lr`` by at most a factor 1.25 per judgement, and the
  schedule spans a factor 81. Sometimes the population's rates end too high or too low.
  On real processes, asynchronously (members judged at different steps, copies starting
  late), both PBTs reached it in a third to a half of the seeds (``early_stopping.py``, two
  runs of 10 seeds at load 10-17: dse's ``pbt`` in 5 and 4, Ray Tune's in 4 and 3; their
  median final losses 1.71 and 1.89 times the best for dse, 1.92 and 2.20 for Ray).

With more updates per step or less noise the gap between fixed and decaying rates widens
(``INNER = 10``, ``NOISE = 0.01``: 3.2 times) but PBT follows the schedule less often; with
fewer, it narrows (``INNER = 1``, ``NOISE = 1``: 1.5 times).

As a trial (``python _es_schedule.py MAX_STEP STEP_SECONDS``): reads its ``lr`` from
``dse.trial.params()``, resumes from the step and loss in its checkpoint (``state.json`` in
``DSE_CHECKPOINT_DIR``) if there is one (a promotion, a retry, or a PBT child started from a
copy of its donor's checkpoint), then for each step sleeps ``STEP_SECONDS`` (the step's work),
saves the checkpoint completely (a temporary name renamed into place), tells dse
(``dse.trial.checkpointed()``) and only then reports the step's loss; after ``MAX_STEP`` it
writes the result. Only the standard library and ``dse.trial``: no numpy to import.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

INITIAL = 1.0
"""The loss before the first step."""
NOISE = 0.1
"""The variance of a gradient's noise."""
INNER = 5
"""SGD updates per step."""
LR_LOW, LR_HIGH = 1e-3, 1.0
SPACE = {"lr": {"type": "float", "low": LR_LOW, "high": LR_HIGH, "log": True}}
DIVERGED = 1e3
"""The loss reported once the state passes it (an ``lr`` of 2 or more diverges; the space
stops at 1, but Ray Tune's perturbations are not bounded by it)."""
TARGET_FACTOR = 1.75
"""The target: a loss at ``max_step`` at most this many times the best achievable."""
CHECKPOINT = "state.json"


def step(loss: float, lr: float) -> float:
    """The loss after one more step (``INNER`` SGD updates at *lr*) from *loss*."""
    if loss >= DIVERGED:
        return DIVERGED
    a = (1.0 - lr) ** 2
    series = float(INNER) if abs(1.0 - a) < 1e-12 else (1.0 - a ** INNER) / (1.0 - a)
    return min(a ** INNER * loss + lr * lr * NOISE * series, DIVERGED)


def run(lrs: list[float] | tuple[float, ...], loss: float = INITIAL) -> float:
    """The loss after one step at each of *lrs* in turn, from *loss*."""
    for lr in lrs:
        loss = step(loss, lr)
    return loss


def _argmin(f: Any, low: float, high: float, points: int = 400) -> float:
    """The minimiser of *f* over log-spaced ``[low, high]``: a grid, then golden sections
    of the log around the grid's best."""
    logs = [math.log(low) + (math.log(high) - math.log(low)) * i / (points - 1)
            for i in range(points)]
    best = min(range(points), key=lambda i: f(math.exp(logs[i])))
    a, b = logs[max(best - 1, 0)], logs[min(best + 1, points - 1)]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(60):
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        if f(math.exp(c)) <= f(math.exp(d)):
            b = d
        else:
            a = c
    return math.exp((a + b) / 2.0)


@functools.cache
def optimal_schedule(max_step: int, every: int = 1) -> tuple[float, ...]:
    """The best schedule that sets ``lr`` every *every* steps, one rate per step: greedy, which
    is optimal because a step's loss is increasing in the loss before it for any ``lr``."""
    out: list[float] = []
    loss = INITIAL
    while len(out) < max_step:
        n = min(every, max_step - len(out))
        lr = _argmin(lambda r, loss=loss, n=n: run([r] * n, loss), 1e-5, 1.99)
        out += [lr] * n
        loss = run([lr] * n, loss)
    return tuple(out)


@functools.cache
def best_achievable(max_step: int) -> float:
    """The least loss at *max_step* of any schedule (one ``lr`` per step)."""
    return run(optimal_schedule(max_step))


@functools.cache
def best_fixed(max_step: int) -> tuple[float, float]:
    """The least loss at *max_step* of a fixed ``lr`` in the space, and that ``lr``."""
    lr = _argmin(lambda r: run([r] * max_step), LR_LOW, LR_HIGH)
    return run([lr] * max_step), lr


def target_loss(max_step: int) -> float:
    """The loss at *max_step* a run must reach: ``TARGET_FACTOR`` times the best achievable."""
    return TARGET_FACTOR * best_achievable(max_step)


def load(directory: Path) -> tuple[int, float]:
    """The step and loss a checkpoint in *directory* saved; ``(0, INITIAL)`` without one."""
    path = directory / CHECKPOINT
    if not path.exists():
        return 0, INITIAL
    with open(path, encoding="utf-8") as handle:
        saved = json.load(handle)
    return int(saved["step"]), float(saved["loss"])


def save(directory: Path, at: int, loss: float) -> None:
    """Save the step and the loss in *directory*, completely: a temporary name renamed into
    place (``repr`` round-trips a float, so a resumed run goes on exactly)."""
    tmp = directory / f"{CHECKPOINT}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"step": at, "loss": loss}, handle)
    os.replace(tmp, directory / CHECKPOINT)


def main(argv: list[str]) -> int:
    import dse.trial

    max_step, step_seconds = int(argv[0]), float(argv[1])
    lr = float(dse.trial.params()["lr"])
    directory = dse.trial.checkpoint_dir()
    at, loss = load(directory)
    while at < max_step:
        time.sleep(step_seconds)
        at, loss = at + 1, step(loss, lr)
        save(directory, at, loss)  # the checkpoint of a step is saved before it is reported
        dse.trial.checkpointed()
        dse.trial.report_progress(at, {"loss": loss})
    dse.trial.report({"loss": loss}, steps=at)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
