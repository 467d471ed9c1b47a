"""Interrupted trials are retried as the same trial; reproducible failures are not.

Everything runs on the probe backend with the fake clock. A probe script that returns a list
scripts the attempts of one trial in order (the last one repeats).
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.testing import ProbeBackend, ProbeScript, ScriptedAgent
from support.record import record

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

State = dse.JobState


def scripted(
    special: Mapping[int, ProbeScript | Sequence[ProbeScript]],
) -> Callable[[Mapping[str, Any]], ProbeScript | Sequence[ProbeScript]]:
    """A probe script: ``x`` in *special* follows its script, any other ``x`` scores ``x``."""

    def script(params: Mapping[str, Any]) -> ProbeScript | Sequence[ProbeScript]:
        x = params["x"]
        return special.get(x, ProbeScript(metrics={"value": float(x)}))

    return script


def succeed(x: float, **more: Any) -> ProbeScript:
    return ProbeScript(metrics={"value": float(x)}, **more)


def number_of(trial_id: str) -> int:
    return int(trial_id.rsplit("-", 1)[1])


def attempts(run: Any) -> list[tuple[int, int, str]]:
    """(trial number, attempt, state) of every attempt in the record."""
    numbers = {row["id"]: row["number"] for row in run.trials}
    return [
        (numbers[row["trial_id"]], row["attempt"], row["state"])
        for row in record(run.store).attempts(run.result.campaign_id)
    ]


def events(run: Any, kind: str) -> list[dict[str, Any]]:
    rows = record(run.store).events(run.result.campaign_id, kind)
    return [json.loads(row["data"]) for row in rows]


def event_times(run: Any, kind: str) -> list[float]:
    return [row["at"] for row in record(run.store).events(run.result.campaign_id, kind)]


def specs(run: Any) -> dict[tuple[int, int], dse.JobSpec]:
    """(trial number, attempt) → the job spec the backend was given."""
    return {
        (number_of(job.spec.trial_id), job.spec.attempt): job.spec
        for job in run.backend.cluster.jobs.values()
    }


def outcomes(run: Any) -> list[tuple[int, str, str | None, float | None]]:
    return [(r["number"], r["status"], r["failure"], r["score"]) for r in run.trials]


def told(run: Any) -> list[list[tuple[int | None, dse.TrialStatus | None]]]:
    """What each ``observe`` call told the agent: (trial number, status)."""
    return [[(o.trial_number, o.status) for o in call] for call in run.agent.observe_calls]


class Alerts(dse.EngineListener):
    def __init__(self) -> None:
        self.messages: list[str] = []

    def on_alert(self, engine: dse.Engine, message: str) -> None:
        self.messages.append(message)


# -- classification -------------------------------------------------------------------------

RETRIED = [
    (State.KILLED, "killed"),
    (State.PREEMPTED, "preempted"),
    (State.NODE_FAIL, "node_failure"),
    (State.BOOT_FAIL, "boot_failure"),
    (State.LOST, "job_vanished"),
    (State.LAUNCH_ERROR, "launch_error"),
]
NOT_RETRIED = [
    (State.FAILED, "failed", "nonzero_exit", "exit code 1"),
    (State.OUT_OF_MEMORY, "failed", "out_of_memory", None),
    (State.INVALID, "failed", "invalid_job", None),
    (State.TIMEOUT, "budget_exhausted", "time_limit", None),
]


@pytest.mark.parametrize(("state", "failure"), RETRIED, ids=lambda v: str(getattr(v, "value", v)))
def test_an_interruption_with_no_retries_left_ends_the_trial_interrupted(
    run_campaign, state, failure
):
    run = run_campaign([1, 2], script=scripted({1: ProbeScript(state=state)}),
                       max_interruptions=0)

    assert outcomes(run) == [(1, "interrupted", failure, None), (2, "completed", None, 2.0)]
    assert attempts(run) == [(1, 1, state.value), (2, 1, "succeeded")]
    assert events(run, "retry") == []
    assert [(o.status, o.failure) for o in run.agent.observed] == [
        (dse.TrialStatus.INTERRUPTED, dse.FailureClass(failure)),
        (dse.TrialStatus.COMPLETED, None),
    ]


@pytest.mark.parametrize(("state", "failure"), RETRIED, ids=lambda v: str(getattr(v, "value", v)))
def test_an_interruption_is_retried_as_the_same_trial(run_campaign, state, failure):
    run = run_campaign(
        [1, 2], script=scripted({1: [ProbeScript(state=state), succeed(1)]})
    )

    assert outcomes(run) == [(1, "completed", None, 1.0), (2, "completed", None, 2.0)]
    assert attempts(run) == [(1, 1, state.value), (1, 2, "succeeded"), (2, 1, "succeeded")]
    assert events(run, "retry") == [{
        "trial": 1, "attempt": 2, "after": state.value, "class": failure, "node": "probe",
        "resumed": False,
    }]


@pytest.mark.parametrize(
    ("state", "status", "failure", "message"), NOT_RETRIED,
    ids=lambda v: str(getattr(v, "value", v)),
)
def test_a_reproducible_end_is_classified_once_and_never_retried(
    run_campaign, state, status, failure, message
):
    run = run_campaign([1, 2], script=scripted({1: [ProbeScript(state=state), succeed(1)]}))

    rows = run.trials
    assert outcomes(run) == [(1, status, failure, None), (2, "completed", None, 2.0)]
    assert rows[0]["message"] == message
    assert attempts(run) == [(1, 1, state.value), (2, 1, "succeeded")]
    assert events(run, "retry") == []
    assert run.result.stats.retries == 0


def test_a_clean_exit_is_scored_and_recorded_as_succeeded(run_campaign):
    run = run_campaign([1], script=scripted({1: succeed(4.5)}), max_interruptions=0)

    assert outcomes(run) == [(1, "completed", None, 4.5)]
    assert attempts(run) == [(1, 1, "succeeded")]


def test_a_cancel_from_outside_the_campaign_is_an_interruption_and_retried(run_campaign):
    # Nobody in this campaign asked for it (an operator, scancel): the trial did nothing
    # wrong, so its end is an interruption and the same trial runs again.
    run = run_campaign(
        [1, 2], script=scripted({1: [ProbeScript(state=State.CANCELLED), succeed(1)]})
    )

    assert outcomes(run) == [(1, "completed", None, 1.0), (2, "completed", None, 2.0)]
    assert attempts(run) == [(1, 1, "cancelled"), (1, 2, "succeeded"), (2, 1, "succeeded")]
    rows = record(run.store).events(run.result.campaign_id, "retry")
    retry = [json.loads(e["data"]) for e in rows]
    assert [(r["trial"], r["class"]) for r in retry] == [(1, "cancelled_outside")]


@pytest.mark.parametrize(
    ("script", "failure", "message"),
    [
        (ProbeScript(metrics={"other": 1.0}), "missing_metric", "metric 'value' is missing"),
        (ProbeScript(metrics={"value": 1.0}, complete=False), "incomplete_output",
         "result is not marked complete (complete is false)"),
        (ProbeScript(metrics=None), "no_result", "no result.json"),
    ],
    ids=["missing_metric", "incomplete_output", "no_result"],
)
def test_bad_output_of_a_clean_exit_is_a_failure_without_retry(
    run_campaign, script, failure, message
):
    run = run_campaign([1], script=scripted({1: [script, succeed(1)]}))

    assert outcomes(run) == [(1, "failed", failure, None)]
    assert run.trials[0]["message"] == message
    assert attempts(run) == [(1, 1, "succeeded")]
    assert events(run, "retry") == []


# -- retrying the same trial ----------------------------------------------------------------


def test_a_trial_interrupted_twice_completes_as_one_trial(run_campaign):
    script = scripted({1: [
        ProbeScript(state=State.PREEMPTED),
        ProbeScript(state=State.NODE_FAIL, node="n2"),
        succeed(7),
    ]})

    run = run_campaign(itertools.count(1), script=script, max_trials=2)

    assert outcomes(run) == [(1, "completed", None, 7.0), (2, "completed", None, 2.0)]
    assert run.result.end_reason == "max_trials"
    assert (run.result.stats.steps, run.result.stats.started) == (2, 2)
    assert run.result.stats.retries == 2
    assert run.agent.pulled == 2
    assert attempts(run) == [
        (1, 1, "preempted"), (1, 2, "node_fail"), (1, 3, "succeeded"), (2, 1, "succeeded"),
    ]
    nodes = [row["node"] for row in record(run.store).attempts(run.result.campaign_id)]
    assert nodes == ["probe", "n2", "probe", "probe"]
    assert events(run, "retry") == [
        {"trial": 1, "attempt": 2, "after": "preempted", "class": "preempted",
         "node": "probe", "resumed": False},
        {"trial": 1, "attempt": 3, "after": "node_fail", "class": "node_failure",
         "node": "n2", "resumed": False},
    ]
    jobs = specs(run)
    first, third = jobs[1, 1], jobs[1, 3]
    assert third.trial_id == first.trial_id == "probe-campaign-1-1"
    assert third.trial_dir == first.trial_dir
    assert third.checkpoint_dir == first.checkpoint_dir
    assert third.env["DSE_ATTEMPT"] == "3"
    assert "n2" in third.avoid_nodes
    assert first.avoid_nodes == ()
    assert jobs[1, 2].avoid_nodes == ("probe",)
    assert run.batches == [[1], [1], [1], [2]]


def test_every_node_that_interrupted_a_trial_is_avoided_by_its_later_attempts(run_campaign):
    # JobSpec.avoid_nodes: "nodes not to run on (they interrupted this trial or many others)".
    script = scripted({1: [
        ProbeScript(state=State.NODE_FAIL, node="n1"),
        ProbeScript(state=State.NODE_FAIL, node="n2"),
        succeed(1),
    ]})

    run = run_campaign([1], script=script)

    jobs = specs(run)
    assert [jobs[1, a].avoid_nodes for a in (1, 2, 3)] == [(), ("n1",), ("n1", "n2")]


def test_max_interruptions_ends_the_trial_interrupted(run_campaign):
    run = run_campaign(
        [1, 2], script=scripted({1: ProbeScript(state=State.PREEMPTED)}), max_interruptions=2
    )

    assert outcomes(run) == [(1, "interrupted", "preempted", None), (2, "completed", None, 2.0)]
    assert attempts(run) == [
        (1, 1, "preempted"), (1, 2, "preempted"), (1, 3, "preempted"), (2, 1, "succeeded"),
    ]
    assert [e["attempt"] for e in events(run, "retry")] == [2, 3]
    assert run.result.stats.interrupted == 1
    assert told(run) == [
        [(1, dse.TrialStatus.INTERRUPTED)], [(2, dse.TrialStatus.COMPLETED)],
    ]


def test_the_message_of_an_exhausted_trial_names_its_class_and_max_interruptions(run_campaign):
    run = run_campaign(
        [1], script=scripted({1: ProbeScript(state=State.PREEMPTED)}), max_interruptions=2
    )

    assert run.trials[0]["message"] == "preempted; interrupted 3 times (max_interruptions = 2)"


def test_the_same_ambiguous_end_twice_is_a_confirmed_failure(run_campaign):
    killed = ProbeScript(state=State.KILLED, ambiguous=True)

    run = run_campaign([1, 2], script=scripted({1: [killed, killed, succeed(1)]}))

    assert outcomes(run) == [(1, "failed", "killed", None), (2, "completed", None, 2.0)]
    assert run.trials[0]["message"] == "confirmed: attempts 1 and 2 both ended killed"
    assert attempts(run) == [(1, 1, "killed"), (1, 2, "killed"), (2, 1, "succeeded")]
    assert len(events(run, "retry")) == 1
    assert told(run) == [[(1, dse.TrialStatus.FAILED)], [(2, dse.TrialStatus.COMPLETED)]]


def test_two_different_ambiguous_ends_are_retried(run_campaign):
    script = scripted({1: [
        ProbeScript(state=State.KILLED, ambiguous=True),
        ProbeScript(state=State.LOST, ambiguous=True),
        succeed(1),
    ]})

    run = run_campaign([1], script=script)

    assert outcomes(run) == [(1, "completed", None, 1.0)]
    assert attempts(run) == [(1, 1, "killed"), (1, 2, "lost"), (1, 3, "succeeded")]
    assert [e["after"] for e in events(run, "retry")] == ["killed", "lost"]


def test_a_confirmed_failure_names_the_attempts_that_ended_the_same_way(run_campaign):
    killed = ProbeScript(state=State.KILLED, ambiguous=True)
    script = scripted({1: [killed, ProbeScript(state=State.PREEMPTED), killed, succeed(1)]})

    run = run_campaign([1], script=script)

    assert attempts(run) == [(1, 1, "killed"), (1, 2, "preempted"), (1, 3, "killed")]
    assert outcomes(run) == [(1, "failed", "killed", None)]
    assert run.trials[0]["message"] == "confirmed: attempts 1 and 3 both ended killed"


# -- what the agent and the slots see -------------------------------------------------------


def test_waves_wait_for_a_retry_and_the_agent_hears_only_the_final_outcome(run_campaign):
    preempted = ProbeScript(state=State.PREEMPTED)
    script = scripted({1: [preempted, preempted, succeed(1)]})

    run = run_campaign(range(1, 5), script=script, max_parallelism=2)

    assert run.batches == [[1, 2], [1], [1], [3, 4]]
    assert told(run) == [
        [(1, dse.TrialStatus.COMPLETED), (2, dse.TrialStatus.COMPLETED)],
        [(3, dse.TrialStatus.COMPLETED), (4, dse.TrialStatus.COMPLETED)],
    ]
    assert [o.score for o in run.agent.observed] == [1.0, 2.0, 3.0, 4.0]


def test_rolling_tells_the_agent_of_a_retried_trial_once_after_its_last_attempt(run_campaign):
    script = scripted({
        1: [ProbeScript(state=State.PREEMPTED), succeed(1, passes=2)],
        2: succeed(2, passes=1),
    })

    run = run_campaign(range(1, 4), script=script, max_parallelism=2, mode="rolling")

    assert run.ends == {2: 2, 1: 4, 3: 3}
    assert told(run) == [
        [(2, dse.TrialStatus.COMPLETED)],
        [(3, dse.TrialStatus.COMPLETED)],
        [(1, dse.TrialStatus.COMPLETED)],
    ]


def test_a_retry_keeps_its_slot(run_campaign):
    script = scripted({
        1: [ProbeScript(state=State.PREEMPTED), succeed(1)],
        2: succeed(2, passes=3),
    })

    run = run_campaign(range(1, 7), script=script, max_parallelism=2, mode="rolling")

    assert run.backend.cluster.running_peak == 2
    assert run.batches[:3] == [[1, 2], [1], [3]]
    assert run.agent.pulled == 6
    assert [r["status"] for r in run.trials] == ["completed"] * 6
    assert [n for n, _, _ in attempts(run)] == [1, 1, 2, 3, 4, 5, 6]


# -- systematic interruptions ---------------------------------------------------------------


def _three_preempted(submitted: list[tuple[int, int, float]], clock: Any) -> Callable[..., Any]:
    """Trials 1-3 are preempted on their first attempt; every submission is logged."""
    calls: dict[int, int] = {}

    def script(params: Mapping[str, Any]) -> Sequence[ProbeScript]:
        x = params["x"]
        calls[x] = calls.get(x, 0) + 1
        submitted.append((x, calls[x], clock.now))
        if x <= 3:
            return [ProbeScript(state=State.PREEMPTED), succeed(x)]
        return [succeed(x)]

    return script


SYSTEMATIC = {
    "mode": "rolling",
    "max_parallelism": 3,
    "poll_interval": "10s",
    "interruption_threshold": 3,
    "interruption_window": "100s",
    "node_interruption_threshold": 100,
}


def test_systematic_interruptions_pause_dispatch_until_the_window_slides(
    run_campaign, fake_clock
):
    t0 = fake_clock.now
    submitted: list[tuple[int, int, float]] = []
    alerts = Alerts()

    run = run_campaign(
        range(1, 6), script=_three_preempted(submitted, fake_clock), listener=alerts,
        **SYSTEMATIC,
    )

    # All three preempted at t0+10. The window holds them until t0+110 included; the pass
    # at t0+120 resumes dispatch: the three retries first, then the new trials.
    assert submitted == [
        (1, 1, t0), (2, 1, t0), (3, 1, t0),
        (1, 2, t0 + 120), (2, 2, t0 + 120), (3, 2, t0 + 120),
        (4, 1, t0 + 130), (5, 1, t0 + 130),
    ]
    assert run.batches == [[1, 2, 3], [1, 2, 3], [4, 5]]
    assert events(run, "systematic_interruptions") == [
        {"count": 3, "window_s": 100.0, "paused": True}
    ]
    assert event_times(run, "systematic_interruptions") == [t0 + 10]
    assert events(run, "dispatch_resumed") == [{"count": 0}]
    assert event_times(run, "dispatch_resumed") == [t0 + 120]
    assert alerts.messages == [
        "3 interruptions in the last 100s; dispatch paused",
        "interruptions subsided; dispatch resumed",
    ]
    assert outcomes(run) == [(n, "completed", None, float(n)) for n in range(1, 6)]
    assert run.result.stats.paused is False


def test_without_pause_dispatch_goes_on_and_the_alert_is_still_recorded(
    run_campaign, fake_clock
):
    t0 = fake_clock.now
    submitted: list[tuple[int, int, float]] = []
    alerts = Alerts()

    run = run_campaign(
        range(1, 6), script=_three_preempted(submitted, fake_clock), listener=alerts,
        pause_on_interruptions=False, **SYSTEMATIC,
    )

    assert submitted == [
        (1, 1, t0), (2, 1, t0), (3, 1, t0),
        (1, 2, t0 + 10), (2, 2, t0 + 10), (3, 2, t0 + 10),
        (4, 1, t0 + 20), (5, 1, t0 + 20),
    ]
    assert events(run, "systematic_interruptions")[0] == {
        "count": 3, "window_s": 100.0, "paused": False,
    }
    assert event_times(run, "systematic_interruptions")[0] == t0 + 10
    assert alerts.messages[0] == "3 interruptions in the last 100s"
    assert events(run, "dispatch_resumed") == []
    assert outcomes(run) == [(n, "completed", None, float(n)) for n in range(1, 6)]


def test_one_episode_of_systematic_interruptions_is_reported_once(run_campaign, fake_clock):
    alerts = Alerts()

    run = run_campaign(
        range(1, 6), script=_three_preempted([], fake_clock), listener=alerts,
        pause_on_interruptions=False, **SYSTEMATIC,
    )

    assert events(run, "systematic_interruptions") == [
        {"count": 3, "window_s": 100.0, "paused": False}
    ]
    assert alerts.messages == ["3 interruptions in the last 100s"]


class _StopOnPause(dse.EngineListener):
    def on_alert(self, engine: dse.Engine, message: str) -> None:
        if message.endswith("dispatch paused"):
            engine.request_stop()


def test_a_stop_while_paused_records_the_waiting_retries_as_cancelled(
    run_campaign, fake_clock
):
    submitted: list[tuple[int, int, float]] = []

    run = run_campaign(
        range(1, 6), script=_three_preempted(submitted, fake_clock), listener=_StopOnPause(),
        **SYSTEMATIC,
    )

    assert run.result.status == "cancelled"
    assert [(x, attempt) for x, attempt, _ in submitted] == [(1, 1), (2, 1), (3, 1)]
    assert attempts(run) == [
        (1, 1, "preempted"), (1, 2, "cancelled"),
        (2, 1, "preempted"), (2, 2, "cancelled"),
        (3, 1, "preempted"), (3, 2, "cancelled"),
    ]
    assert [(r["status"], r["message"]) for r in run.trials] == [
        ("cancelled", "cancelled before submission"),
    ] * 3


class _PassLimit(dse.EngineListener):
    """Stops a run that spins: a paused engine must wait on its clock, not poll forever."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.passes = 0

    def on_pass(self, engine: dse.Engine) -> None:
        self.passes += 1
        if self.passes > self.limit:
            msg = f"still running after {self.limit} passes at t={engine.clock.time()}"
            raise RuntimeError(msg)


