"""A real campaign on local processes writes every trial to MLflow (its file store), TensorBoard
(event files) and W&B (offline files) while its controller is killed with SIGKILL three times
and resumed: each library's own reader then finds every ended trial of the record once, with
its learning curve once (no step logged twice), and nothing else."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import dse
from support.procs import live_pids_mentioning
from support.record import ended_trials
from support.waiting import wait_until
from support.wandb_files import read_run

pytest.importorskip("mlflow")
pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

WORKLOAD = """\
import os, time, dse.trial
p = dse.trial.params()
for step in (1, 2, 3):
    time.sleep(0.15)
    dse.trial.report_progress(step, {"loss": p["x"] + 1.0 / step})
dse.trial.report({"loss": p["x"] + 1.0 / 3, "size": float(len(p["opt"]))})
"""

CAMPAIGN = """\
[campaign]
name = "kill"
agent = "random"
backend = "local"
max_parallelism = 2
max_trials = 14
mode = "rolling"
poll_interval = ["20ms", "100ms"]

[environment]
command = ["{python}", "work.py"]
time_limit = "60s"

[[objectives]]
metric = "loss"

[space]
x = {{ type = "float", low = 0, high = 1 }}
opt = ["sgd", "adam"]

[integrations.mlflow]
tracking_uri = "{mlruns}"

[integrations.tensorboard]
logdir = "tb"

[integrations.wandb]
mode = "offline"
dir = "wb"
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, MLFLOW_ALLOW_FILE_STORE="true", MLFLOW_DISABLE_TELEMETRY="true",
                WANDB_SILENT="true",
                WANDB_MODE="offline", WANDB_DIR=str(tmp_path / "wb"),
                WANDB_CACHE_DIR=str(tmp_path / "wandb-cache"),
                WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"))


def _mlflow(tmp_path: Path) -> dict[str, list[int]]:
    """Each trial MLflow holds (its run's ``dse.trial`` tag), with the steps of its loss."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("kill")
    assert experiment is not None
    held: dict[str, list[int]] = {}
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if "dse.trial" not in r.data.tags]
    assert len(parents) == 1  # one run of the campaign, found again by every controller
    for run in runs:
        name = run.data.tags.get("dse.trial")
        if name is None:
            continue
        assert name not in held, f"{name} twice in MLflow"
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.data.tags.get("dse.written") == "1"
        history = client.get_metric_history(run.info.run_id, "loss")
        held[name] = sorted(m.step for m in history)
    return held


def _tensorboard(tmp_path: Path) -> dict[str, list[int]]:
    """Each trial TensorBoard's event reader finds, with the steps of its loss."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    held: dict[str, list[int]] = {}
    root = tmp_path / "tb" / "kill"
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        files = [f for f in run_dir.iterdir() if "tfevents" in f.name]
        assert len(files) == 1, files  # written whole, once
        assert [f.name for f in run_dir.iterdir()] == [files[0].name]  # nothing half done
        acc = EventAccumulator(str(run_dir))
        acc.Reload()
        assert run_dir.name not in held
        held[run_dir.name] = sorted(e.step for e in acc.Scalars("loss"))
    return held


def _wandb(tmp_path: Path) -> dict[str, list[int]]:
    """Each trial W&B's offline files hold (finished runs), with the steps of its loss."""
    held: dict[str, list[int]] = {}
    for run_dir in sorted((tmp_path / "wb" / "wandb").glob("offline-run-*")):
        run = read_run(run_dir)
        assert run.exit_code is not None, run_dir
        assert run.name not in held, f"{run.name} twice in W&B"
        held[run.name] = sorted(row["_step"] for row in run.history if "loss" in row)
    return held


def _ended_count(tmp_path: Path, floor: int, controller: subprocess.Popen[bytes]) -> bool:
    if controller.poll() is not None:
        return True
    try:
        return len(ended_trials(tmp_path / ".dse")) >= floor
    except dse.StoreError:  # the record not made yet
        return False


def test_three_kills_and_a_resume_leave_every_trial_once_in_each_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # this test reads the file store too
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    (tmp_path / "work.py").write_text(WORKLOAD)
    (tmp_path / "c.toml").write_text(CAMPAIGN.format(
        python=sys.executable, mlruns=(tmp_path / "mlruns").as_uri()))
    env = _env(tmp_path)
    for kills, floor in enumerate((2, 6, 10)):
        log = tmp_path / f"controller-{kills}.log"
        with log.open("w") as out:
            controller = subprocess.Popen([sys.executable, "-m", "dse", "run", "c.toml"],
                                          cwd=tmp_path, env=env, stdout=out, stderr=out)
        try:
            wait_until(functools.partial(_ended_count, tmp_path, floor, controller), 180,
                       f"{floor} trials ended", seen=log.read_text)
            assert controller.poll() is None, log.read_text()
        finally:
            controller.send_signal(signal.SIGKILL)
            controller.wait()
    done = subprocess.run([sys.executable, "-m", "dse", "run", "c.toml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "integrations" not in done.stderr, done.stderr  # nothing failed, nothing left
    ended = {name: status for name, (status, _) in ended_trials(tmp_path / ".dse").items()}
    assert len([s for s in ended.values() if s == "completed"]) >= 14
    completed = {name for name, status in ended.items() if status == "completed"}
    for library, held in (("MLflow", _mlflow(tmp_path)), ("TensorBoard", _tensorboard(tmp_path)),
                          ("W&B", _wandb(tmp_path))):
        assert set(held) == set(ended), library
        for name in completed:  # each step once: a retried trial's curve is its latest
            assert held[name] == [1, 2, 3], (library, name, held[name])
    # No W&B service nor trial is left behind by the killed controllers.
    wait_until(lambda: not live_pids_mentioning(str(tmp_path).encode()), 60,
               "no process left over")
