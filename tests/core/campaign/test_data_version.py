"""Data versions: declared in ``[data]``, computed at start and before each dispatch batch,
stamped on every trial, and never mixed in rankings or in what the agent learns."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.campaign._data import DataSpec, DataVersioner, parse_data
from dse.testing import FakeClock, ProbeBackend, ProbeScript
from support.cli import run_dse, write_plugin
from support.record import record
from support.recording import Recording

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, r"c.toml: data: declare paths, a command or a version"),
        ({"paths": [3]}, r"c.toml: data.paths: expected a list of paths"),
        ({"command": [1]}, r"c.toml: data.command: expected a list of strings"),
        ({"version": ""}, r"c.toml: data.version: expected a non-empty string"),
        ({"files": ["a"]}, r"c.toml: data: unknown key\(s\) \['files'\]"),
    ],
)
def test_a_bad_data_table_is_one_error_naming_the_key(
    tmp_path: Path, raw: dict[str, Any], message: str
) -> None:
    with pytest.raises(dse.ConfigError, match=message):
        parse_data(raw, "c.toml: data", tmp_path)


def test_the_data_command_runs_beside_the_campaign_file_wherever_dse_was_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "VERSION").write_text("v7\n")
    spec = parse_data({"command": [sys.executable, "-c", "print(open('VERSION').read())"]},
                      "c.toml: data", project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert spec is not None
    assert DataVersioner(spec, cache_dir=tmp_path / "ws").compute() == "v7"


def age(*paths: Path, hours: float = 1.0) -> None:
    """Date *paths* back (a file modified just now is read again every time, on purpose)."""
    for path in paths:
        then = time.time() - hours * 3600
        os.utime(path, (then, then))


def test_a_path_digest_reads_only_what_changed(
    tmp_path: Path, file_reads: list[str]
) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.csv").write_text("1,2\n")
    (data / "sub" / "b.csv").write_text("3,4\n")
    age(data / "a.csv", data / "sub" / "b.csv")
    read = file_reads
    spec = parse_data({"paths": ["data"]}, "data", tmp_path)
    assert spec is not None
    first = DataVersioner(spec, cache_dir=tmp_path / "ws").compute()
    assert sorted(read) == ["a.csv", "b.csv"]
    # A new controller (the cache is on disk) and nothing changed: nothing is read again.
    read.clear()
    assert DataVersioner(spec, cache_dir=tmp_path / "ws").compute() == first
    assert read == []
    # One file replaced: only it is read, and the version changes.
    (data / "sub" / "b.csv").write_text("3,5\n")
    age(data / "sub" / "b.csv", hours=2)
    second = DataVersioner(spec, cache_dir=tmp_path / "ws").compute()
    assert read == ["b.csv"]
    assert second != first
    assert first.startswith("sha256:")


def test_a_command_and_a_literal_make_the_version(tmp_path: Path) -> None:
    spec = DataSpec(command=(sys.executable, "-c", "print('rev-42')"), version="2024-06")
    assert DataVersioner(spec, cache_dir=tmp_path).compute() == "2024-06+rev-42"
    failing = DataSpec(command=(sys.executable, "-c", "import sys; sys.exit('no repo')"))
    with pytest.raises(dse.ConfigError, match=r"data.command: exited 1 without a version"):
        DataVersioner(failing, cache_dir=tmp_path).compute()
    missing = DataSpec(paths=(tmp_path / "nope",))
    with pytest.raises(dse.ConfigError, match=r"data.paths: .*nope does not exist"):
        DataVersioner(missing, cache_dir=tmp_path).compute()


def replaced_mid_campaign(
    tmp_path: Path,
) -> tuple[dse.Campaign, Callable[[Mapping[str, Any]], ProbeScript]]:
    """A campaign reading train.csv, and a probe script that replaces the file when trial 3
    (x = 3) starts; trial 3 runs long, so it is in flight when the change is noticed."""
    dataset = tmp_path / "train.csv"
    dataset.write_text("version one\n")
    camp = dse.campaign_from_dict({
        "campaign": {"name": "data", "max_parallelism": 2, "mode": "rolling",
                     "poll_interval": "1h"},
        "space": {"x": {"type": "int", "low": 0, "high": 100}},
        "objectives": [{"metric": "value"}],
        "environment": {"time_limit": "1m"},
        "data": {"paths": [str(dataset)]},
    }, workspace=tmp_path / "ws")

    def script(params: Mapping[str, Any]) -> ProbeScript:
        if params["x"] == 3:
            dataset.write_text("version two\n")
        return ProbeScript(seconds=10.0 if params["x"] == 3 else 1.0,
                           metrics={"value": float(params["x"])})

    return camp, script


def test_a_dataset_replaced_mid_campaign_is_noticed_and_never_mixed(tmp_path: Path) -> None:
    camp, script = replaced_mid_campaign(tmp_path)
    clock = FakeClock(start=0.0)
    store = dse.Store(camp.workspace / "dse.sqlite")
    agent = Recording({"x": x} for x in range(1, 9))
    engine = dse.Engine(camp, agent=agent, backend=ProbeBackend(script, clock=clock),
                        store=store, clock=clock)
    result = engine.run()

    rows = record(store).trials(result.campaign_id)
    versions = {row["number"]: row["data_version"] for row in rows}
    old, new = versions[1], versions[8]
    assert old != new
    assert old.startswith("sha256:")
    assert new.startswith("sha256:")
    # Trials dispatched before the change was noticed (trial 4 went out with trial 3, whose
    # start replaced the file) carry the old version; later ones the new one.
    assert [versions[n] for n in range(1, 9)] == [old] * 4 + [new] * 4
    (change,) = record(store).events(result.campaign_id, "data_version_changed")
    assert json.loads(change["data"]) == {"old": old, "new": new}
    # The agent learned nothing from a result about the old data once the new was current:
    # trial 3 ended after the change was noticed, trial 4 before.
    told = {obs.trial_number: obs.score for obs in agent.seen}
    assert told == {1: 1.0, 2: 2.0, 3: None, 4: 4.0, 5: 5.0, 6: 6.0, 7: 7.0, 8: 8.0}
    # Best so far ranks only results about the current data (trials 1 to 4 scored lower).
    assert result.best is not None
    assert result.best.number == 5
    store.close()


def test_with_a_factory_the_agent_is_rebuilt_without_what_it_learnt_of_the_old_data(
    tmp_path: Path,
) -> None:
    # As above, but the engine can make the agent afresh (as `dse run` can): when the change is
    # noticed, a new agent is told the record again, results about the old data without their
    # metrics, so nothing it learnt of the old data is mixed with what it learns of the new.
    camp, script = replaced_mid_campaign(tmp_path)
    agents: list[Recording] = []

    def make() -> Recording:
        agents.append(Recording({"x": x} for x in range(1, 9)))
        return agents[-1]

    alerts: list[str] = []

    class Alerts(dse.EngineListener):
        def on_alert(self, engine: dse.Engine, message: str) -> None:
            alerts.append(message)

    clock = FakeClock(start=0.0)
    store = dse.Store(camp.workspace / "dse.sqlite")
    engine = dse.Engine(camp, agent=make(), agent_factory=make, listener=Alerts(),
                        backend=ProbeBackend(script, clock=clock), store=store, clock=clock)
    result = engine.run()

    rows = record(store).trials(result.campaign_id)
    assert [json.loads(r["params"]) for r in rows] == [{"x": x} for x in range(1, 9)]
    new = rows[-1]["data_version"]
    old_data = {r["number"] for r in rows if r["data_version"] != new}
    assert old_data == {1, 2, 3, 4}
    # The first agent was told old-data results with their scores; it was replaced by one
    # that knows of trials 1 to 4 only that they ran, and the scores of the new data's.
    assert len(agents) == 2
    assert engine.agent is agents[1]
    first = {obs.trial_number: obs.score for obs in agents[0].seen}
    assert first.get(1) == 1.0
    told = {obs.trial_number: obs.score for obs in agents[1].seen}
    assert told == {1: None, 2: None, 3: None, 4: None, 5: 5.0, 6: 6.0, 7: 7.0, 8: 8.0}
    assert all(not obs.metrics for obs in agents[1].seen if obs.trial_number in old_data)
    (rebuilt,) = record(store).events(result.campaign_id, "agent_rebuilt")
    assert json.loads(rebuilt["data"])["data_version"] == new
    assert not record(store).events(result.campaign_id, "agent_replay_diverged")
    # The console says so, right after it says the data changed.
    assert alerts[-1] == ("agent rebuilt from the record of 4 trial(s), forgetting results"
                          " about other data and invalidated ones")
    assert alerts[-2].startswith("data changed: version ")
    store.close()


def test_a_trial_that_read_other_data_is_recorded_and_flagged(tmp_path: Path) -> None:
    camp = dse.campaign_from_dict({
        "campaign": {"name": "read", "max_parallelism": 1},
        "space": {"x": {"type": "int", "low": 0, "high": 100}},
        "objectives": [{"metric": "value"}],
        "data": {"version": "v7"},
    }, workspace=tmp_path / "ws")

    def script(params: Mapping[str, Any]) -> ProbeScript:
        read = "v6" if params["x"] == 2 else "v7"
        return ProbeScript(metrics={"value": float(params["x"])}, data_version=read)

    clock = FakeClock()
    store = dse.Store(camp.workspace / "dse.sqlite")
    agent = Recording([{"x": 1}, {"x": 2}, {"x": 3}])
    result = dse.Engine(camp, agent=agent, backend=ProbeBackend(script, clock=clock),
                        store=store, clock=clock).run()

    rows = {r["number"]: r for r in record(store).trials(result.campaign_id)}
    assert [(rows[n]["data_version"], rows[n]["data_version_read"]) for n in (1, 2, 3)] == [
        ("v7", "v7"), ("v7", "v6"), ("v7", "v7"),
    ]
    (mismatch,) = record(store).events(result.campaign_id, "data_version_mismatch")
    assert json.loads(mismatch["data"]) == {"trial": 2, "expected": "v7", "read": "v6"}
    # Its result is about other data: the agent is not taught by it.
    assert {obs.trial_number: obs.score for obs in agent.seen} == {1: 1.0, 2: None, 3: 3.0}
    store.close()


def test_a_rewrite_in_the_same_clock_tick_is_not_missed(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("aaaa\n")
    versioner = DataVersioner(DataSpec(paths=(data,)), cache_dir=tmp_path / "ws")
    first = versioner.compute()
    stamp = data.stat()
    data.write_text("bbbb\n")  # same size; force the very same stamp as the first write
    os.utime(data, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert data.stat().st_mtime_ns == stamp.st_mtime_ns
    assert versioner.compute() != first


SCRIPT = '''
from pathlib import Path
from dse.testing import ProbeScript

def script(params):
    if params["x"] == 3:
        (Path(__file__).parent / "train.csv").write_text("version two\\n")
    return ProbeScript(seconds=0.0625, metrics={"value": float(10 - params["x"])})
'''

CAMPAIGN = """
[campaign]
name = "versions"
agent = "list"
backend = "probe"
max_parallelism = 1
poll_interval = "10ms"

