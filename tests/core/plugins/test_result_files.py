"""What the default environment makes of the ``result.json`` a workload left behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import dse

GOOD = b'{"complete": true, "metrics": {"time_ms": 1.5}}'

BROKEN: dict[str, tuple[bytes, dse.FailureClass]] = {
    "empty": (b"", dse.FailureClass.MALFORMED_RESULT),
    "blank": (b"  \n", dse.FailureClass.MALFORMED_RESULT),
    "truncated": (b'{"complete": tr', dse.FailureClass.MALFORMED_RESULT),
    "truncated after a value": (b'{"complete": true', dse.FailureClass.MALFORMED_RESULT),
    "not JSON": (b"time_ms=1.5\n", dse.FailureClass.MALFORMED_RESULT),
    "trailing garbage": (GOOD + b" }", dse.FailureClass.MALFORMED_RESULT),
    "not UTF-8": (b'{"complete": true, "metrics": {"\xff": 1}}', dse.FailureClass.MALFORMED_RESULT),
    "a JSON list": (b"[1.5]", dse.FailureClass.MALFORMED_RESULT),
    "a JSON number": (b"1.5", dse.FailureClass.MALFORMED_RESULT),
    "nested too deep": (b"[" * 100_000, dse.FailureClass.MALFORMED_RESULT),
    "an integer Python refuses": (
        b'{"complete": true, "metrics": {"time_ms": ' + b"1" * 5000 + b"}}",
        dse.FailureClass.MALFORMED_RESULT,
    ),
    "metrics not an object": (
        b'{"complete": true, "metrics": [1.5]}',
        dse.FailureClass.MALFORMED_RESULT,
    ),
    "complete false": (
        b'{"complete": false, "metrics": {"time_ms": 1.5}}',
        dse.FailureClass.INCOMPLETE_OUTPUT,
    ),
    "complete as a string": (
        b'{"complete": "true", "metrics": {"time_ms": 1.5}}',
        dse.FailureClass.INCOMPLETE_OUTPUT,
    ),
    "no complete marker": (b'{"metrics": {"time_ms": 1.5}}', dse.FailureClass.INCOMPLETE_OUTPUT),
    "no metrics": (b'{"complete": true}', dse.FailureClass.MISSING_METRIC),
    "objective metric missing": (
        b'{"complete": true, "metrics": {"gflops": 800}}',
        dse.FailureClass.MISSING_METRIC,
    ),
    "NaN": (b'{"complete": true, "metrics": {"time_ms": NaN}}', dse.FailureClass.INVALID_METRIC),
    "Infinity": (
        b'{"complete": true, "metrics": {"time_ms": Infinity}}',
        dse.FailureClass.INVALID_METRIC,
    ),
    "-Infinity": (
        b'{"complete": true, "metrics": {"time_ms": -Infinity}}',
        dse.FailureClass.INVALID_METRIC,
    ),
    "overflowing float": (
        b'{"complete": true, "metrics": {"time_ms": 1e400}}',
        dse.FailureClass.INVALID_METRIC,
    ),
    "integer beyond float range": (
        b'{"complete": true, "metrics": {"time_ms": 1' + b"0" * 400 + b"}}",
        dse.FailureClass.INVALID_METRIC,
    ),
    "a numeric string": (
        b'{"complete": true, "metrics": {"time_ms": "1.0"}}',
        dse.FailureClass.INVALID_METRIC,
    ),
    "true": (b'{"complete": true, "metrics": {"time_ms": true}}', dse.FailureClass.INVALID_METRIC),
    "null": (b'{"complete": true, "metrics": {"time_ms": null}}', dse.FailureClass.INVALID_METRIC),
    "a list": (
        b'{"complete": true, "metrics": {"time_ms": [1.5]}}',
        dse.FailureClass.INVALID_METRIC,
    ),
}


@pytest.fixture
def evaluate(tmp_path: Path) -> Callable[..., dse.Evaluation]:
    """Score a trial directory as the engine does after its job exited 0.

    ``contents`` is written as the trial's ``result.json`` (``None``: write none);
    ``objectives`` are metric names to minimise (default ``time_ms``).
    """

    def run(contents: bytes | None, objectives: tuple[str, ...] = ("time_ms",)) -> dse.Evaluation:
        environment = dse.CommandEnvironment(
            dse.EnvironmentConfig(command=("python", "kernel.py")),
            [dse.Objective(name) for name in objectives],
        )
        trial_dir = tmp_path / "trial"
        trial_dir.mkdir(exist_ok=True)
        job = environment.prepare(
            dse.TrialInfo("kernels-1-7", 7, 1, {"tile_m": 64}, trial_dir, data_version="v2")
        )
        if contents is not None:
            (trial_dir / "result.json").write_bytes(contents)
        return environment.evaluate(job, dse.JobStatus("4711", dse.JobState.SUCCEEDED, exit_code=0))

    return run


def test_a_complete_result_is_scored_with_every_finite_metric(evaluate):
    evaluation = evaluate(
        b'{"complete": true, "data_version": "v2", "note": "warm cache",'
        b' "metrics": {"time_ms": 1.5, "gflops": 812, "power_w": NaN, "label": "fast"}}'
    )

    assert evaluation.ok
    assert evaluation.failure is None
    assert evaluation.metrics == {"time_ms": 1.5, "gflops": 812.0}


def test_a_result_with_a_byte_order_mark_is_scored(evaluate):
    evaluation = evaluate(b"\xef\xbb\xbf" + GOOD)

    assert evaluation.ok
    assert evaluation.metrics == {"time_ms": 1.5}


def test_a_trial_that_wrote_no_result_is_no_result(evaluate):
    evaluation = evaluate(None)

    assert evaluation.failure is dse.FailureClass.NO_RESULT
    assert evaluation.message == "no result.json"


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_broken_result_gets_its_own_class_and_a_one_line_message(evaluate, case):
    contents, expected = BROKEN[case]

    evaluation = evaluate(contents)

    assert evaluation.failure is expected
    assert not evaluation.ok
    assert evaluation.message
    assert "\n" not in evaluation.message
    assert len(evaluation.message) < 200


@pytest.mark.parametrize(
    ("contents", "says"),
    [
        (b"", "result.json is empty"),
        (b'{"complete": tr', "result.json is truncated"),
        (b'{"complete": true, "metrics": {"time', "result.json is truncated"),
        (b"time_ms=1.5", "result.json is not valid JSON"),
        (b"\x00\x9f{}", "result.json is not UTF-8 (byte 0x9f at offset 1)"),
        (b"[1.5]", "result.json holds a list, not a JSON object"),
        (b'{"metrics": {"time_ms": 1}}', "not marked complete (it has no 'complete' marker)"),
        (b'{"complete": false}', "not marked complete (complete is false)"),
        (b'{"complete": true, "metrics": {}}', "metric 'time_ms' is missing"),
        (b'{"complete": true, "metrics": {"time_ms": NaN}}', "'time_ms' is NaN, not a finite"),
        (b'{"complete": true, "metrics": {"time_ms": -Infinity}}', "'time_ms' is -Infinity"),
        (b'{"complete": true, "metrics": {"time_ms": "1.0"}}', "is the string '1.0'"),
        (b'{"complete": true, "metrics": {"time_ms": null}}', "'time_ms' is null"),
    ],
)
def test_the_message_says_what_is_wrong_with_the_file(evaluate, contents, says):
    message = evaluate(contents).message

    assert says in message


def test_a_result_that_is_a_directory_is_not_a_regular_file(evaluate, tmp_path):
    (tmp_path / "trial" / "result.json").mkdir(parents=True)

    evaluation = evaluate(None)

    assert evaluation.failure is dse.FailureClass.RESULT_NOT_REGULAR
    assert evaluation.message == "result.json is a directory, not a regular file"


def test_every_objective_metric_must_be_present_and_finite(evaluate):
    both = ("time_ms", "gflops")

    missing = evaluate(GOOD, objectives=both)
    invalid = evaluate(
        b'{"complete": true, "metrics": {"time_ms": 1.5, "gflops": Infinity}}', objectives=both
    )
    good = evaluate(
        b'{"complete": true, "metrics": {"time_ms": 1.5, "gflops": 800}}', objectives=both
    )

    assert (missing.failure, missing.message) == (
        dse.FailureClass.MISSING_METRIC,
        "metric 'gflops' is missing",
    )
    assert missing.metrics == {"time_ms": 1.5}
    assert invalid.failure is dse.FailureClass.INVALID_METRIC
    assert invalid.metrics == {"time_ms": 1.5}
    assert good.ok
    assert good.metrics == {"time_ms": 1.5, "gflops": 800.0}


def test_the_data_version_the_trial_read_is_kept_in_the_document(tmp_path):
    from dse.plugins._environment import read_result, reported_data_version

    path = tmp_path / "result.json"
    path.write_bytes(b'{"complete": true, "metrics": {"time_ms": 1}, "data_version": "v3"}')

    document = read_result(path)

    assert not isinstance(document, dse.Evaluation)
    assert reported_data_version(document) == "v3"
    assert reported_data_version({"complete": True}) is None


def test_a_result_written_before_its_attempt_started_is_never_scored(tmp_path):
    environment = dse.CommandEnvironment(
        dse.EnvironmentConfig(command=("python", "kernel.py")), [dse.Objective("time_ms")])
    trial_dir = tmp_path / "trial"
    trial_dir.mkdir()
    job = environment.prepare(dse.TrialInfo("kernels-1-7", 7, 2, {}, trial_dir))
    result = trial_dir / "result.json"
    result.write_bytes(GOOD)
    written = result.stat().st_mtime

    def evaluate(started_at: float | None) -> dse.Evaluation:
        return environment.evaluate(job, dse.JobStatus(
            "4711", dse.JobState.SUCCEEDED, exit_code=0, started_at=started_at))

    # An hour older than the attempt: an earlier attempt or run left it.
    stale = evaluate(written + 3600)
    assert (stale.failure, stale.metrics) == (dse.FailureClass.STALE_RESULT, {})
    assert stale.message is not None
    assert stale.message.startswith("result.json was last written at ")
    assert stale.message.endswith(", 3600 s before its attempt started: an earlier attempt or"
                                  " run left it, and it is never scored")
    assert not dse.reusable(dse.TrialStatus.FAILED, stale.failure)  # the attempt wrote none
    # Within the clocks' slack of the start, later, or with no start known: the attempt's.
    for started_at in (written + 4.0, written - 60, None):
        assert evaluate(started_at).metrics == {"time_ms": 1.5}, started_at
