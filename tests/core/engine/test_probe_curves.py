"""The probe's learning curves (``ProbeScript.progress``): with trial directories it appends
to ``progress.jsonl`` the points whose time has come on its clock, in the lines the controller
reads; saves a checkpoint before the points that say so; reports nothing past a cancel; and an
attempt that finds a checkpoint resumes the curve after it."""

from __future__ import annotations

import json
from pathlib import Path

from dse import JobSpec, JobState
from dse.engine._progress import parse_progress
from dse.testing import FakeClock, ProbeBackend, ProbePoint, ProbeScript
from dse.trial import CHECKPOINT_MARK, PROGRESS_FILE

CURVE = tuple(
    ProbePoint(float(step), step, {"loss": 1.0 / step}, checkpoint=step == 2)
    for step in range(1, 5)
)
"""Steps 1 to 4 at 1 s apart; step 2 checkpointed."""


def probe(tmp_path: Path, *, write_results: bool = True) -> tuple[ProbeBackend, FakeClock]:
    clock = FakeClock(start=100.0)

    def script(params: dict[str, int]) -> ProbeScript:
        return ProbeScript(seconds=4.5, metrics={"loss": 0.2}, progress=CURVE)

    return ProbeBackend(script, clock=clock, write_results=write_results), clock


def spec(tmp_path: Path, attempt: int = 1) -> JobSpec:
    trial_dir = tmp_path / "t1"
    trial_dir.mkdir(exist_ok=True)
    return JobSpec("t1", attempt, {"x": 1}, trial_dir)


def points(tmp_path: Path) -> list[tuple[int, int | None, float | None]]:
    """(step, attempt, at) of each line of the trial's progress file, as the controller
    parses them (every line whole and valid)."""
    data = (tmp_path / "t1" / PROGRESS_FILE).read_bytes()
    parsed, used, errors = parse_progress(data)
    assert (used, errors) == (len(data), [])
    return [(p.step, p.attempt, p.at) for p in parsed]


def test_each_poll_appends_the_points_whose_time_has_come(tmp_path: Path) -> None:
    backend, clock = probe(tmp_path)
    backend.submit([spec(tmp_path)])
    backend.poll()
    assert not (tmp_path / "t1" / PROGRESS_FILE).exists()
    clock.sleep(2.5)
    backend.poll()
    assert points(tmp_path) == [(1, 1, 101.0), (2, 1, 102.0)]
    # A probe that waits wakes at the next point, not only at the end.
    assert backend.wait(3600.0)
    assert clock.now == 103.0
    clock.sleep(10.0)
    (status,) = backend.poll()
    assert status.state is JobState.SUCCEEDED
    assert status.ended_at == 104.5
    assert [p[0] for p in points(tmp_path)] == [1, 2, 3, 4]
    line = json.loads((tmp_path / "t1" / PROGRESS_FILE).read_text().splitlines()[0])
    assert line == {"step": 1, "metrics": {"loss": 1.0}, "attempt": 1, "at": 101.0}


def test_a_checkpoint_is_saved_before_its_point_and_dated_at_it(tmp_path: Path) -> None:
    backend, clock = probe(tmp_path)
    backend.submit([spec(tmp_path)])
    clock.sleep(1.5)
    backend.poll()
    mark = tmp_path / "t1" / "checkpoint" / CHECKPOINT_MARK
    assert not mark.exists()
    clock.sleep(1.0)
    backend.poll()
    assert mark.read_text() == "1\n"  # the attempt that saved it, as dse.trial writes it
    assert mark.stat().st_mtime == 102.0
    assert (tmp_path / "t1" / "checkpoint" / "probe-step").read_text() == "2\n"


def test_a_cancelled_job_reports_nothing_after_its_cancel(tmp_path: Path) -> None:
    backend, clock = probe(tmp_path)
    (job_id,) = backend.submit([spec(tmp_path)])
    clock.sleep(1.5)
    backend.cancel([job_id])
    clock.sleep(10.0)
    (status,) = backend.poll()
    assert status.state is JobState.CANCELLED
    assert points(tmp_path) == [(1, 1, 101.0)]


def test_an_attempt_resumes_the_curve_after_its_checkpoint(tmp_path: Path) -> None:
    backend, clock = probe(tmp_path)
    (job_id,) = backend.submit([spec(tmp_path)])
    clock.sleep(3.5)  # steps 1 to 3 reported, step 2 checkpointed
    backend.poll()
    backend.cancel([job_id])
    backend.poll()
    clock.sleep(100.0)  # now 203.5: the next attempt starts where step 2 was saved (2 s in)
    backend.submit([spec(tmp_path, attempt=2)])
    clock.sleep(10.0)
    (status,) = backend.poll()
    assert status.state is JobState.SUCCEEDED
    assert status.ended_at == 203.5 + 4.5 - 2.0
    assert points(tmp_path) == [(1, 1, 101.0), (2, 1, 102.0), (3, 1, 103.0),
                                (3, 2, 204.5), (4, 2, 205.5)]


def test_without_trial_directories_no_curve_is_played(tmp_path: Path) -> None:
    backend, clock = probe(tmp_path, write_results=False)
    backend.submit([spec(tmp_path)])
    clock.sleep(10.0)
    (status,) = backend.poll()
    assert status.state is JobState.SUCCEEDED
    assert status.ended_at == 104.5
    assert list((tmp_path / "t1").iterdir()) == []
