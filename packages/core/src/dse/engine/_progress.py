"""A trial's learning curve: the lines its attempts append to ``progress.jsonl``.

A workload reports progress with :func:`dse.trial.report_progress` (or by appending the same
JSON lines itself); the controller reads what is new in each running trial's file at every
polling pass (:class:`ProgressReader`) and records each point once per attempt and step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._numbers import (
    INT64_MAX,
    MAX_TIME,
    finite_float,
    is_int64,
    is_number,
    is_time,
    is_whole,
)
from dse.model._trialfile import MAX_TRIAL_FILE_BYTES, UnsafeTrialFile, read_trial_file_from
from dse.plugins._environment import PROGRESS_FILE

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dse.engine._journal import Journal
    from dse.engine._live import LiveTrial

PASS_BYTES = 1 << 20
"""The most read of one trial's file in one pass: the rest waits for the next pass."""
MAX_PROGRESS_BYTES = MAX_TRIAL_FILE_BYTES
"""The most read of one trial's file in all: a curve longer than 16 MiB is a workload writing
the wrong thing (one event says so; the points up to there are kept)."""


@dataclass(frozen=True, slots=True)
class ProgressPoint:
    """One line of a progress file: the metrics after *step* (of *attempt*, at *at*)."""

    step: int
    metrics: dict[str, Any]
    attempt: int | None
    at: float | None


def parse_progress(data: bytes) -> tuple[list[ProgressPoint], int, list[str]]:
    """The whole lines of *data*: their points, how many bytes they took (up to and with the
    last newline: a line still being written waits), and why each refused line was refused."""
    end = data.rfind(b"\n") + 1
    points: list[ProgressPoint] = []
    errors: list[str] = []
    for raw in data[:end].splitlines():
        if not raw.strip():
            continue
        try:
            points.append(_point(json.loads(raw)))
        except (ValueError, UnicodeDecodeError) as exc:
            errors.append(str(exc).splitlines()[0][:200])
    return points, end, errors


def _point(line: Any) -> ProgressPoint:
    """One line's point; every number bounded to what the record keeps (a step or an
    attempt SQLite holds, a time a date can show, a metric a float holds: NaN and the
    infinities are kept, the stopping rule takes them as the worst)."""
    if not isinstance(line, dict):
        raise ValueError("a progress line must be a JSON object")
    step, metrics = line.get("step"), line.get("metrics")
    if not is_int64(step) or step < 0:
        raise ValueError(f"'step' must be a whole number from 0 to {INT64_MAX},"
                         f" not {_shown(step)}")
    if not isinstance(metrics, dict):
        raise ValueError("'metrics' must be an object of numbers")
    for key, value in metrics.items():
        if not is_number(value) or (is_whole(value) and finite_float(value) is None):
            raise ValueError(f"'metrics': {str(key)[:40]!r} must be a number a float holds,"
                             f" not {_shown(value)}")
    attempt, at = line.get("attempt"), line.get("at")
    if attempt is not None and (not is_int64(attempt) or attempt < 1):
        raise ValueError(f"'attempt' must be a whole number from 1 to {INT64_MAX},"
                         f" not {_shown(attempt)}")
    if at is not None and not is_time(at):
        raise ValueError(f"'at' must be seconds since the epoch (0 to {MAX_TIME:.0f}),"
                         f" not {_shown(at)}")
    return ProgressPoint(step, {str(k): v for k, v in metrics.items()}, attempt,
                         None if at is None else float(at))


def recorded_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """*metrics* as the record keeps them: JSON has no NaN nor infinity, so a metric that is
    not a finite number is ``null`` there (the stopping rule took it as the worst)."""
    return {k: None if finite_float(v) is None else v for k, v in metrics.items()}


def _shown(value: Any) -> str:
    """*value* as the line wrote it, clipped (a 400-digit number is not repeated whole)."""
    if is_whole(value) and value.bit_length() > 128:
        # JSON loads no integer of more digits than str() writes.
        return f"a {len(str(abs(value)))}-digit integer"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class ProgressReader:
    """How far each running trial's progress file was read: owns the offsets, and which
    trials were told of a file it will not read."""

    def __init__(self) -> None:
        self._read: dict[int, int] = {}
        """Trial row -> bytes of its file already recorded."""
        self._refused: set[int] = set()

    def read(self, trials: Iterable[LiveTrial], journal: Journal
             ) -> list[tuple[LiveTrial, list[ProgressPoint]]]:
        """Record the new points of each of *trials* (running, with a directory); return
        them, by trial."""
        now = journal.now()
        seen: dict[int, int] = {}
        new: list[tuple[LiveTrial, list[ProgressPoint]]] = []
        for trial in trials:
            row = trial.row_id
            offset = self._read.get(row, 0)
            seen[row] = offset
            if trial.trial_dir is None or row in self._refused:
                continue
            seen[row] = self._read_one(trial, offset, journal, now, new)
        self._read = seen  # the trials no longer running are forgotten
        return new

    def _read_one(self, trial: LiveTrial, offset: int, journal: Journal, now: float,
                  new: list[tuple[LiveTrial, list[ProgressPoint]]]) -> int:
        assert trial.trial_dir is not None
        size = min(PASS_BYTES, MAX_PROGRESS_BYTES - offset)
        if size <= 0:
            self._refuse(trial, journal, f"{PROGRESS_FILE} is longer than"
                         f" {MAX_PROGRESS_BYTES} bytes: the rest is not read")
            return offset
        try:
            data = read_trial_file_from(trial.trial_dir, PROGRESS_FILE, offset, size)
        except FileNotFoundError:
            return offset
        except (UnsafeTrialFile, OSError) as exc:
            self._refuse(trial, journal, str(exc))
            return offset
        points, used, errors = parse_progress(data)
        if used == 0 and len(data) == size:  # one line longer than a pass reads
            self._refuse(trial, journal, f"{PROGRESS_FILE}: a line longer than {size} bytes")
            return offset
        # A point of an attempt that has not run yet: no attempt of the trial wrote it.
        errors += [f"'attempt' {pt.attempt} is past the trial's attempt {trial.attempt}"
                   for pt in points if (pt.attempt or 0) > trial.attempt]
        points = [pt for pt in points if (pt.attempt or 0) <= trial.attempt]
        if points:
            new.append((trial, points))
        for point in points:
            journal.batch.add_progress(
                row=trial.row_id, attempt=point.attempt or trial.attempt,
                step=point.step, metrics=json.dumps(recorded_metrics(point.metrics)),
                at=point.at if point.at is not None else now)
        if errors:
            journal.event(trial.row_id, "progress_malformed", {
                "trial": trial.number, "lines": len(errors), "first": errors[0]})
        return offset + used

    def _refuse(self, trial: LiveTrial, journal: Journal, why: str) -> None:
        self._refused.add(trial.row_id)
        journal.event(trial.row_id, "progress_refused", {"trial": trial.number, "reason": why})
