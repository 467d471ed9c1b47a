"""The Weights & Biases integration, offline (never the network), read back from the run files
W&B itself would upload (``support.wandb_files``); writers killed by SIGKILL part way leave
nothing ``wandb sync`` would upload nor ``open`` would count, and each trial ends up as
exactly one run; no W&B service process outlives the writer, closed or killed."""

from __future__ import annotations

import importlib.util
import os
import random
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import wandb

from dse import CampaignExport, ConfigError, TrialExport
from dse.integrations._wandb import WandbIntegration, run_id
from dse.plugins._integration import export_key
from support.procs import alive
from support.waiting import wait_until
from support.wandb_files import read_run
from support.writers import Writers, kill

if TYPE_CHECKING:
    from collections.abc import Iterator

PARAMS = (("lr", "float", (1e-4, 1.0)), ("opt", "choice", ("adam", "sgd")))
OBJECTIVES = (("loss", "minimize"),)


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """W&B offline and quiet, its own files in the test's directory; its service ended after
    the test, whatever the test did."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("CONFIG", "CACHE", "DATA"):
        monkeypatch.setenv(f"WANDB_{name}_DIR", str(tmp_path / f"wandb-{name.lower()}"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield
    wandb.teardown()


def campaign(workspace: Path, name: str = "camp") -> CampaignExport:
    return CampaignExport(name=name, workspace=workspace, record="ws/record.sqlite",
                          params=PARAMS, objectives=OBJECTIVES)


def trial(number: int, *, created: float = 1000.0, status: str = "completed",
          steps: int = 3, metrics: dict[str, float] | None = None) -> TrialExport:
    """Trial *number* of run 1 of ``camp`` (recorded at *created*), its curve a falling loss."""
    curve = tuple((s, {"loss": 1.0 / (s + 1)}, created + 10.0 * s) for s in range(steps))
    return TrialExport(
        key=export_key("camp", 1, created, number), name=f"camp-1-{number}", campaign="camp",
        run=1, number=number, config_hash=f"hash{number}",
        params={"lr": 0.01 * (number + 1), "opt": "adam"}, status=status,
        failure="crash" if status == "failed" else None,
        message="exit 3" if status == "failed" else None,
        metrics={"loss": 0.25, "acc": 0.9} if metrics is None else metrics,
        score=None if status == "failed" else 0.25, curve=curve, created_at=created,
        ended_at=created + 100.0, data_version="v1", cache_of=None)


def runs(workspace: Path) -> dict[str, list[Path]]:
    """The published run directories under ``<workspace>/wandb``, by the key they hold."""
    found: dict[str, list[Path]] = {}
    for path in sorted((workspace / "wandb").glob("*run-*")):
        found.setdefault((path / "dse-key.txt").read_text().strip(), []).append(path)
    return found


def cores(pid: int) -> list[int]:
    """The live wandb-core processes serving process *pid* (W&B starts one, with ``--pid``)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if any(part.endswith(b"wandb-core") for part in cmdline[:1]) and \
                str(pid).encode() in cmdline and alive(int(name)):
            found.append(int(name))
    return found


def user_keys(summary: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in summary.items() if not k.startswith("_")}


def test_a_trial_reads_back_whole(tmp_path: Path) -> None:
    """One run per trial: its id from the key, named as the trial, in the campaign's group;
    the params and dse's ids as config; the curve as history at its steps and times, the
    final metrics in the last step's row; metrics, score and outcome as summary; the exit
    code by outcome; nothing left beside the published run."""
    wb = WandbIntegration(tags=["nightly"])
    assert set(wb.open(campaign(tmp_path))) == set()
    done, failed = trial(0), trial(1, status="failed", steps=0, metrics={"loss": 3.0})
    wb.write(done)
    wb.write(failed)
    wb.close()
    published = runs(tmp_path)
    assert set(published) == {done.key, failed.key}
    (path,) = published[done.key]
    assert re.fullmatch(rf"offline-run-\d{{8}}_\d{{6}}-{done.key}", path.name)
    run = read_run(path)
    assert (run.run_id, run.name, run.project, run.group, run.job_type) == (
        done.key, "camp-1-0", "camp", "camp", "trial")
    assert run.tags == ["dse", "completed", "nightly"]
    assert run.config == {"lr": 0.01, "opt": "adam", "dse": {
        "key": done.key, "config_hash": "hash0", "run": 1, "number": 0, "data_version": "v1",
        "cache_of": None, "record": "ws/record.sqlite"}}
    assert [{k: row[k] for k in row if k in ("_step", "_timestamp", "loss", "acc")}
            for row in run.history] == [
        {"_step": 0, "_timestamp": 1000, "loss": 1},
        {"_step": 1, "_timestamp": 1010, "loss": 0.5},
        {"_step": 2, "_timestamp": 1020, "loss": 0.25, "acc": 0.9}]
    assert user_keys(run.summary) == {"loss": 0.25, "acc": 0.9, "score": 0.25,
                                      "status": "completed"}
    assert run.exit_code == 0
    run = read_run(published[failed.key][0])
    assert run.tags == ["dse", "failed", "nightly"]
    assert [{k: row[k] for k in ("_step", "_timestamp", "loss")} for row in run.history] == [
        {"_step": 0, "_timestamp": 1100, "loss": 3}]
    assert user_keys(run.summary) == {"loss": 3, "status": "failed", "failure": "crash",
                                      "message": "exit 3"}
    assert run.exit_code == 1
    assert not any((tmp_path / "wandb" / ".dse-partial" / "camp").iterdir())


