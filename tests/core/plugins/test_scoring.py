"""Scorers and baselines: every score is recorded with the scorer's name and version and the
baseline trial it was compared against; the baseline runs once per data version."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.plugins._scoring import source_version
from dse.testing import FakeClock, ProbeBackend, ProbeScript
from support.recording import Recording

if TYPE_CHECKING:
    from pathlib import Path


def campaign(tmp_path: Path, **extra: Any) -> dse.Campaign:
    doc: dict[str, Any] = {
        "campaign": {"name": "sc", "max_parallelism": 2, "mode": "rolling"},
        "space": {"x": {"type": "int", "low": 0, "high": 100}},
        "objectives": [{"metric": "time", "direction": "minimize"}],
    }
    doc.update(extra)
    return dse.campaign_from_dict(doc, source=tmp_path / "sc.toml", workspace=tmp_path / "ws")


def run(
    camp: dse.Campaign, proposals: Any, script: Any = None, store: dse.Store | None = None
) -> tuple[dse.CampaignResult, Recording, dse.Store]:
    clock = FakeClock()
    store = store or dse.Store(camp.workspace / "dse.sqlite")

    def default(params: Mapping[str, Any]) -> ProbeScript:
        return ProbeScript(metrics={"time": float(params["x"])})

    agent = Recording(proposals)
    engine = dse.Engine(camp, agent=agent, store=store, clock=clock,
                        backend=ProbeBackend(script or default, clock=clock))
    return engine.run(), agent, store


def scores(store: dse.Store, campaign_id: int) -> dict[int, tuple[Any, ...]]:
    """Trial number → (scorer, version, score, baseline trial number)."""
    given = store.reads.scores(campaign_id)
    numbers = {t.id: t.number for t in store.reads.trials(campaign_id)}
    bases = store.reads.trial_refs(s.baseline_trial for s in given if s.baseline_trial is not None)
    return {numbers[s.trial_id]: (s.scorer, s.scorer_version, s.score,
                                  bases[s.baseline_trial].number
                                  if s.baseline_trial is not None else None)
            for s in given}


def test_every_score_names_the_default_scorer_and_a_cache_hit_is_scored_too(
    tmp_path: Path,
) -> None:
    result, _agent, store = run(campaign(tmp_path), [{"x": 3}, {"x": 5}, {"x": 3}])
    got = scores(store, result.campaign_id)
    assert got == {1: ("default", dse.__version__, 3.0, None),
                   2: ("default", dse.__version__, 5.0, None),
                   3: ("default", dse.__version__, 3.0, None)}
    statuses = [r.status.value for r in store.reads.trials(result.campaign_id)]
    assert statuses == ["completed", "completed", "cached"]
    run_row = store.reads.find_campaign("sc")
    assert run_row is not None
    spec = run_row.spec
    assert spec["scorer_resolved"] == {"name": "default", "version": dse.__version__,
                                       "direction": "minimize"}
    store.close()


def test_a_ratio_against_the_baseline_which_runs_first_and_alone(tmp_path: Path) -> None:
    camp = campaign(tmp_path, scorer={"name": "ratio"}, baseline={"params": {"x": 50}})
    result, agent, store = run(camp, [{"x": 10}, {"x": 25}, {"x": 100}])
    rows = store.reads.trials(result.campaign_id)
    # Trial 1 is the baseline (proposal 0), dispatched in its own batch before any proposal.
    assert [(r.number, r.proposal, r.params["x"]) for r in rows] == [
        (1, 0, 50), (2, 1, 10), (3, 2, 25), (4, 3, 100),
    ]
    assert rows[0].wave < rows[1].wave
    assert scores(store, result.campaign_id) == {
        1: ("ratio", dse.__version__, 1.0, 1),
        2: ("ratio", dse.__version__, 0.2, 1),
        3: ("ratio", dse.__version__, 0.5, 1),
        4: ("ratio", dse.__version__, 2.0, 1),
    }
    # The agent is told its own proposals only, with the ratio as their score.
    assert {o.trial_number: o.score for o in agent.seen} == {2: 0.2, 3: 0.5, 4: 2.0}
    assert result.best is not None
    assert (result.best.number, result.best.score) == (2, 0.2)
    store.close()


def test_a_new_data_version_gets_its_own_baseline(tmp_path: Path) -> None:
    dataset = tmp_path / "d.csv"
    dataset.write_text("one\n")
    camp = dse.campaign_from_dict({
        "campaign": {"name": "sc", "max_parallelism": 1},
        "space": {"x": {"type": "int", "low": 0, "high": 100}},
        "objectives": [{"metric": "time"}],
        "scorer": {"name": "ratio"}, "baseline": {"params": {"x": 50}},
        "data": {"paths": [str(dataset)]},
    }, workspace=tmp_path / "ws")

    def script(params: Mapping[str, Any]) -> ProbeScript:
        if params["x"] == 20:
            dataset.write_text("two\n")  # replaced while trial x=20 runs
        scale = 2.0 if dataset.read_text() == "two\n" else 1.0
        return ProbeScript(metrics={"time": scale * params["x"]})

    result, _agent, store = run(camp, [{"x": 10}, {"x": 20}, {"x": 30}], script)
    rows = {r.number: r for r in store.reads.trials(result.campaign_id)}
    params = {n: r.params["x"] for n, r in rows.items()}
    # baseline v1, x=10, x=20 (replaces the data as it starts), new baseline v2, x=30.
    assert params == {1: 50, 2: 10, 3: 20, 4: 50, 5: 30}
    assert [rows[n].proposal for n in range(1, 6)] == [0, 1, 2, 0, 3]
    v1, v2 = rows[1].data_version, rows[4].data_version
    assert v1 != v2
    got = scores(store, result.campaign_id)
    assert got[2][2:] == (0.2, 1)
    assert got[3][3] == 1  # dispatched against v1: compared against v1's baseline
    assert got[4][2:] == (1.0, 4)
    assert got[5][2:] == (0.6, 4)  # 60 / 100, both on the new data
    store.close()


def test_a_baseline_trial_of_an_earlier_run_is_reused_without_running_again(
    tmp_path: Path,
) -> None:
    first, _, store = run(campaign(tmp_path), [{"x": 40}])
    store.close()
    camp = campaign(tmp_path, scorer={"name": "ratio"},
                    baseline={"trial": f"sc-{first.campaign_id}-1"})
    result, _agent, store = run(camp, [{"x": 10}, {"x": 80}])
    rows = store.reads.trials(result.campaign_id)
    assert [r.params["x"] for r in rows] == [10, 80]  # no baseline re-run
    (old,) = store.reads.trials(first.campaign_id)
    got = [(s.trial_id, s.score, s.baseline_trial) for s in store.reads.scores(result.campaign_id)]
    assert got == [(rows[0].id, 0.25, old.id), (rows[1].id, 2.0, old.id)]
    store.close()


def test_a_failed_baseline_stops_the_campaign_before_any_proposal(tmp_path: Path) -> None:
    camp = campaign(tmp_path, scorer={"name": "ratio"}, baseline={"params": {"x": 50}})

    def script(params: Mapping[str, Any]) -> ProbeScript:
        if params["x"] == 50:
            return ProbeScript(state=dse.JobState.FAILED, exit_code=3)
        return ProbeScript(metrics={"time": float(params["x"])})

    result, agent, store = run(camp, [{"x": 10}], script)
    assert (result.status, result.end_reason) == ("stopped", "baseline_failed")
    assert [r.proposal for r in store.reads.trials(result.campaign_id)] == [0]
    assert agent.seen == []
    (event,) = store.reads.events(result.campaign_id, "baseline_failed")
    assert event.data is not None
    assert event.data["trial"] == 1
    store.close()


SCORER = '''
import math

def speedup(metrics, baseline):
    return baseline["time"] / metrics["time"]

speedup.direction = "maximize"

def broken(metrics, baseline):
    if metrics["time"] == 7:
        raise KeyError("energy")
    return math.nan if metrics["time"] == 9 else metrics["time"]
'''


def test_a_module_function_scorer_is_versioned_by_its_source(tmp_path: Path) -> None:
    (tmp_path / "myscore_a.py").write_text(SCORER)
    camp = campaign(tmp_path, scorer={"name": "myscore_a:speedup"},
                    baseline={"params": {"x": 60}})
    result, _agent, store = run(camp, [{"x": 30}, {"x": 100}])
    got = scores(store, result.campaign_id)
    version = got[1][1]
    assert version.startswith("sha256:")
    assert version == source_version(__import__("myscore_a").speedup)
    assert {n: (g[0], g[2], g[3]) for n, g in got.items()} == {
        1: ("myscore_a:speedup", 1.0, 1), 2: ("myscore_a:speedup", 2.0, 1),
        3: ("myscore_a:speedup", 0.6, 1),
    }
    # "maximize" from the function: the faster trial is the best.
    assert result.best is not None
    assert result.best.number == 2
    store.close()


def test_a_scorer_that_raises_or_gives_nan_fails_that_trial_alone(tmp_path: Path) -> None:
    (tmp_path / "myscore_b.py").write_text(SCORER)
    camp = campaign(tmp_path, scorer={"name": "myscore_b:broken"})
    result, _agent, store = run(camp, [{"x": 7}, {"x": 9}, {"x": 4}])
    rows = store.reads.trials(result.campaign_id)
    failed = (dse.TrialStatus.FAILED, dse.FailureClass.SCORER_ERROR)
    assert [(r.status, r.failure) for r in rows] == [
        failed, failed, (dse.TrialStatus.COMPLETED, None),
    ]
    assert "raised KeyError" in (rows[0].message or "")
    assert "returned NaN" in (rows[1].message or "")
    assert rows[0].score is None
    assert math.isclose(rows[2].score or 0.0, 4.0)
    assert set(scores(store, result.campaign_id)) == {3}
    store.close()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"scorer": {"name": "ratio"}},
         r"sc.toml: scorer.name: scorer 'ratio' compares against a baseline; add a \[baseline\]"),
        ({"scorer": {"name": "nosuch"}},
         r"sc.toml: campaign.scorer: unknown scorer 'nosuch'; installed scorers: default, ratio"),
        ({"baseline": {"params": {"x": 1}, "trial": "sc:1"}},
         r"sc.toml: baseline: give exactly one of 'params' or 'trial'"),
        ({"baseline": {"params": {"x": 500}}}, r"sc.toml: baseline.params: .*x"),
        ({"scorer": {"name": "default", "direction": "up"}},
         r"sc.toml: scorer.direction: expected 'minimize' or 'maximize', got 'up'"),
        ({"scorer": {"name": "default", "scale": 2}},
         r"sc.toml: scorer.default: bad option\(s\): .*'scale'"),
        ({"scorer": {"name": "myscore_c:speedup", "wieght": 2}},
         r"sc.toml: scorer.wieght: unknown key; a 'module:function' scorer takes only 'name'"),
    ],
)
def test_a_bad_scorer_or_baseline_is_one_error_naming_it(
    tmp_path: Path, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(dse.DseError, match=message):
        run(campaign(tmp_path, **extra), [{"x": 1}])


def test_a_baseline_trial_that_does_not_exist_records_nothing(tmp_path: Path) -> None:
    camp = campaign(tmp_path, scorer={"name": "ratio"}, baseline={"trial": "sc:4"})
    store = dse.Store(camp.workspace / "dse.sqlite")
    with pytest.raises(dse.ConfigError, match=r"sc.toml: baseline.trial: .*no campaign run"):
        run(camp, [{"x": 1}], store=store)
    assert store.reads.campaigns() == []
    store.close()
