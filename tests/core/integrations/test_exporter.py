"""The copier that writes a campaign's trials to its integrations ([integrations]), on real
``dse run`` processes and a real record, through a small integration of the tests' own
(support.ledger: one JSON line a trial). The real MLflow, TensorBoard and W&B are tested in
tests/integrations; this is the part every integration shares: each ended trial written once,
with its curve, however often the controller is killed; one failing integration stops only
itself; a bad table is refused before anything is written."""

from __future__ import annotations

import functools
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dse
from support.ledger import read_ledger
from support.record import ended_trials
from support.waiting import wait_until

TESTS = Path(__file__).resolve().parents[2]

SCRIPT = """\
from dse.testing import ProbePoint, ProbeScript

def curve(params):
    x = params["x"]
    points = tuple(ProbePoint(at=0.01 * s, step=s, metrics={"loss": x + 1.0 / s})
                   for s in (1, 2, 3))
    return ProbeScript(seconds=SECONDS, metrics={"loss": x + 1.0 / 3}, progress=points)
"""

AGENT = """\
import random

class Draw:
    # Seeded draws from the space: dse-core alone (the isolation session) has no agent.
    exhausted = False

    def __init__(self, space, seed=0):
        self.space, self.rng = space, random.Random(seed)

    def propose(self, n, in_flight):
        return [self.space.sample(self.rng) for _ in range(n)]

    def observe(self, observations):
        pass
"""

CAMPAIGN = """\
[campaign]
name = "ex"
agent = "draw_agent:Draw"
backend = "probe"
max_parallelism = 4
max_trials = {trials}
mode = "rolling"
poll_interval = "5ms"

[backend.probe]
script = "probe_curve:curve"
write_results = true

[[objectives]]
metric = "loss"

[space]
x = {{ type = "float", low = 0, high = 1 }}
opt = ["sgd", "adam"]

[integrations.ledger]
"""


def _project(tmp_path: Path, trials: int, seconds: float = 0.05) -> Path:
    (tmp_path / "probe_curve.py").write_text(SCRIPT.replace("SECONDS", repr(seconds)))
    (tmp_path / "draw_agent.py").write_text(AGENT)
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(trials=trials))
    return tmp_path


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(tmp_path), str(TESTS), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, DSE_PLUGINS="support.ledger", **extra)


def _dse(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dse", *args], cwd=tmp_path,
                          env=_env(tmp_path, **extra), capture_output=True, text=True,
                          timeout=300)


def _check_once(tmp_path: Path) -> list[dict[str, Any]]:
    """Every ended trial of the record is in the ledger once, with its whole curve."""
    ledger = read_ledger(tmp_path / ".dse" / "ledger.jsonl")
    names = [line["name"] for line in ledger]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert len({line["key"] for line in ledger}) == len(ledger)
    ended = ended_trials(tmp_path / ".dse")
    assert set(names) == set(ended)
    for line in ledger:
        assert (line["status"], [step for step, _ in line["curve"]]) == ended[line["name"]]
    return ledger


def test_every_ended_trial_is_written_once_with_its_curve(tmp_path: Path) -> None:
    _project(tmp_path, trials=12)
    done = _dse(tmp_path, "run", "c.toml")
    assert done.returncode == 0, done.stderr
    ledger = _check_once(tmp_path)
    assert len(ledger) == 12
    line = ledger[0]
    assert set(line["params"]) == {"x", "opt"}
    assert line["curve"][0][1]["loss"] == pytest.approx(line["params"]["x"] + 1.0)
    assert line["metrics"]["loss"] == pytest.approx(line["params"]["x"] + 1.0 / 3)
    # A second run of the campaign reuses the first's results: its cache hits are written
    # too, naming the trial whose result they reuse; the first run's are not written again.
    again = _dse(tmp_path, "run", "c.toml")  # the same seed: the same configs, all reused
    assert again.returncode == 0, again.stderr
    ledger = _check_once(tmp_path)
    hits = [line for line in ledger if line["status"] == "cached"]
    assert len(hits) == 12
    assert {line["cache_of"] for line in hits} == {f"ex-1-{n}" for n in range(1, 13)}


def _written_or_ended(ledger: Path, floor: int, controller: subprocess.Popen[bytes]) -> bool:
    return len(read_ledger(ledger)) >= floor or controller.poll() is not None


def test_a_controller_killed_again_and_again_leaves_each_trial_written_once(
    tmp_path: Path,
) -> None:
    # Each kill finds the run going, trials recorded and not written yet, and often one
    # mid-write; each next controller resumes the run and writes exactly what the ledger
    # lacks.
    _project(tmp_path, trials=40, seconds=0.3)
    env = _env(tmp_path, LEDGER_SLOW_S="0.02")
    ledger = tmp_path / ".dse" / "ledger.jsonl"
    for kills in range(3):
        log = tmp_path / f"controller-{kills}.log"
        with log.open("w") as out:
            controller = subprocess.Popen([sys.executable, "-m", "dse", "run", "c.toml"],
                                          cwd=tmp_path, env=env, stdout=out, stderr=out)
        try:
            floor = 5 + 8 * kills
            wait_until(functools.partial(_written_or_ended, ledger, floor, controller), 120,
                       f"{floor} trials written")
            assert controller.poll() is None, log.read_text()
        finally:
            controller.send_signal(signal.SIGKILL)
            controller.wait()
        # What was written is never written twice (the killed writer's half line removed
        # by the next controller's open).
        names = [line["name"] for line in read_ledger(ledger)]
        assert len(names) == len(set(names))
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    ledger_lines = _check_once(tmp_path)
    assert len({line["pid"] for line in ledger_lines}) >= 2  # written by several controllers
    runs = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite").execute(
        "SELECT status FROM campaigns").fetchall()
    assert runs == [("completed",)]  # one run, resumed by each controller


