"""The Python API with dse-core alone (docs/python-api.md): an objective no worker could find
is refused in one line before anything is written, :func:`dse.load` reads a run as the record
has it, and ``to_pandas`` without pandas says how to get it. The function objectives that
run are tested on real processes in tests/backend_local/test_local_python_api.py."""

from __future__ import annotations

import functools
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import dse
from support.cli import write_plugin
from support.probe import probe_campaign
from support.show import ran, show_json

CAMPAIGN: dict[str, Any] = {"campaign": {"name": "refused"}, "space": {"x": [1, 2]},
                            "objectives": [{"metric": "loss"}]}

PROBE_CAMPAIGN = probe_campaign("{x = 1}, {x = 2}, {x = 3}, {x = 2}")


def top_level(params: dict[str, Any]) -> float:
    return float(params["x"])


class CallableObject:
    def __call__(self, params: dict[str, Any]) -> float:
        return 1.0


def nested() -> Any:
    def inner(params: dict[str, Any]) -> float:
        return 1.0

    return inner


def typed_at_a_prompt() -> Any:
    """A function as ``python -c`` or the interactive prompt makes it: no source to read."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile("def at_prompt(params):\n    return 1.0\n", "<stdin>", "exec"), namespace)
    return namespace["at_prompt"]


@pytest.mark.parametrize(("objective", "said"), [
    (lambda params: 1.0, "<lambda>: a lambda cannot run in a worker process"),
    (nested(), "nested.<locals>.inner: a function defined inside another function"),
    (functools.partial(top_level), "expected a function defined with def"),
    (CallableObject(), "expected a function defined with def"),
    (typed_at_a_prompt(), "at_prompt: its source cannot be read"),
])
def test_an_objective_no_worker_finds_is_refused_before_anything_is_written(
    tmp_path: Path, objective: Any, said: str,
) -> None:
    with pytest.raises(dse.ConfigError) as caught:
        dse.run(CAMPAIGN, objective, workspace=tmp_path / "ws")
    message = str(caught.value)
    assert said in message
    assert message.startswith("objective")
    assert "\n" not in message
    assert not (tmp_path / "ws").exists()


def test_a_function_and_a_command_are_refused_together(tmp_path: Path) -> None:
    campaign = {**CAMPAIGN, "environment": {"command": ["python", "work.py"]}}
    with pytest.raises(dse.ConfigError, match="give an objective function or a command, not"):
        dse.run(campaign, top_level, workspace=tmp_path / "ws")
    assert not (tmp_path / "ws").exists()


def test_load_reads_a_run_as_the_record_has_it(tmp_path: Path) -> None:
    project = write_plugin(tmp_path)
    db = ran(project, PROBE_CAMPAIGN)
    results = dse.load(project / ".dse")
    assert dse.load(project / "campaign.toml") == results == dse.load(
        project / ".dse", campaign="demo", run=1)
    assert (results.campaign, results.run_id, results.status) == (
        "demo", 1, dse.CampaignStatus.COMPLETED)
    assert results.params == ("x",)
    assert results.objectives == ("value",)
    assert [t.number for t in results.trials] == [1, 2, 3, 4]

    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT number, status, failure, score, config_hash FROM trials"
                            " ORDER BY number").fetchall()
    assert [(t.number, t.status.value, t.failure, t.score) for t in results.trials] == [
        (n, status, failure, score) for n, status, failure, score, _ in rows]
    for trial in results.trials:
        doc = show_json(project, f"demo:{trial.number}")
        assert trial.trial_id == doc["trial"]["id"]
        assert dict(trial.params) == doc["run"]["params"]
        assert dict(trial.metrics) == doc["concluded"]["metrics"]
        assert [a.state.value for a in trial.attempts] == [
            a["state"] for a in doc["ended"]["attempts"]]
        assert dict(trial.spend) == {k: v for k, v in doc["cost"]["total"].items()
                                     if k in trial.spend}
    # The fourth proposal repeats the second: a cache hit, reusing its result.
    hit = results.trials[3]
    assert hit.status is dse.TrialStatus.CACHED
    assert hit.reuses == "demo-1-2"
    assert hit.attempts == ()
    best = min((t for t in results.trials if t.score is not None), key=lambda t: t.score or 0)
    assert results.best is not None
    assert results.best.number == best.number


def test_load_says_which_run_it_cannot_find(tmp_path: Path) -> None:
    with pytest.raises(dse.StoreError, match="no dse record here"):
        dse.load(tmp_path)
    project = write_plugin(tmp_path)
    ran(project, PROBE_CAMPAIGN)
    ran(project, PROBE_CAMPAIGN.replace('name = "demo"', 'name = "other"'))
    with pytest.raises(dse.ConfigError, match="holds campaigns demo, other; name one"):
        dse.load(project / ".dse")
    with pytest.raises(dse.ConfigError, match="no run 9 in the record"):
        dse.load(project / ".dse", run=9)
    with pytest.raises(dse.ConfigError, match="no run 2 of campaign demo"):
        dse.load(project / ".dse", campaign="demo", run=2)
    assert dse.load(project / ".dse", run=2).campaign == "other"


def test_to_pandas_without_pandas_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = write_plugin(tmp_path)
    ran(project, PROBE_CAMPAIGN)
    results = dse.load(project / ".dse")
    monkeypatch.setitem(sys.modules, "pandas", None)  # what `import pandas` finds: nothing
    with pytest.raises(ImportError) as caught:
        results.to_pandas()
    assert str(caught.value) == 'to_pandas() needs pandas: pip install "dse-core[pandas]"'
