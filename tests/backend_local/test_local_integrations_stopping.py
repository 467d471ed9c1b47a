"""Integrations beside early stopping, on real processes: a trial stopped at a rung may be
promoted later and run to its end, so it is written once, as it ended — a trial ASHA stopped
and promoted is in the integration completed, with its whole curve; the trials it stopped for
good are written, stopped, when the run ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.ledger import read_ledger
from support.record import ended_trials
from support.resumable import resumable_workload

TESTS = Path(__file__).resolve().parents[1]

CAMPAIGN = """
[campaign]
name = "es"
agent = "grid"
backend = "local"
max_parallelism = 1
mode = "rolling"
poll_interval = ["10ms", "40ms"]

[[objectives]]
metric = "loss"

[environment]
command = ["{python}", "w.py"]
time_limit = "60s"

[space]
x = {{ type = "categorical", choices = [2, 3, 10, 11, 12, 13, 14, 15] }}

[stopping]
rule = "asha"
max_step = 9

[integrations.ledger]
"""


def test_a_promoted_trial_is_written_once_as_it_ended_and_the_stopped_at_the_end(
    tmp_path: Path,
) -> None:
    # As in test_local_stopping: trial 2 (x=3) is stopped at rung 1, promoted once worse
    # trials arrive, and runs to the end the best; trials 3 to 8 stay stopped.
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(python=sys.executable))
    (tmp_path / "w.py").write_text(resumable_workload(0.12))
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=path, DSE_PLUGINS="support.ledger"),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    ended = ended_trials(tmp_path / ".dse")
    assert ended["es-1-2"] == ("completed", list(range(1, 10))), ended
    assert {name for name, (status, _) in ended.items() if status == "stopped"} == {
        f"es-1-{n}" for n in range(3, 9)}
    ledger = read_ledger(tmp_path / ".dse" / "ledger.jsonl")
    written = {line["name"]: (line["status"], [s for s, _ in line["curve"]]) for line in ledger}
    assert len(written) == len(ledger)  # each trial once
    assert written == ended