def test_a_failing_integration_is_said_once_and_the_run_goes_on(tmp_path: Path) -> None:
    _project(tmp_path, trials=6)
    failed = _dse(tmp_path, "run", "c.toml", LEDGER_FAIL="1")
    assert failed.returncode == 0, failed.stderr
    said = [line for line in failed.stderr.splitlines() if "integrations.ledger" in line]
    assert len(said) == 1, failed.stderr
    assert "ConnectionError: the ledger's server is down" in said[0]
    assert "`dse sync` (or the campaign's next `dse run`) writes what it lacks" in said[0]
    assert read_ledger(tmp_path / ".dse" / "ledger.jsonl") == []
    # `dse sync` writes what it lacks, once; again, nothing.
    synced = _dse(tmp_path, "sync", "c.toml")
    assert synced.returncode == 0, synced.stderr
    assert "6 trial(s) of ex written to ledger" in synced.stdout + synced.stderr
    _check_once(tmp_path)
    again = _dse(tmp_path, "sync", "c.toml")
    assert "0 trial(s)" in again.stdout + again.stderr
    down = _dse(tmp_path, "sync", "c.toml", LEDGER_FAIL="1")
    assert down.returncode == 0  # nothing lacking: nothing tried
    (tmp_path / ".dse" / "ledger.jsonl").unlink()
    down = _dse(tmp_path, "sync", "c.toml", LEDGER_FAIL="1")
    assert down.returncode == 3, down.stderr
    assert "integrations.ledger: ConnectionError" in down.stderr


@pytest.mark.parametrize(("table", "said"), [
    ("[integrations.ledgr]", "integrations.ledgr: unknown integration 'ledgr'"),
    ("[integrations.ledger]\nfile = 3\nbogus = 1", "integrations.ledger: bad option(s)"),
    ("[integrations]\nledger = 3", "integrations.ledger: expected a table of options or true"),
])
def test_a_bad_integrations_table_is_one_line_and_nothing_is_written(
    tmp_path: Path, table: str, said: str,
) -> None:
    _project(tmp_path, trials=3)
    text = (tmp_path / "c.toml").read_text().replace("[integrations.ledger]\n", table + "\n")
    (tmp_path / "c.toml").write_text(text)
    refused = _dse(tmp_path, "run", "c.toml")
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert said in lines[0]
    assert "c.toml" in lines[0]
    assert not (tmp_path / ".dse").exists()


def test_a_missing_library_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    from dse.integrations._exporter import build_targets

    campaign = dse.campaign_from_dict({
        "campaign": {"name": "m", "backend": "probe"}, "objectives": [{"metric": "loss"}],
        "space": {"x": [1, 2]}, "integrations": {"mlflow": {"experiment": "e"}}})
    with pytest.raises(dse.ConfigError) as caught:
        build_targets(campaign, dse.PluginManager().integration_class)
    assert str(caught.value) == (
        "<campaign>: integrations.mlflow: needs the mlflow package, which is not installed"
        " (pip install 'dse-core[mlflow]')")


def test_the_run_records_which_integrations_it_wrote_to(tmp_path: Path) -> None:
    _project(tmp_path, trials=2)
    assert _dse(tmp_path, "run", "c.toml").returncode == 0
    db = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    (spec,) = db.execute("SELECT spec FROM campaigns").fetchone()
    assert '"integrations":["ledger"]' in spec.replace(" ", "")


def test_sync_beside_the_campaigns_controller_is_refused(tmp_path: Path) -> None:
    # The running controller writes its trials itself: a second writer of the same place
    # could take its half-written trial for a killed writer's and remove it.
    # More trials than it can run before the end (about 2 minutes of them; it is killed):
    # with 40 it ended on a loaded machine while `dse sync` was still starting.
    _project(tmp_path, trials=1000, seconds=0.5)
    env = _env(tmp_path)
    controller = subprocess.Popen([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ledger = tmp_path / ".dse" / "ledger.jsonl"
        wait_until(functools.partial(_written_or_ended, ledger, 1, controller), 120,
                   "a trial written")
        assert controller.poll() is None
        refused = _dse(tmp_path, "sync", "c.toml")
        assert refused.returncode != 0
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert f"pid {controller.pid}" in lines[0]
    finally:
        controller.send_signal(signal.SIGKILL)
        controller.wait()


def test_on_a_postgresql_record_a_killed_controller_leaves_each_trial_written_once(
    tmp_path: Path, postgres_url: str,
) -> None:
    # The copier reads the trials back through a reader of its own: the record's server
    # here, not the workspace's file.
    _project(tmp_path, trials=16, seconds=0.3)
    env = _env(tmp_path, LEDGER_SLOW_S="0.02", DSE_RECORD=postgres_url)
    ledger = tmp_path / ".dse" / "ledger.jsonl"
    log = tmp_path / "controller.log"
    with log.open("w") as out:
        controller = subprocess.Popen([sys.executable, "-m", "dse", "run", "c.toml"],
                                      cwd=tmp_path, env=env, stdout=out, stderr=out)
    try:
        wait_until(functools.partial(_written_or_ended, ledger, 4, controller), 120,
                   "4 trials written")
        assert controller.poll() is None, log.read_text()
    finally:
        controller.send_signal(signal.SIGKILL)
        controller.wait()
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    names = [line["name"] for line in read_ledger(ledger)]
    assert len(names) == len(set(names))
    ended = ended_trials(tmp_path / ".dse", postgres_url)
    assert set(names) == set(ended)
    assert len(ended) == 16
