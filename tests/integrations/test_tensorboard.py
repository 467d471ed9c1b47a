"""The TensorBoard integration, read back with TensorBoard's own readers: the event accumulator
for a run's scalars and hparams, the hparams plugin's handlers for the HPARAMS tab's table;
writers killed by SIGKILL part way leave nothing that ``open`` does not remove, and each
trial ends up in the log directory exactly once."""

from __future__ import annotations

import importlib.util
import random
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.context import RequestContext
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import (
    api_pb2,
    backend_context,
    get_experiment,
    list_session_groups,
    metadata,
)

from dse import CampaignExport, ConfigError, TrialExport
from dse.integrations._tensorboard import TensorBoardIntegration
from dse.plugins._integration import export_key
from support.writers import Writers, kill

if TYPE_CHECKING:
    from collections.abc import Iterator

PARAMS = (("lr", "float", (1e-4, 1.0)), ("layers", "int", (1, 8)),
          ("opt", "choice", ("adam", "sgd")), ("mixed", "choice", (1, "two", None)))
OBJECTIVES = (("loss", "minimize"), ("acc", "maximize"))


def campaign(workspace: Path, name: str = "camp") -> CampaignExport:
    return CampaignExport(name=name, workspace=workspace, record="ws/record.sqlite",
                          params=PARAMS, objectives=OBJECTIVES)


def trial(number: int, *, created: float = 1000.0, status: str = "completed",
          steps: int = 5, metrics: dict[str, float] | None = None) -> TrialExport:
    """Trial *number* of run 1 of ``camp`` (recorded at *created*), its curve a falling loss."""
    curve = tuple((s, {"loss": 1.0 / (s + 1)}, created + 10.0 * s) for s in range(steps))
    return TrialExport(
        key=export_key("camp", 1, created, number), name=f"camp-1-{number}", campaign="camp",
        run=1, number=number, config_hash=f"hash{number}",
        params={"lr": 0.01 * (number + 1), "layers": 3, "opt": "adam", "mixed": 1},
        status=status, failure="crash" if status == "failed" else None, message=None,
        metrics={"loss": 0.125, "acc": 0.9} if metrics is None else metrics, score=0.125,
        curve=curve, created_at=created, ended_at=created + 100.0, data_version="v1",
        cache_of=None)


def event_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if "tfevents" in p.name)


def read(run_dir: Path) -> EventAccumulator:
    (path,) = event_files(run_dir)
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(acc: EventAccumulator) -> dict[str, list[tuple[int, float, float]]]:
    return {tag: [(e.step, pytest.approx(e.value), e.wall_time) for e in acc.Scalars(tag)]
            for tag in acc.Tags()["scalars"]}


def test_a_trial_reads_back_whole(tmp_path: Path) -> None:
    """Params (anything but a bool, number or string as text; a mixed choice's as text),
    the key as the session's group, the curve at its steps and times, the final metrics
    the curve does not already hold at the last step, the status and end time."""
    tb = TensorBoardIntegration()
    assert list(tb.open(campaign(tmp_path))) == []
    t = trial(0, metrics={"loss": 0.2, "acc": 0.9})  # the curve ends at 0.2: not again
    tb.write(t)
    tb.close()
    run_dir = tmp_path / "tensorboard" / "camp" / "camp-1-0"
    (path,) = event_files(run_dir)
    assert path.name == f"events.out.tfevents.0000001100.dse.{t.key}"
    acc = read(run_dir)
    assert scalars(acc) == {
        "loss": [(s, 1.0 / (s + 1), 1000.0 + 10 * s) for s in range(5)],
        "acc": [(4, 0.9, 1100.0)],
    }
    content = acc.PluginTagToContent("hparams")
    start = metadata.parse_session_start_info_plugin_data(
        content[metadata.SESSION_START_INFO_TAG])
    assert start.group_name == t.key
    assert start.start_time_secs == 1000.0
    assert start.hparams["lr"].number_value == pytest.approx(0.01)
    assert start.hparams["layers"].number_value == 3
    assert start.hparams["opt"].string_value == "adam"
    assert start.hparams["mixed"].string_value == "1"
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    assert (end.status, end.end_time_secs) == (api_pb2.STATUS_SUCCESS, 1100.0)


def test_final_metrics_without_a_curve_stand_at_step_0(tmp_path: Path) -> None:
    tb = TensorBoardIntegration()
    tb.open(campaign(tmp_path))
    tb.write(trial(0, steps=0, metrics={"loss": 0.5}))
    acc = read(tmp_path / "tensorboard" / "camp" / "camp-1-0")
    assert scalars(acc) == {"loss": [(0, 0.5, 1100.0)]}


