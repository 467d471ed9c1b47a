"""A rerun is the same campaign (issue 36, part 6): `dse run` of the same campaign file again,
on real local processes, proposes what the first run proposed and answers every configuration
from the record; with ``--set max_trials`` raised by five it reuses every one of them first.

Each of dse-agents' agents, at one trial at a time (waves and rolling) and in waves of three
(eight trials: the last wave of the first run is two, which the longer run asks for as
three). A rolling campaign running several trials at once learns results in the order the
trials finish, which the machine's timing decides, so its trajectory is not promised to
repeat (docs/agents.md).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import dse
from support.cli import run_dse, write_plugin

AGENTS = ("ax", "bayesian", "grid", "optuna", "random")
TRIALS = 8

TRIAL = r"""
import json, math, os
with open(os.environ["DSE_PARAMS_FILE"], encoding="utf-8") as handle:
    p = json.load(handle)
loss = ((p["x"] - 0.7) ** 2 + 0.1 * (p["y"] - 3) ** 2
        + {"a": 0.0, "b": 0.5, "c": 1.0}[p["kind"]] + 0.05 * math.sin(5 * p["x"]))
out = os.path.join(os.environ["DSE_TRIAL_DIR"], "result.json")
with open(out + ".tmp", "w", encoding="utf-8") as handle:
    json.dump({"complete": True, "metrics": {"loss": loss}}, handle)
os.replace(out + ".tmp", out)
"""

CAMPAIGN = """
[campaign]
name = "rerun"
agent = "{agent}"
backend = "local"
mode = "{mode}"
max_parallelism = {parallelism}
max_trials = {trials}
seed = 0

[environment]
command = ["python", "-S", "trial.py"]
time_limit = "2m"

[[objectives]]
metric = "loss"
direction = "minimize"

[space]
x = {{ type = "float", low = -2.0, high = 2.0 }}
y = {{ type = "int", low = 1, high = 8 }}
kind = ["a", "b", "c"]

[agent.bayesian]
initial = 3        # the model proposes five of the eight
candidates = 256
"""

AX = """
[agent.ax]
initialization_budget = 10   # the model proposes the longer run's last three (a fit each)
"""


def campaign(tmp_path: Path, agent: str, mode: str, parallelism: int) -> Path:
    write_plugin(tmp_path)  # the tests' plugin module, which every `dse` here loads
    (tmp_path / "trial.py").write_text(TRIAL)
    text = CAMPAIGN.format(agent=agent, mode=mode, parallelism=parallelism, trials=TRIALS)
    if agent != "bayesian":
        text = text[: text.index("[agent.bayesian]")] + (AX if agent == "ax" else "")
    (tmp_path / "campaign.toml").write_text(text)
    return tmp_path


def run_ok(project: Path, *args: str) -> None:
    proc = run_dse(project, "run", "campaign.toml", *args, timeout=300)
    assert proc.returncode == 0, proc.stderr


def runs(project: Path) -> list[list[tuple[str, str]]]:
    """Each run's proposals, in order: (config hash, status)."""
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        rows = db.execute("SELECT campaign_id, config_hash, status FROM trials"
                          " WHERE proposal > 0 ORDER BY campaign_id, proposal").fetchall()
    finally:
        db.close()
    out: dict[int, list[tuple[str, str]]] = {}
    for run, digest, status in rows:
        out.setdefault(run, []).append((digest, status))
    return [out[run] for run in sorted(out)]


SETTINGS = {"waves-P1": ("waves", 1), "rolling-P1": ("rolling", 1), "waves-P3": ("waves", 3)}
CASES = [pytest.param(agent, *SETTINGS[setting], id=f"{setting}-{agent}")
         for agent in AGENTS for setting in SETTINGS
         # Ax's process imports torch and fits a model a proposal: one setting, the batch one
         # (the engine's side of the rerun is the same for every agent).
         if agent != "ax" or setting == "waves-P3"]


@pytest.mark.parametrize(("agent", "mode", "parallelism"), CASES)
def test_a_rerun_answers_every_proposal_from_the_record_and_a_longer_one_begins_with_it(
    tmp_path: Path, agent: str, mode: str, parallelism: int,
) -> None:
    project = campaign(tmp_path, agent, mode, parallelism)
    run_ok(project)
    run_ok(project)
    run_ok(project, "--set", f"max_trials={TRIALS + 5}")

    first, again, longer = runs(project)
    configs = [digest for digest, _ in first]
    assert [status for _, status in first] == ["completed"] * TRIALS
    assert [digest for digest, _ in again] == configs
    assert [status for _, status in again] == ["cached"] * TRIALS
    assert [digest for digest, _ in longer[:TRIALS]] == configs
    assert [status for _, status in longer] == ["cached"] * TRIALS + ["completed"] * 5


def test_every_agent_of_dse_agents_is_tested() -> None:
    registered = dse.PluginManager(autoload=True).agents
    assert sorted(name for name, info in registered.items()
                  if info.distribution == "dse-agents") == sorted(AGENTS)
