"""``[campaign] max_consecutive_failures``: trials failing the same way, in a row, before any
has completed, stop the campaign at once with its own end reason and one line — on the probe
backend (the fast layer; the real processes are in tests/backend_local/test_failure_messages.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.testing import ProbeScript
from support.record import record

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

FAIL = ProbeScript(state=dse.JobState.FAILED, exit_code=3)
OOM = ProbeScript(state=dse.JobState.OUT_OF_MEMORY)
PREEMPTED = ProbeScript(state=dse.JobState.PREEMPTED)


def scripted(kinds: Mapping[int, ProbeScript | list[ProbeScript]]
             ) -> Callable[[Mapping[str, Any]], Any]:
    """``x`` ends as ``kinds[x]`` (a script, or one per attempt), else completes scoring x."""

    def script(params: Mapping[str, Any]) -> Any:
        return kinds.get(params["x"], ProbeScript(metrics={"value": float(params["x"])}))

    return script


class Alerts(dse.EngineListener):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def on_alert(self, engine: dse.Engine, message: str) -> None:
        self.lines.append(message)


def statuses(run: Any) -> list[str]:
    return [r["status"] for r in run.trials]


def test_ten_failures_in_a_row_stop_the_campaign_with_one_line(run_campaign):
    alerts = Alerts()
    run = run_campaign(range(1, 31), script=scripted(dict.fromkeys(range(1, 31), FAIL)),
                       listener=alerts)

    assert statuses(run) == ["failed"] * 10  # not 30
    result = run.result
    assert result.end_reason is dse.EndReason.MAX_CONSECUTIVE_FAILURES
    assert result.status == "stopped"
    assert result.no_result
    assert result.message is not None
    assert result.message in alerts.lines
    assert result.message.startswith(
        "stopping: 10 trials in a row failed (nonzero_exit) and none completed"
        " (max_consecutive_failures = 10); the first, probe-campaign-1-1: exit code 3")
    file = record(run.store)
    (row,) = file.campaigns()
    assert (row["status"], row["end_reason"]) == ("stopped", "max_consecutive_failures")
    (data,) = [json.loads(e["data"]) for e in file.events(result.campaign_id, "stopped")]
    assert data | {"log": None} == {
        "reason": "max_consecutive_failures", "count": 10, "class": "nonzero_exit",
        "trial": 1, "trial_id": "probe-campaign-1-1", "message": "exit code 3", "log": None}


def test_what_runs_when_the_streak_ends_is_cancelled(run_campaign):
    # Rolling, 2 at once: trial 1 runs long while the others fail one by one; the 10th
    # failure stops the run and trial 1, still running, is cancelled.
    kinds: dict[int, Any] = dict.fromkeys(range(2, 31), FAIL)
    kinds[1] = ProbeScript(passes=10**6, state=dse.JobState.FAILED, exit_code=3)
    run = run_campaign(range(1, 31), script=scripted(kinds), mode="rolling",
                       max_parallelism=2)

    assert statuses(run) == ["cancelled"] + ["failed"] * 10
    assert run.result.end_reason is dse.EndReason.MAX_CONSECUTIVE_FAILURES
    assert run.result.stats.cancelled == 1


def test_a_completed_trial_means_failures_never_stop_the_run(run_campaign):
    # 9 failures, one completed, then 20 failures in a row: a result about the design.
    kinds = {x: FAIL for x in range(1, 31) if x != 10}
    run = run_campaign(range(1, 31), script=scripted(kinds))

    assert len(run.trials) == 30
    assert statuses(run).count("completed") == 1
    assert run.result.end_reason is dse.EndReason.AGENT_EXHAUSTED
    assert not run.result.no_result
    assert run.result.message is None


def test_a_mix_of_failures_and_results_runs_to_its_end(run_campaign):
    kinds = {x: FAIL for x in range(1, 41) if x % 3}
    run = run_campaign(range(1, 41), script=scripted(kinds), max_parallelism=2)

    assert len(run.trials) == 40
    assert run.result.end_reason is dse.EndReason.AGENT_EXHAUSTED
    assert not run.result.no_result
    assert run.result.message is None


def test_a_failure_of_another_class_starts_a_new_streak(run_campaign):
    kinds: dict[int, Any] = dict.fromkeys(range(1, 19), FAIL)
    kinds[10] = OOM  # 9 nonzero_exit, 1 out_of_memory, 8 nonzero_exit: no 10 alike
    run = run_campaign(range(1, 19), script=scripted(kinds))

    assert len(run.trials) == 18
    assert run.result.end_reason is dse.EndReason.AGENT_EXHAUSTED
    assert run.result.no_result  # still, nothing completed (dse run exits 4)


def test_zero_never_stops(run_campaign):
    run = run_campaign(range(1, 26), script=scripted(dict.fromkeys(range(1, 26), FAIL)),
                       max_consecutive_failures=0)

    assert statuses(run) == ["failed"] * 25
    assert run.result.end_reason is dse.EndReason.AGENT_EXHAUSTED


def test_interruptions_never_count_nor_break_a_streak(run_campaign):
    # Trials 1-15 are preempted on every attempt (retried, then interrupted): not counted.
    # Then 9 failures, 5 more interrupted trials, and failures: the 10th failure stops it.
    kinds: dict[int, Any] = dict.fromkeys(range(1, 16), [PREEMPTED] * 4)
    kinds.update(dict.fromkeys(range(16, 25), FAIL))
    kinds.update(dict.fromkeys(range(25, 30), [PREEMPTED] * 4))
    kinds.update(dict.fromkeys(range(30, 40), FAIL))
    run = run_campaign(range(1, 40), script=scripted(kinds), interruption_threshold=1000,
                       pause_on_interruptions=False)

    assert statuses(run) == ["interrupted"] * 15 + ["failed"] * 9 + ["interrupted"] * 5 + [
        "failed"]
    assert run.result.end_reason is dse.EndReason.MAX_CONSECUTIVE_FAILURES
    assert run.result.message is not None
    assert "the first, probe-campaign-1-16:" in run.result.message


def test_the_limit_is_the_campaign_key(run_campaign):
    run = run_campaign(range(1, 10), script=scripted(dict.fromkeys(range(1, 10), FAIL)),
                       max_consecutive_failures=3)

    assert statuses(run) == ["failed"] * 3
    assert "3 trials in a row failed" in (run.result.message or "")


@pytest.mark.parametrize("value", [-1, "ten", 2.5, True])
def test_a_bad_limit_is_one_error_naming_the_key(make_campaign, value):
    with pytest.raises(dse.ConfigError, match=r"^<campaign>: campaign\.max_consecutive_failures:"
                       r" expected a non-negative integer"):
        make_campaign(max_consecutive_failures=value)


def test_a_changed_limit_is_a_changed_campaign_the_default_is_not():
    from dse.engine._spec import campaign_spec

    base = {"campaign": {"name": "c"}, "space": {"x": [1, 2]},
            "objectives": [{"metric": "value"}]}
    default = campaign_spec(dse.campaign_from_dict(base))
    ten = campaign_spec(dse.campaign_from_dict(
        base | {"campaign": {"name": "c", "max_consecutive_failures": 10}}))
    three = campaign_spec(dse.campaign_from_dict(
        base | {"campaign": {"name": "c", "max_consecutive_failures": 3}}))
    # A run recorded before the key existed resumes under the default.
    assert "max_consecutive_failures" not in default
    assert ten == default
    assert three["max_consecutive_failures"] == 3
