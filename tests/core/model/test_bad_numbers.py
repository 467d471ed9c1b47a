"""Numbers handed in from outside are bounded where they enter (issue 38): a trial's progress
line, a campaign file and ``--set``, a backend's status, a reference typed on the command
line. SQLite keeps 64-bit integers and JSON has no NaN: nothing past either reaches the record.

(The same inputs through real ``dse run`` processes and trials: tests/backend_local/
test_bad_numbers.py.)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import dse
from dse.campaign._campaign import campaign_from_dict, load_campaign
from dse.engine._progress import parse_progress, recorded_metrics
from dse.model._numbers import INT64_MAX, finite_float, is_int64, record_number
from dse.model._space import Categorical, Space
from dse.model._units import MAX_DURATION, parse_duration
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent

BIG = 10**400
"""A number JSON and TOML write, and neither SQLite nor a float holds."""


def line(**doc: Any) -> bytes:
    return (json.dumps({"metrics": {"loss": 1.0}, **doc}) + "\n").encode()


@pytest.mark.parametrize(("doc", "field"), [
    ({"step": INT64_MAX + 1}, "'step'"),
    ({"step": -1}, "'step'"),
    ({"step": BIG}, "'step'"),
    ({"step": 1, "attempt": BIG}, "'attempt'"),
    ({"step": 1, "attempt": INT64_MAX + 1}, "'attempt'"),
    ({"step": 1, "attempt": 0}, "'attempt'"),
    ({"step": 1, "attempt": "2"}, "'attempt'"),
    ({"step": 1, "at": BIG}, "'at'"),
    ({"step": 1, "at": 1e300}, "'at'"),
    ({"step": 1, "at": -1}, "'at'"),
    ({"step": 1, "metrics": {"loss": BIG}}, "'metrics': 'loss'"),
    ({"step": 1, "metrics": {"loss": -BIG}}, "'metrics': 'loss'"),
])
def test_a_number_past_what_the_record_keeps_refuses_its_line_alone(
    doc: dict[str, Any], field: str
) -> None:
    good = line(step=1, attempt=1, at=1.7e9)
    points, used, errors = parse_progress(good + line(**doc) + good.replace(b"1,", b"2,", 1))
    assert [p.step for p in points] == [1, 2]  # the lines around it are kept
    assert used == len(good) * 2 + len(line(**doc))
    (error,) = errors
    assert error.startswith(field), error
    assert len(error) < 200  # a 400-digit number is named, not repeated


def test_the_largest_numbers_the_record_keeps_are_kept() -> None:
    doc = {"step": INT64_MAX, "attempt": INT64_MAX, "at": 253402300799,
           "metrics": {"big": 10**300, "whole": INT64_MAX + 1, "tiny": 5e-324}}
    (point,), _, errors = parse_progress(line(**doc))
    assert errors == []
    assert (point.step, point.attempt, point.at) == (INT64_MAX, INT64_MAX, 253402300799.0)
    assert point.metrics == doc["metrics"]


def test_nan_and_infinities_are_points_of_the_curve_recorded_as_null() -> None:
    data = b'{"step": 3, "metrics": {"a": NaN, "b": Infinity, "c": -Infinity, "d": 2}}\n'
    (point,), _, errors = parse_progress(data)
    assert errors == []
    assert math.isnan(point.metrics["a"])
    assert point.metrics["b"] == math.inf
    kept = recorded_metrics(point.metrics)
    assert kept == {"a": None, "b": None, "c": None, "d": 2}
    json.dumps(kept, allow_nan=False)  # what the record stores is JSON


def test_record_numbers_past_64_bits_name_nothing() -> None:
    assert record_number("12") == 12
    assert record_number("0009223372036854775807") == INT64_MAX
    assert record_number("9223372036854775808") is None
    assert record_number("1" * 5000) is None  # never handed to int(): it refuses 4300 digits
    with pytest.raises(ValueError, match="not a whole number"):
        record_number("١٢")  # Arabic-Indic digits: str.isdigit() says yes, a reference no
    assert is_int64(-INT64_MAX - 1)
    assert not is_int64(True)
    assert not is_int64(1.0)
    assert finite_float(BIG) is None
    assert finite_float(math.nan) is None


CAMPAIGN = """
[campaign]
name = "c"
max_trials = 2

[[objectives]]
metric = "loss"

