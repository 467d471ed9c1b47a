from __future__ import annotations

import random
import re

import pytest

from dse import Categorical, ConfigError, FloatRange, IntRange, ParamError, Space, config_hash


@pytest.fixture
def space() -> Space:
    return Space.from_dict({
        "layout": ["row", "col"],
        "tile": {"type": "int", "low": 16, "high": 128, "step": 16},
        "unroll": {"type": "int", "low": 1, "high": 8, "log": True},
        "lr": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
        "frac": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25},
        "flag": [True, False],
    })


def test_parameters_keep_declared_order_and_kinds(space: Space) -> None:
    assert space.names == ("layout", "tile", "unroll", "lr", "frac", "flag")
    assert isinstance(space["layout"], Categorical)
    assert isinstance(space["tile"], IntRange)
    assert isinstance(space["lr"], FloatRange)
    assert space["lr"].log is True


def test_values_are_coerced_to_the_declared_type(space: Space) -> None:
    params = space.coerce(
        {"layout": "row", "tile": "32", "unroll": 4.0, "lr": "0.001", "frac": 0.5, "flag": True}
    )
    assert params == {"layout": "row", "tile": 32, "unroll": 4, "lr": 0.001, "frac": 0.5,
                      "flag": True}
    assert type(params["tile"]) is int
    assert type(params["lr"]) is float
    assert list(params) == list(space.names)


def test_equivalent_spellings_hash_the_same(space: Space) -> None:
    a = space.coerce({"layout": "row", "tile": 32, "unroll": 4, "lr": 0.001, "frac": 0.5,
                      "flag": True})
    b = space.coerce({"flag": True, "frac": "0.5", "lr": 1e-3, "unroll": "4", "tile": 32.0,
                      "layout": "row"})
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(a, data_version="v2")
    assert config_hash(a) != config_hash(a, workload={"command": ["x"]})


@pytest.mark.parametrize(
    ("proposal", "message"),
    [
        ({"tile": 40}, "outside [16, 128] step 16"),
        ({"tile": 256}, "outside"),
        ({"tile": 3.5}, "not an integer"),
        ({"tile": True}, "bool"),
        ({"layout": "diag"}, "not one of"),
        ({"lr": 1.0}, "outside"),
        ({"lr": float("nan")}, "outside"),
        ({"frac": 0.3}, "not on the grid"),
    ],
)
def test_bad_values_are_refused_naming_the_parameter(
    space: Space, proposal: dict[str, object], message: str
) -> None:
    base: dict[str, object] = {"layout": "row", "tile": 32, "unroll": 4, "lr": 0.001,
                               "frac": 0.5, "flag": True}
    base.update(proposal)
    with pytest.raises(ParamError, match=re.escape(message)):
        space.coerce(base)


def test_missing_and_unknown_keys_are_refused(space: Space) -> None:
    with pytest.raises(ParamError, match=r"missing \['flag'\].*unknown \['extra'\]"):
        space.coerce({"layout": "row", "tile": 32, "unroll": 4, "lr": 0.001, "frac": 0.5,
                      "extra": 1})


def test_cardinality_is_known_only_for_finite_spaces(space: Space) -> None:
    assert space.cardinality is None
    finite = Space.from_dict({"a": [1, 2, 3], "b": {"type": "int", "low": 0, "high": 9},
                              "c": {"type": "float", "low": 0, "high": 1, "step": 0.5}})
    assert finite.cardinality == 3 * 10 * 3


def test_samples_stay_in_the_space(space: Space) -> None:
    rng = random.Random(0)
    for _ in range(500):
        assert space.coerce(space.sample(rng))


def test_log_float_grid_is_geometric() -> None:
    param = FloatRange("lr", 1e-4, 1e-1, log=True)
    values = param.values(4)
    assert values[0] == pytest.approx(1e-4)
    assert values[1] == pytest.approx(1e-3)
    assert values[3] == pytest.approx(1e-1)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "int", "low": 5, "high": 1}, "empty range"),
        ({"type": "float", "low": 1.0, "high": 1.0}, "empty range"),
        ({"type": "float", "low": 0.0, "high": 1.0, "log": True}, "log-scaled range needs low > 0"),
        ({"type": "categorical", "choices": []}, "non-empty list"),
        ({"type": "categorical", "choices": [1, 1]}, "duplicate"),
        ({"type": "tensor"}, "expected one of"),
        ({"type": "int", "low": 1}, "missing key 'high'"),
        ({"type": "int", "low": 1, "high": 2, "stride": 1}, "unknown key"),
        ({"type": "int", "low": 1.5, "high": 2}, "expected an integer"),
    ],
)
def test_malformed_parameters_name_the_key(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        Space.from_dict({"p": spec}, source="c.toml")
    assert "c.toml: space.p" in str(info.value)
