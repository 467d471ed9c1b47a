"""The live view's ETA and running list, computed from a run's parts (no terminal): trials
still to start over the slots at the mean wall time so far, what those running have left,
the wall-clock ceiling first when it comes first; running trials longest first with their
attempt, elapsed time and node, and the ones submitted that have not started."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from dse import FailureClass, TrialEnd, TrialStatus
from dse.engine._live import LiveTrial
from dse.launch._console import eta_text, failure_line, running_text
from dse.model._budget import Budget, Earlier

if TYPE_CHECKING:
    from pathlib import Path

NOW = 1000.0


def trial(number: int, *, since: float | None, node: str | None = None,
          attempt: int = 1) -> LiveTrial:
    t = LiveTrial(number, number, number, 1, {"x": number}, f"h{number}")
    t.running_since, t.node, t.attempt = since, node, attempt
    return t


def engine(running: list[LiveTrial], *, max_trials: int | None = 10, steps: int = 4,
           slots: int = 2, budget: Budget | None = None, dispatched: int = 4) -> Any:
    return SimpleNamespace(
        campaign=SimpleNamespace(max_trials=max_trials, max_parallelism=slots, name="c"),
        stats=SimpleNamespace(steps=steps),
        ledger=SimpleNamespace(budget=budget or Budget(), trials=dispatched, started_at=900.0,
                               earlier=Earlier()),
        table=SimpleNamespace(running={f"j{t.number}": t for t in running}, queued=[]),
        clock=SimpleNamespace(time=lambda: NOW, monotonic=lambda: NOW), pool=None,
    )


def test_eta_spreads_what_is_left_over_the_slots() -> None:
    run = engine([trial(3, since=NOW - 4.0, node="n1"), trial(4, since=NOW - 1.0, node="n2")])
    # 6 to start at 10 s each, plus 6 s and 9 s left of the two running, over 2 slots.
    assert eta_text(run, 10.0) == "~37.5s: 6 to start, 2 running, ~10.0s a trial"


def test_submitted_trials_not_started_are_still_to_start() -> None:
    run = engine([trial(3, since=NOW - 4.0, node="n1"), trial(4, since=None)])
    assert eta_text(run, 10.0) == "~38.0s: 7 to start, 1 running, ~10.0s a trial"
    assert running_text(run) == "trial 3  4.0s  on n1\n1 submitted, not started yet"


def test_the_running_list_is_longest_first_and_names_a_retry() -> None:
    run = engine([trial(5, since=NOW - 2.0), trial(3, since=NOW - 75.0, node="n1", attempt=2)])
    assert running_text(run) == "trial 3 (attempt 2)  1m15s  on n1\ntrial 5  2.0s"


def test_without_a_bound_there_is_no_eta_and_the_wall_clock_ceiling_comes_first() -> None:
    assert eta_text(engine([], max_trials=None), 10.0) == "-"
    ceiling = Budget(wall_clock_s=200.0)  # 100 s into the run: 100 s left
    assert eta_text(engine([], max_trials=None, budget=ceiling), 10.0) == (
        "by the wall-clock ceiling, in 1m40s")
    assert eta_text(engine([], max_trials=100, budget=ceiling), 10.0) == (
        "~1m40s (the wall-clock ceiling first): 96 to start, 0 running, ~10.0s a trial")


def test_before_any_trial_ended_the_eta_says_so() -> None:
    assert eta_text(engine([trial(1, since=None)]), None) == (
        "7 trial(s) to start; no trial has ended yet")


def test_a_failure_line_names_its_log_directory_only_when_there_is_one(tmp_path: Path) -> None:
    made = tmp_path / "attempt-1"
    made.mkdir()
    end = TrialEnd(3, TrialStatus.FAILED, failure=FailureClass.NONZERO_EXIT,
                   message="exit code 3", attempts=1, node="n2", log=made)
    assert failure_line(end) == (
        f"trial 3 failed (nonzero_exit: exit code 3) after 1 attempt on n2; log {made}/")
    never = dataclasses.replace(end, log=tmp_path / "attempt-2", attempts=2, node=None)
    assert failure_line(never) == "trial 3 failed (nonzero_exit: exit code 3) after 2 attempts"