[space]
x = [1, 2]
"""


@pytest.mark.parametrize(("text", "key"), [
    ("x = [1, 2]", "x = [nan, 1.0]"),
    ("x = [1, 2]", "x = [1, inf]"),
    ("x = [1, 2]", "x = [1, 9223372036854775808]"),
    ("x = [1, 2]", "x = { type = 'int', low = 0, high = 9223372036854775808 }"),
    ("x = [1, 2]", "x = { type = 'float', low = 0, high = inf }"),
    ("max_trials = 2", "max_trials = 2\nmax_parallelism = 100000000000000000000000000"),
    ("max_trials = 2", "max_trials = 2\nseed = -9223372036854775809"),
    ('metric = "loss"', 'metric = "loss"\nreference = nan'),
    ("[space]", "[budget]\nmoney = nan\n[space]"),
    ("[space]", "[agent.random]\nanything = 1e400\n[space]"),
])
def test_a_number_the_record_cannot_keep_is_one_config_error_naming_its_key(
    tmp_path: Path, text: str, key: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN.replace(text, key))
    with pytest.raises(dse.ConfigError) as info:
        load_campaign(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    assert ("expected a finite number" in message or "expected an integer within 64 bits"
            in message), message


def test_the_key_a_bad_number_is_under_is_named_inside_lists_and_tables(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN.replace("x = [1, 2]", "x = [1, 2]\ny = [1.5, nan]"))
    with pytest.raises(dse.ConfigError, match=r"c\.toml: space\.y\[1\]: expected a finite"
                                              r" number, got nan$"):
        load_campaign(path)
    path.write_text(CAMPAIGN)
    with pytest.raises(dse.ConfigError, match=r"campaign\.max_parallelism: expected an integer"
                                              r" within 64 bits .* \(with --set max_paral"):
        load_campaign(path, overrides=["max_parallelism=100000000000000000000000000"])


def test_an_integer_of_more_digits_than_python_reads_is_malformed_toml(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN.replace("x = [1, 2]", f"x = [1, {'7' * 5000}]"))
    with pytest.raises(dse.ConfigError, match="malformed TOML"):
        load_campaign(path)
    path.write_text(CAMPAIGN)
    with pytest.raises(dse.ConfigError, match=r"campaign\.max_trials"):  # the string as typed
        load_campaign(path, overrides=[f"max_trials={'7' * 5000}"])


def test_a_campaign_built_in_python_is_bounded_too() -> None:
    space = Space((Categorical("x", (1, 2)),))
    with pytest.raises(dse.ConfigError, match=r"campaign\.max_parallelism"):
        dse.Campaign(name="c", space=space, objectives=(dse.Objective("loss"),),
                     max_parallelism=2**80)
    with pytest.raises(dse.ConfigError, match=r"space\.x\.choices: nan is NaN"):
        Categorical("x", (math.nan, 1.0))


def test_durations_are_at_most_a_hundred_years() -> None:
    assert parse_duration("36500d", "k") == MAX_DURATION
    for value in ("36501d", 1e300, BIG, "1e400s"):
        with pytest.raises(dse.ConfigError, match="at most 100 years"):
            parse_duration(value, "c.toml: environment.time_limit")


def test_a_time_limit_param_past_a_hundred_years_is_refused(tmp_path: Path) -> None:
    data = {"campaign": {"name": "c"}, "objectives": [{"metric": "loss"}],
            "environment": {"time_limit": "{t}"},
            "space": {"t": {"type": "float", "low": 1.0, "high": 1e300}}}
    with pytest.raises(dse.ConfigError, match="a time limit is at most"):
        campaign_from_dict(data)


def test_cpus_set_by_a_huge_int_range_are_checked_by_its_ends() -> None:
    data = {"campaign": {"name": "c"}, "objectives": [{"metric": "loss"}],
            "environment": {"cpus": "{c}"},
            "space": {"c": {"type": "int", "low": 1, "high": 2**62}}}
    # Its every value was once walked (2**62 of them: the load never returned).
    assert campaign_from_dict(data).environment.resources.cpus == 2**62


class _Forging(ProbeBackend):
    """The probe, with each finished status carrying the numbers a planted exit file could."""

    def _poll(self, job_ids: Sequence[str]) -> Mapping[str, dse.JobStatus]:
        import dataclasses

        return {job_id: dataclasses.replace(
            status, exit_code=BIG, signal=-BIG, peak_rss_kb=2**70, started_at=math.nan,
            ended_at=1e300, usage={"elapsed_s": math.inf, "cpus": 1.0})
            if status.state.is_finished() else status
            for job_id, status in super()._poll(job_ids).items()}


def test_a_backend_status_past_the_record_keeps_its_state_and_drops_the_numbers(
    tmp_path: Path,
) -> None:
    camp = campaign_from_dict({
        "campaign": {"name": "f", "max_parallelism": 2},
        "space": {"x": [1, 2]}, "objectives": [{"metric": "t"}],
    }, workspace=tmp_path / "ws")
    clock = FakeClock()
    store = dse.Store(tmp_path / "ws" / "dse.sqlite")
    result = dse.Engine(
        camp, agent=ScriptedAgent([{"x": 1}, {"x": 2}]), store=store, clock=clock,
        backend=_Forging(lambda p: ProbeScript(seconds=1.0, metrics={"t": 1.0}), clock=clock),
    ).run()
    assert result.stats.completed == 2
    attempts = store.reads.attempts(result.campaign_id)
    assert [(a.exit_code, a.signal, a.peak_rss_kb) for a in attempts] == [(None, None, None)] * 2
    assert all(a.started_at is None or math.isfinite(a.started_at) for a in attempts)
    store.close()


def test_a_trial_reference_past_64_bits_is_no_such_trial(tmp_path: Path) -> None:
    camp = campaign_from_dict({"campaign": {"name": "rd"}, "space": {"x": [1]},
                               "objectives": [{"metric": "t"}]}, workspace=tmp_path / "ws")
    clock = FakeClock()
    store = dse.Store(tmp_path / "ws" / "dse.sqlite")
    dse.Engine(camp, agent=ScriptedAgent([{"x": 1}]), store=store, clock=clock,
               backend=ProbeBackend(lambda p: ProbeScript(metrics={"t": 1.0}), clock=clock)
               ).run()
    huge = "1" + "0" * 23
    for text, said in ((f"rd:{huge}", f"has no trial {huge}"),
                       (f"rd-1-{huge}", f"has no trial {huge}"),
                       (f"rd-{huge}-1", f"no run {huge} of a campaign named 'rd'"),
                       (f"{huge}:1", f"no campaign run named '{huge}'"),
                       (f"rd:{'9' * 5000}", "has no trial 999")):
        with pytest.raises(dse.ConfigError, match=said):
            store.reads.find_trial(text)
    assert store.reads.find_campaign(huge) is None
    assert store.reads.find_campaign("²") is None  # a digit to str.isdigit(), no run id
    store.close()