def test_a_pause_with_nothing_running_waits_on_the_clock(run_campaign, fake_clock):
    # The probe polls with no wait (poll interval 0): nothing but the engine advances the
    # fake clock, so a paused engine has to sleep until the window slides by itself.
    t0 = fake_clock.now
    submitted: list[tuple[int, int, float]] = []
    options = {k: v for k, v in SYSTEMATIC.items() if k != "poll_interval"}

    run = run_campaign(
        range(1, 6), script=_three_preempted(submitted, fake_clock), listener=_PassLimit(100),
        **options,
    )

    assert run.result.status == "completed"
    assert submitted[:3] == [(1, 1, t0), (2, 1, t0), (3, 1, t0)]
    retried_at = {at for x, attempt, at in submitted if attempt == 2}
    assert len(retried_at) == 1
    assert retried_at.pop() > t0 + 100


# -- suspect nodes --------------------------------------------------------------------------


def _bad_node_script() -> Callable[..., Any]:
    return scripted({
        1: [ProbeScript(state=State.PREEMPTED, node="bad"), succeed(1, node="good")],
        2: [ProbeScript(state=State.PREEMPTED, node="bad"), succeed(2, node="good")],
        3: [ProbeScript(state=State.PREEMPTED, node="n3"), succeed(3, node="good")],
    })


