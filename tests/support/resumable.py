"""The workload of the early-stopping tests on real processes (local and Slurm): trial ``x``
reports ``a + c / step`` for steps 1 to 9 (``x = 3`` starts badly and ends best: 1 + 3/step;
every other ``x``: x + 1/step), saving its checkpoint for each step before it reports it,
resuming from its checkpoint, and logging each step it runs to ``steps.log`` (so a test can
tell that no step ran twice)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

_WORKLOAD = """\
import json, os, time, dse.trial
x = dse.trial.params()["x"]
a, c = {3: (1.0, 3.0)}.get(x, (x, 1.0))  # x=3 starts badly and ends best
state = dse.trial.checkpoint_dir() / "state.json"
start = json.loads(state.read_text())["step"] if state.exists() else 0
log = dse.trial.trial_dir() / "steps.log"
for step in range(start + 1, 10):
    time.sleep(float(os.environ.get("STEP_S", "STEP_S_DEFAULT")))
    with open(log, "a") as f:
        f.write(f"{dse.trial.attempt()} {step}\\n")
    tmp = state.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, state)
    dse.trial.checkpointed()
    dse.trial.report_progress(step, {"loss": a + c / step})
dse.trial.report({"loss": a + c / 9})
"""


def resumable_workload(step_s: float) -> str:
    """The workload's Python source, sleeping *step_s* seconds a step (``$STEP_S``, when set,
    instead)."""
    return _WORKLOAD.replace("STEP_S_DEFAULT", repr(float(step_s)))


def steps_run(trial_dir: Path) -> list[tuple[int, int]]:
    """The ``(attempt, step)`` of every step the workload ran in *trial_dir*, in order."""
    lines = (trial_dir / "steps.log").read_text().splitlines()
    return [(int(a), int(s)) for a, s in (line.split() for line in lines)]
