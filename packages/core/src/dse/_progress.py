"""A trial's learning curve: the lines its attempts append to ``progress.jsonl``.

A workload reports progress with :func:`dse.trial.report_progress` (or by appending the same
JSON lines itself); the controller reads what is new in each running trial's file at every
polling pass (:class:`ProgressReader`) and records each point once per attempt and step.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse._environment import PROGRESS_FILE
from dse._trialfile import MAX_TRIAL_FILE_BYTES, UnsafeTrialFile, read_trial_file_from

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dse._journal import Journal
    from dse._live import LiveTrial

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
    if not isinstance(line, dict):
        raise ValueError("a progress line must be a JSON object")
    step, metrics = line.get("step"), line.get("metrics")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"'step' must be a whole number >= 0, not {step!r}")
    if not isinstance(metrics, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in metrics.values()
    ):
        raise ValueError("'metrics' must be an object of numbers")
    attempt, at = line.get("attempt"), line.get("at")
    return ProgressPoint(
        step, {str(k): v for k, v in metrics.items()},
        attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
        float(at) if isinstance(at, int | float) and math.isfinite(at) else None,
    )


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
        if points:
            new.append((trial, points))
        for point in points:
            journal.batch.add_progress(
                row=trial.row_id, attempt=point.attempt or trial.attempt,
                step=point.step, metrics=json.dumps(point.metrics),
                at=point.at if point.at is not None else now)
        if errors:
            journal.event(trial.row_id, "progress_malformed", {
                "trial": trial.number, "lines": len(errors), "first": errors[0]})
        return offset + used

    def _refuse(self, trial: LiveTrial, journal: Journal, why: str) -> None:
        self._refused.add(trial.row_id)
        journal.event(trial.row_id, "progress_refused", {"trial": trial.number, "reason": why})