def test_a_node_that_interrupts_several_trials_is_reported_and_avoided(run_campaign):
    alerts = Alerts()

    run = run_campaign(
        range(1, 5), script=_bad_node_script(), listener=alerts, max_parallelism=2,
        node_interruption_threshold=2,
    )

    assert events(run, "suspect_node") == [{"node": "bad", "trials": [1, 2]}]
    assert alerts.messages == ["node bad interrupted 2 trials; avoiding it from now on"]
    jobs = specs(run)
    assert jobs[1, 1].avoid_nodes == jobs[2, 1].avoid_nodes == ()
    assert jobs[1, 2].avoid_nodes == jobs[2, 2].avoid_nodes == ("bad",)
    # A later retry of another trial avoids the suspect node as well as its own.
    assert jobs[3, 2].avoid_nodes == ("bad", "n3")
    assert outcomes(run) == [(n, "completed", None, float(n)) for n in range(1, 5)]


def test_new_trials_avoid_a_suspect_node(run_campaign):
    run = run_campaign(
        range(1, 5), script=_bad_node_script(), max_parallelism=2,
        node_interruption_threshold=2,
    )

    jobs = specs(run)
    assert [jobs[n, 1].avoid_nodes for n in (3, 4)] == [("bad",), ("bad",)]


def test_interruptions_on_one_node_below_the_threshold_raise_no_alert(run_campaign):
    alerts = Alerts()

    run = run_campaign(
        range(1, 5), script=_bad_node_script(), listener=alerts, max_parallelism=2,
        node_interruption_threshold=3,
    )

    assert events(run, "suspect_node") == []
    assert alerts.messages == []
    assert specs(run)[3, 2].avoid_nodes == ("n3",)