def test_each_outcome_has_its_status(tmp_path: Path) -> None:
    """Success for completed and cached, failure for failed, interrupted and out of budget;
    stopped early (by the rule: neither) unknown, TensorBoard having no other."""
    expected = {"completed": api_pb2.STATUS_SUCCESS, "cached": api_pb2.STATUS_SUCCESS,
                "failed": api_pb2.STATUS_FAILURE, "interrupted": api_pb2.STATUS_FAILURE,
                "budget_exhausted": api_pb2.STATUS_FAILURE, "stopped": api_pb2.STATUS_UNKNOWN}
    tb = TensorBoardIntegration()
    tb.open(campaign(tmp_path))
    for number, status in enumerate(expected):
        tb.write(trial(number, status=status))
    for number, status in enumerate(expected):
        content = read(tmp_path / "tensorboard" / "camp" / f"camp-1-{number}"
                       ).PluginTagToContent("hparams")
        end = metadata.parse_session_end_info_plugin_data(
            content[metadata.SESSION_END_INFO_TAG])
        assert end.status == expected[status], status


def test_the_hparams_tab_shows_the_campaign(tmp_path: Path) -> None:
    """The hparams plugin's own handlers over the campaign's directory: the experiment (each
    param's domain, each objective) and one session group per trial, by key, with its
    params, its objectives' final values and its status."""
    tb = TensorBoardIntegration()
    tb.open(campaign(tmp_path))
    trials = [trial(n, status="failed" if n == 2 else "completed") for n in range(3)]
    for t in trials:
        tb.write(t)
    logdir = str(tmp_path / "tensorboard" / "camp")
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    tbc = base_plugin.TBContext(data_provider=data_provider.MultiplexerDataProvider(mux, logdir),
                                logdir=logdir, multiplexer=mux)
    context, ctx = backend_context.Context(tbc), RequestContext()
    experiment = get_experiment.Handler(ctx, context, "", api_pb2.GetExperimentRequest()).run()
    infos = {i.name: i for i in experiment.hparam_infos}
    assert (infos["lr"].domain_interval.min_value, infos["lr"].domain_interval.max_value) == (
        1e-4, 1.0)
    assert (infos["layers"].domain_interval.min_value,
            infos["layers"].domain_interval.max_value) == (1.0, 8.0)
    assert list(infos["opt"].domain_discrete) == ["adam", "sgd"]
    assert sorted(infos["mixed"].domain_discrete) == ["1", "None", "two"]
    assert [(m.name.tag, m.description) for m in experiment.metric_infos] == list(OBJECTIVES)
    request = api_pb2.ListSessionGroupsRequest(
        start_index=0, slice_size=10, allowed_statuses=[
            api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE,
            api_pb2.STATUS_RUNNING])
    groups = list_session_groups.Handler(ctx, context, "", request).run().session_groups
    by_key = {g.name: g for g in groups}
    assert set(by_key) == {t.key for t in trials}
    for t in trials:
        group = by_key[t.key]
        assert group.hparams["lr"].number_value == pytest.approx(t.params["lr"])
        assert {m.name.tag: m.value for m in group.metric_values} == {
            "loss": pytest.approx(0.125), "acc": pytest.approx(0.9)}
        (session,) = group.sessions
        assert session.name == t.name
        assert session.status == (api_pb2.STATUS_FAILURE if t.number == 2
                                  else api_pb2.STATUS_SUCCESS)


def test_open_says_what_is_held(tmp_path: Path) -> None:
    """Nothing on a fresh place; every trial written, to a later open; the campaign's
    experiment written once however often it opens."""
    tb = TensorBoardIntegration()
    assert set(tb.open(campaign(tmp_path))) == set()
    trials = [trial(n) for n in range(4)]
    for t in trials:
        tb.write(t)
    tb.close()
    again = TensorBoardIntegration()
    assert set(again.open(campaign(tmp_path))) == {t.key for t in trials}
    assert set(again.open(campaign(tmp_path))) == {t.key for t in trials}
    root = tmp_path / "tensorboard" / "camp"
    (experiment,) = [p for p in root.iterdir() if p.is_file()]
    assert experiment.name.endswith(".dse.experiment")
    assert set(TensorBoardIntegration().open(campaign(tmp_path, "other"))) == set()


def test_the_same_campaign_in_two_records_does_not_collide(tmp_path: Path) -> None:
    """Run 1 trial 0 of ``camp`` in two records: one name, two keys, two run directories."""
    tb = TensorBoardIntegration()
    tb.open(campaign(tmp_path))
    first, second = trial(0, created=1000.0), trial(0, created=2000.0)
    assert first.name == second.name
    assert first.key != second.key
    tb.write(first)
    tb.write(second)
    root = tmp_path / "tensorboard" / "camp"
    digest = second.key.rsplit("-", 1)[1]
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [
        "camp-1-0", f"camp-1-0~{digest}"]
    for t, name in ((first, "camp-1-0"), (second, f"camp-1-0~{digest}")):
        content = read(root / name).PluginTagToContent("hparams")
        start = metadata.parse_session_start_info_plugin_data(
            content[metadata.SESSION_START_INFO_TAG])
        assert start.group_name == t.key
    assert set(TensorBoardIntegration().open(campaign(tmp_path))) == {first.key, second.key}