def test_open_says_what_is_held(tmp_path: Path) -> None:
    """Nothing on a fresh place; every trial written, to a later open; none of another
    campaign's."""
    wb = WandbIntegration(mode="offline")
    assert set(wb.open(campaign(tmp_path))) == set()
    trials = [trial(n, steps=1) for n in range(3)]
    for t in trials:
        wb.write(t)
    wb.close()
    assert set(WandbIntegration().open(campaign(tmp_path))) == {t.key for t in trials}
    assert set(WandbIntegration().open(campaign(tmp_path, "cam"))) == set()


def test_the_same_campaign_in_two_records_does_not_collide(tmp_path: Path) -> None:
    """Run 1 trial 0 of ``camp`` in two records: one name, two keys, two runs."""
    wb = WandbIntegration()
    wb.open(campaign(tmp_path))
    first, second = trial(0, created=1000.0, steps=1), trial(0, created=2000.0, steps=1)
    assert first.name == second.name
    wb.write(first)
    wb.write(second)
    wb.close()
    published = runs(tmp_path)
    assert {k: len(v) for k, v in published.items()} == {first.key: 1, second.key: 1}
    assert {read_run(published[t.key][0]).run_id for t in (first, second)} == {
        first.key, second.key}
    assert set(WandbIntegration().open(campaign(tmp_path))) == {first.key, second.key}


def test_run_ids_are_what_wandb_takes_and_one_per_key() -> None:
    keys = [export_key(name, 1, 1000.0, n) for name in ("a.b", "a_b", "x" * 100)
            for n in (1, 11)]
    ids = [run_id(k) for k in keys]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids), ids
    assert len(set(ids)) == len(keys)
    assert run_id(keys[0]) == keys[0].replace(".", "_")


def test_disabled_writes_nothing(tmp_path: Path) -> None:
    wb = WandbIntegration(mode="disabled")
    wb.open(campaign(tmp_path))
    wb.write(trial(0))
    wb.close()
    assert runs(tmp_path) == {}
    assert set(WandbIntegration(mode="disabled").open(campaign(tmp_path))) == set()


def test_the_ledger_counts_whole_lines(tmp_path: Path) -> None:
    """Online, a trial's key is also appended to a ledger once its run is finished: open
    counts its whole lines and cuts off one a kill left short."""
    keys = [trial(n).key for n in range(3)]
    ledger = tmp_path / "wandb" / "dse-written-camp.txt"
    ledger.parent.mkdir()
    ledger.write_text(f"{keys[0]}\n{keys[1]}\n{keys[2][:5]}")
    assert set(WandbIntegration().open(campaign(tmp_path))) == set(keys[:2])
    assert ledger.read_text() == f"{keys[0]}\n{keys[1]}\n"


def test_written_from_a_thread_and_closed_no_service_is_left(tmp_path: Path) -> None:
    """As the controller does it: open, write and close from a thread of their own; once
    closed, W&B's service process is gone."""
    failures: list[BaseException] = []

    def copier() -> None:
        try:
            wb = WandbIntegration()
            wb.open(campaign(tmp_path))
            wb.write(trial(0, steps=1))
            assert cores(os.getpid()), "a service while writing"
            wb.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failures.append(exc)

    thread = threading.Thread(target=copier)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert failures == []
    assert list(runs(tmp_path)) == [trial(0).key]
    wait_until(lambda: not cores(os.getpid()), 30, "W&B's service to end")