# -- retries and the rest of the engine -----------------------------------------------------


def test_a_duplicate_of_a_trial_being_retried_waits_for_its_final_outcome(run_campaign):
    script = scripted({1: [ProbeScript(state=State.PREEMPTED), succeed(1, passes=1)]})

    run = run_campaign([1, 2, 1], script=script, max_parallelism=2, mode="rolling")

    rows = run.trials
    assert outcomes(run) == [
        (1, "completed", None, 1.0), (2, "completed", None, 2.0), (3, "cached", None, 1.0),
    ]
    assert rows[2]["cache_of"] == rows[0]["id"]
    assert run.batches == [[1, 2], [1]]
    assert told(run) == [
        [(2, dse.TrialStatus.COMPLETED)],
        [(1, dse.TrialStatus.COMPLETED), (3, dse.TrialStatus.COMPLETED)],
    ]


def test_a_retry_still_runs_once_max_trials_is_reached(run_campaign):
    script = scripted({1: [ProbeScript(state=State.PREEMPTED), succeed(1)]})

    run = run_campaign(
        itertools.count(1), script=script, max_parallelism=2, mode="rolling", max_trials=2
    )

    assert run.result.end_reason == "max_trials"
    assert outcomes(run) == [(1, "completed", None, 1.0), (2, "completed", None, 2.0)]
    assert attempts(run) == [(1, 1, "preempted"), (1, 2, "succeeded"), (2, 1, "succeeded")]


