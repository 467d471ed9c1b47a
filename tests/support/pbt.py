"""The workload of the population-based training tests on real processes (local and Slurm):
the expected loss of SGD on a quadratic with learning rate ``lr`` (``loss <- (1 - lr)^2 loss +
lr^2 / 2`` from 1.0: a large rate falls fast to a high floor, a small one slowly to a low
one), one step per ``$STEP_S`` seconds to ``MAX_STEP``.

Its checkpoint (``state.json``, saved before each step is reported, as the contract asks)
holds the step, the loss and the **history**: ``[trial id, step, lr]`` of every step the
lineage ran, the parent's steps first — so a test reads from a trial's checkpoint which
trial ran each step of its lineage, and that none ran twice. Each step run is also logged to
the trial's ``steps.log`` (``attempt step``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

MAX_STEP = 12

_WORKLOAD = """\
import json, os, time, dse.trial
lr = dse.trial.params()["lr"]
state = dse.trial.checkpoint_dir() / "state.json"
if state.exists():
    saved = json.loads(state.read_text())
else:
    saved = {"step": 0, "loss": 1.0, "history": []}
log = dse.trial.trial_dir() / "steps.log"
step, loss, history = saved["step"], saved["loss"], saved["history"]
while step < MAX_STEP:
    time.sleep(float(os.environ.get("STEP_S", "0.1")))
    step, loss = step + 1, (1 - lr) ** 2 * loss + lr ** 2 / 2
    history.append([dse.trial.trial_id(), step, lr])
    with open(log, "a") as f:
        f.write(f"{dse.trial.attempt()} {step}\\n")
    tmp = state.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step, "loss": loss, "history": history}))
    os.replace(tmp, state)
    dse.trial.checkpointed()
    dse.trial.report_progress(step, {"loss": loss})
dse.trial.report({"loss": loss})
""".replace("MAX_STEP", str(MAX_STEP))

CAMPAIGN = """
[campaign]
name = "{name}"
agent = "random"
seed = 3
backend = "{backend}"
max_parallelism = {parallel}
mode = "rolling"
poll_interval = ["10ms", "40ms"]
{extra_campaign}
[[objectives]]
metric = "loss"

[environment]
command = ["{python}", "{workload}"]
time_limit = "120s"
{extra_environment}
[space]
lr = {{ type = "float", low = 0.02, high = 0.9, log = true }}

[stopping]
rule = "pbt"
max_step = {max_step}

[stopping.pbt]
population = {population}
interval = 3
quantile = 0.25
seed = 1
"""


def pbt_workload() -> str:
    """The workload's Python source."""
    return _WORKLOAD


def checkpoint_history(trial_dir: Path) -> list[tuple[str, int, float]]:
    """The ``(trial id, step, lr)`` of every step of the lineage whose checkpoint is in
    *trial_dir*, in order (empty: no checkpoint)."""
    state = trial_dir / "checkpoint" / "state.json"
    if not state.exists():
        return []
    saved: dict[str, Any] = json.loads(state.read_text())
    return [(str(t), int(s), float(lr)) for t, s, lr in saved["history"]]


def steps_run(trial_dir: Path) -> list[tuple[int, int]]:
    """The ``(attempt, step)`` of every step the workload ran in *trial_dir*, in order."""
    path = trial_dir / "steps.log"
    if not path.exists():
        return []
    return [(int(a), int(s)) for a, s in (line.split() for line in path.read_text().splitlines())]
