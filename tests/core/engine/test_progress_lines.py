"""The lines of a progress file: whole lines only, each a point or a reason it is not."""

from __future__ import annotations

import json

from dse.engine._progress import parse_progress


def test_only_whole_lines_are_taken_and_the_rest_waits():
    data = b'{"step": 1, "metrics": {"loss": 2.5}}\n{"step": 2, "metr'
    points, used, errors = parse_progress(data)
    assert [(p.step, p.metrics) for p in points] == [(1, {"loss": 2.5})]
    assert used == data.index(b"\n") + 1
    assert errors == []
    assert parse_progress(b'{"step": 2, "metr') == ([], 0, [])


def test_attempt_and_time_are_optional_and_taken_when_given():
    lines = [{"step": 0, "metrics": {}, "attempt": 3, "at": 12.5}, {"step": 4, "metrics": {}}]
    points, _, _ = parse_progress("".join(json.dumps(d) + "\n" for d in lines).encode())
    assert [(p.attempt, p.at) for p in points] == [(3, 12.5), (None, None)]


def test_each_refused_line_says_why_and_the_others_are_kept():
    lines = [b"not json", b"[1, 2]", b'{"step": -1, "metrics": {}}',
             b'{"step": true, "metrics": {}}', b'{"step": 1.5, "metrics": {}}',
             b'{"step": 1, "metrics": {"loss": "high"}}', b'{"step": 1, "metrics": [1]}',
             b'{"step": 1, "metrics": {"ok": false}}', b"", b"\xff\xfe",
             b'{"step": 7, "metrics": {"loss": NaN}}']
    points, used, errors = parse_progress(b"\n".join(lines) + b"\n")
    assert [p.step for p in points] == [7]  # a diverged value is a point of the curve
    assert len(errors) == 9  # every line but the blank one and the last
    assert "step" in errors[2]
    assert "metrics" in errors[5]
    assert used == len(b"\n".join(lines)) + 1