[agent.list]
points = [{x = 1}, {x = 2}, {x = 3}, {x = 4}, {x = 5}]

[backend.probe]
script = "probe_script:script"

[data]
paths = ["train.csv"]

[[objectives]]
metric = "value"

[space]
x = { type = "int", low = 0, high = 10 }
"""


def test_dse_report_groups_trials_by_data_version_and_ranks_each_alone(tmp_path: Path) -> None:
    project = write_plugin(tmp_path)
    (project / "probe_script.py").write_text(SCRIPT)
    (project / "train.csv").write_text("version one\n")
    age(project / "train.csv")
    (project / "campaign.toml").write_text(CAMPAIGN)

    proc = run_dse(project, "run", "campaign.toml")
    assert proc.returncode == 0, proc.stderr
    report = run_dse(project, "report", "campaign.toml", "--json")
    assert report.returncode == 0, report.stderr

    (run,) = json.loads(report.stdout)["runs"]
    groups = run["data_versions"]
    # Trials 1-3 went out against the first version (trial 3's start replaced the file);
    # 4 and 5 against the second. Lower x scores higher here, but trial 1 is about old data.
    assert [(g["trials"], g["completed"]) for g in groups] == [(3, 3), (2, 2)]
    assert groups[0]["version"] != groups[1]["version"]
    assert groups[0]["best"] == {"trial": 3, "score": 7.0}
    assert groups[1]["best"] == {"trial": 5, "score": 5.0}
    assert run["best"]["trial"] == 5
    text = run_dse(project, "report", "campaign.toml").stdout
    assert "each data version ranked on its own" in text
    # `dse run` can make its agent afresh: it was rebuilt once, on the second version.
    store = dse.Store(project / ".dse" / "dse.sqlite")
    (rebuilt,) = record(store).events(run["run"], "agent_rebuilt")
    assert json.loads(rebuilt["data"])["data_version"] == groups[1]["version"]
    store.close()