def test_where_the_log_directory_is(tmp_path: Path) -> None:
    """Default ``<workspace>/tensorboard``; a relative ``logdir`` from the workspace's
    parent; an absolute one as it is."""
    workspace = tmp_path / "project" / ".dse"
    for logdir, where in ((None, workspace / "tensorboard"),
                          ("runs/tb", tmp_path / "project" / "runs" / "tb"),
                          (str(tmp_path / "abs"), tmp_path / "abs")):
        tb = TensorBoardIntegration(logdir=logdir)
        tb.open(campaign(workspace))
        tb.write(trial(0))
        assert event_files(where / "camp" / "camp-1-0"), logdir


def test_options_are_checked_when_the_campaign_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    where = "campaign.toml [integrations.tensorboard]"
    with pytest.raises(ConfigError, match=r"bad option") as bad:
        TensorBoardIntegration.from_options({"log_dir": "x"}, where=where)
    assert "log_dir" in str(bad.value)
    assert "\n" not in str(bad.value)
    with pytest.raises(ConfigError, match=r"logdir must be a string, not int"):
        TensorBoardIntegration.from_options({"logdir": 3}, where=where)
    assert isinstance(TensorBoardIntegration.from_options({"logdir": "x"}, where=where),
                      TensorBoardIntegration)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ConfigError) as missing:
        TensorBoardIntegration.from_options({}, where=where)
    assert str(missing.value) == (
        f"{where}: needs the tensorboard package, which is not installed"
        " (pip install 'dse-core[tensorboard]')")


# -- killed writers ----------------------------------------------------------------------

WRITER = r"""
import dse.integrations._tensorboard as module
from support.writers import write_missing
from tensorboard.summary.writer import record_writer

if spec["hang"] is not None:  # the trial whose file is written but never put in place
    publish = module.publish
    def hanging(source, target):
        if target.name.endswith(spec["hang"]):
            print("hanging", flush=True)
            time.sleep(600)
        publish(source, target)
    module.publish = hanging
if spec["slow"]:  # each record a little slower: a kill lands inside a file
    write = record_writer.RecordWriter.write
    def slow(self, data):
        time.sleep(0.002)
        write(self, data)
    record_writer.RecordWriter.write = slow
write_missing(module.TensorBoardIntegration(), spec)
"""


@pytest.fixture
def writers(tmp_path: Path) -> Iterator[Writers]:
    started = Writers(tmp_path, campaign(tmp_path), WRITER)
    yield started
    started.kill_all()


def held_once(root: Path, trials: list[TrialExport]) -> dict[str, int]:
    """How many event files each trial has (and any other file: a leftover)."""
    counts: dict[str, int] = {t.key: 0 for t in trials}
    for path in root.rglob("*"):
        if path.is_file() and not path.name.endswith(".dse.experiment"):
            key = path.name.split(".dse.", 1)[-1] if "tfevents" in path.name else path.name
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_a_trial_killed_mid_write_is_removed_then_written_once(
        tmp_path: Path, writers: Writers) -> None:
    """A writer killed with the fourth trial's file written but not in place: TensorBoard
    sees three runs; the next open removes the file, says three, and the fourth is written
    once."""
    trials = [trial(n) for n in range(4)]
    proc, out = writers.start(trials, hang=trials[3].key, slow=False)
    writers.await_line(proc, out, b"hanging")
    kill(proc)
    root = tmp_path / "tensorboard" / "camp"
    leftover = root / "camp-1-3" / f"dse-partial.{trials[3].key}"
    assert leftover.stat().st_size > 0
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(root))
    mux.Reload()
    assert sorted(mux.Runs()) == [".", "camp-1-0", "camp-1-1", "camp-1-2"]
    tb = TensorBoardIntegration()
    assert set(tb.open(campaign(tmp_path))) == {t.key for t in trials[:3]}
    assert not (root / "camp-1-3").exists()
    tb.write(trials[3])
    assert held_once(root, trials) == {t.key: 1 for t in trials}


def test_writers_killed_at_random_moments_leave_each_trial_once(
        tmp_path: Path, writers: Writers) -> None:
    """Rounds of a writer killed a random moment after it opened, until one finishes: each
    trial is then in the log directory exactly once, and nothing else is."""
    trials = [trial(n, steps=20) for n in range(12)]
    root = tmp_path / "tensorboard" / "camp"
    rng = random.Random(7)
    kills, cut = 0, 0
    for _ in range(8):
        proc, out = writers.start(trials, hang=None, slow=True)
        writers.await_line(proc, out, b"open")
        try:
            proc.wait(timeout=rng.uniform(0.0, 0.25))
        except subprocess.TimeoutExpired:
            kill(proc)
            kills += 1
            cut += any(p.name.startswith("dse-partial.") for p in root.rglob("*"))
            continue
        assert proc.returncode == 0, out.read_text()
        assert b"done" in out.read_bytes()
        break
    else:
        proc, out = writers.start(trials, hang=None, slow=False)
        assert proc.wait(timeout=60) == 0, out.read_text()
    assert kills >= 2, "each round writes 5 trials at most: 12 take 3 rounds"
    assert cut >= 1, f"none of {kills} writers was killed inside a file"
    assert held_once(root, trials) == {t.key: 1 for t in trials}
    assert set(TensorBoardIntegration().open(campaign(tmp_path))) == {t.key for t in trials}