def test_options_are_checked_when_the_campaign_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    where = "campaign.toml [integrations.wandb]"
    for options, words in (({"projekt": "p"}, "projekt"), ({"mode": "shared"}, "mode must be"),
                           ({"tags": "one"}, "tags must be"), ({"tags": ["x" * 65]}, "tags"),
                           ({"dir": 1}, "dir must be a string")):
        with pytest.raises(ConfigError, match=r"bad option") as bad:
            WandbIntegration.from_options(options, where=where)
        assert words in str(bad.value)
        assert "\n" not in str(bad.value)
    assert isinstance(WandbIntegration.from_options(
        {"project": "p", "entity": "e", "mode": "offline", "dir": "d", "tags": ["t"]},
        where=where), WandbIntegration)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError) as missing:
        WandbIntegration.from_options({}, where=where)
    assert str(missing.value) == (
        f"{where}: needs the wandb package, which is not installed (pip install 'dse-core[wandb]')")


def test_where_the_runs_go(tmp_path: Path) -> None:
    """Default the workspace; a relative ``dir`` from the workspace's parent."""
    workspace = tmp_path / "project" / ".dse"
    for where, place in ((None, workspace), ("out", tmp_path / "project" / "out")):
        wb = WandbIntegration(dir=where)
        wb.open(campaign(workspace))
        wb.write(trial(0, steps=1))
        wb.close()
        assert list(runs(place)) == [trial(0).key], where


# -- killed writers ----------------------------------------------------------------------

WRITER = r"""
from dse.integrations._wandb import WandbIntegration
from support.writers import write_missing
from wandb.sdk import wandb_run

if spec["hang"] is not None:  # the trial whose run is logged but never finished
    finish = wandb_run.Run.finish
    def hanging(self, *args, **kwargs):
        if self.id == spec["hang"]:
            print("hanging", flush=True)
            time.sleep(600)
        finish(self, *args, **kwargs)
    wandb_run.Run.finish = hanging
write_missing(WandbIntegration(mode="offline"), spec)
"""


@pytest.fixture
def writers(tmp_path: Path) -> Iterator[Writers]:
    started = Writers(tmp_path, campaign(tmp_path), WRITER)
    yield started
    started.kill_all()


def test_a_trial_killed_mid_run_is_removed_then_written_once(
        tmp_path: Path, writers: Writers) -> None:
    """A writer killed with the fourth trial's run logged but not finished: its service
    ends by itself, ``wandb sync`` would upload three runs, the next open removes the
    fourth's files and says three, and the fourth is written once."""
    trials = [trial(n) for n in range(4)]
    proc, out = writers.start(trials, hang=run_id(trials[3].key))
    writers.await_line(proc, out, b"hanging")
    assert cores(proc.pid)
    partial = tmp_path / "wandb" / ".dse-partial" / "camp" / run_id(trials[3].key)
    assert list(partial.glob("wandb/offline-run-*/run-*.wandb"))
    kill(proc)
    wait_until(lambda: not cores(proc.pid), 30, "the killed writer's wandb-core to end")
    sync = subprocess.run([sys.executable, "-m", "wandb", "sync", "--dry-run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, "WANDB_SILENT": "false"})
    assert sorted(re.findall(r"offline-run-\S+-(camp-1-\d-\w+)/", sync.stderr)) == sorted(
        t.key for t in trials[:3]), sync.stderr
    wb = WandbIntegration()
    assert set(wb.open(campaign(tmp_path))) == {t.key for t in trials[:3]}
    assert not partial.exists()
    wb.write(trials[3])
    wb.close()
    published = runs(tmp_path)
    assert {k: len(v) for k, v in published.items()} == {t.key: 1 for t in trials}
    assert read_run(published[trials[3].key][0]).exit_code == 0


def test_writers_killed_at_random_moments_leave_each_trial_once(
        tmp_path: Path, writers: Writers) -> None:
    """Rounds of a writer killed a random moment after it opened, until one finishes: each
    trial is then exactly one run, whole, and no writer's service outlived it."""
    trials = [trial(n, steps=2) for n in range(8)]
    rng = random.Random(11)
    kills = 0
    for _ in range(2):
        proc, out = writers.start(trials, hang=None)
        writers.await_line(proc, out, b"open")
        try:
            proc.wait(timeout=rng.uniform(0.1, 0.5))
        except subprocess.TimeoutExpired:
            kill(proc)
            kills += 1
            continue
        assert proc.returncode == 0, out.read_text()
        break
    else:
        proc, out = writers.start(trials, hang=None)
        assert proc.wait(timeout=120) == 0, out.read_text()
    assert kills >= 1, "8 trials take longer than a round lasts"
    published = runs(tmp_path)
    assert {k: len(v) for k, v in published.items()} == {t.key: 1 for t in trials}
    assert all(read_run(paths[0]).exit_code == 0 for paths in published.values())
    for proc in writers.started:
        wait_until(lambda: not cores(proc.pid), 30,  # noqa: B023 - awaited at once
                   f"writer {proc.pid}'s wandb-core to end")