class _CancelNotHonoured(ProbeBackend):
    """A backend whose cancel races with the end of the job: the job ends as scripted."""

    def _cancel(self, job_ids: Sequence[str]) -> None:
        pass


class _StopAfterFirstPass(dse.EngineListener):
    def on_pass(self, engine: dse.Engine) -> None:
        engine.request_stop()


def test_an_interruption_reported_while_stopping_is_not_retried(make_campaign, fake_clock):
    campaign = make_campaign()
    backend = _CancelNotHonoured(
        scripted({1: [ProbeScript(passes=2, state=State.PREEMPTED), succeed(1)]}),
        clock=fake_clock,
    )
    store = dse.Store(campaign.workspace / "dse.sqlite")
    try:
        result = dse.Engine(
            campaign, agent=ScriptedAgent([{"x": 1}]), backend=backend, store=store,
            clock=fake_clock, listener=_StopAfterFirstPass(),
        ).run()

        rows = record(store).trials(result.campaign_id)
        tries = record(store).attempts(result.campaign_id)
        assert result.status == "cancelled"
        assert [(r["status"], r["ended_at"] is not None) for r in rows] == [
            ("cancelled", True)
        ]
        assert [(a["attempt"], a["state"]) for a in tries] == [(1, "preempted")]
    finally:
        store.close()
