"""Conditional parameters (``when`` in ``[space]``, issue 42): a param active only where its
parents take given values, nested. An inactive param is absent from a point, from its
identity and from the export; two proposals that differ only in one are one configuration.
dse-core alone: the runs use the probe backend and the test plugin's ``list`` agent."""

from __future__ import annotations

import csv
import io
import itertools
import json
import random
import sqlite3
import subprocess
from typing import TYPE_CHECKING, Any

import pytest

import dse
from dse.campaign._campaign import load_campaign
from dse.model._space import PARAM_KEYS
from support.cli import run_dse, write_plugin
from support.conditional import SMALL_POINTS, SMALL_SPACE_TOML, SPACE, expected_active

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def space() -> dse.Space:
    return dse.Space.from_dict(SPACE, source="c.toml")


@pytest.fixture
def small() -> dse.Space:
    import tomllib

    return dse.Space.from_dict(tomllib.loads(SMALL_SPACE_TOML)["space"], source="c.toml")


def brute_force(space: dse.Space) -> set[tuple[tuple[str, Any], ...]]:
    """Every point of a finite *space*: each full product of values, coerced."""
    found = set()
    for values in itertools.product(*(p.values() for p in space)):
        found.add(tuple(space.coerce(dict(zip(space.names, values, strict=True))).items()))
    return found


# -- reading `when` ---------------------------------------------------------------------------


def test_the_two_level_space_reads_as_a_tree(space: dse.Space) -> None:
    assert space.conditional
    assert space.names == ("optimizer", "momentum", "beta2", "layers", "width_1", "width_2",
                           "width_3")
    assert space["momentum"].when == (("optimizer", ("sgd",)),)
    assert space["width_2"].when == (("layers", (2, 3)),)
    assert space["width_3"].when == (("layers", (3,)),)
    assert space["optimizer"].when == space["width_1"].when == ()
    # Every type accepts `when`; the list shorthand is a categorical without one.
    assert all("when" in keys for keys in PARAM_KEYS.values())
    assert not dse.Space.from_dict({"a": [1, 2], "b": {"type": "int", "low": 0, "high": 3}}
                                   ).conditional


def test_a_condition_value_is_coerced_by_its_parent_and_deduplicated() -> None:
    space = dse.Space.from_dict({
        "layers": {"type": "int", "low": 1, "high": 4},
        "flag": [True, False],
        "w": {"type": "float", "low": 0, "high": 1, "when": {"layers": ["2", 2.0, 3]}},
        "v": {"type": "categorical", "choices": ["a"], "when": {"flag": "True", "layers": 4}},
    })
    assert space["w"].when == (("layers", (2, 3)),)
    assert space["v"].when == (("flag", (True,)), ("layers", (4,)))
    assert space.active({"layers": 4, "flag": True}) == ("layers", "flag", "v")
    assert space.active({"layers": 4, "flag": False}) == ("layers", "flag")


def test_a_programmatic_space_checks_and_coerces_its_conditions() -> None:
    space = dse.Space((dse.IntRange("layers", 1, 3),
                       dse.IntRange("width_2", 16, 64, 16, when=(("layers", ("2", 3)),))))
    assert space["width_2"].when == (("layers", (2, 3)),)
    assert space.coerce({"layers": "3", "width_2": 32}) == {"layers": 3, "width_2": 32}
    with pytest.raises(dse.ConfigError, match=r"^space\.width_2\.when\.depth: no parameter"):
        dse.Space((dse.IntRange("layers", 1, 3),
                   dse.IntRange("width_2", 16, 64, when=(("depth", (2,)),))))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"x": {"type": "int", "low": 0, "high": 1, "when": {"y": 1}}, "y": [1, 2]},
         "c.toml: space.x.when.y: 'y' is declared after 'x': a condition's parent comes first"
         " in [space]"),
        ({"y": [1, 2], "x": {"type": "int", "low": 0, "high": 1, "when": {"z": 1}}},
         "c.toml: space.x.when.z: no parameter 'z'"),
        ({"yy": [1, 2], "x": {"type": "int", "low": 0, "high": 1, "when": {"y": 1}}},
         "c.toml: space.x.when.y: no parameter 'y'; did you mean 'yy'?"),
        ({"y": {"type": "float", "low": 0, "high": 1},
          "x": {"type": "int", "low": 0, "high": 1, "when": {"y": 0.5}}},
         "c.toml: space.x.when.y: 'y' is a float range; a condition's parent must be a"
         " categorical or int parameter"),
        ({"y": ["sgd", "adam"], "x": {"type": "int", "low": 0, "high": 1,
                                      "when": {"y": "sdg"}}},
         "c.toml: space.x.when.y: param 'y': 'sdg' is not one of ['sgd', 'adam']"),
        ({"y": {"type": "int", "low": 1, "high": 3},
          "x": {"type": "int", "low": 0, "high": 1, "when": {"y": [2, 4]}}},
         "c.toml: space.x.when.y: param 'y': 4 is outside [1, 3]"),
        ({"y": [1, 2], "x": {"type": "int", "low": 0, "high": 1, "when": {"y": []}}},
         "c.toml: space.x.when.y: expected a value or a non-empty list of values, got []"),
        ({"y": [1, 2], "x": {"type": "int", "low": 0, "high": 1, "when": {"x": 1}}},
         "c.toml: space.x.when.x: a parameter cannot depend on itself"),
        ({"y": [1, 2], "x": {"type": "int", "low": 0, "high": 1, "when": {}}},
         "c.toml: space.x.when: expected a table such as {optimizer = \"sgd\"} or"
         " {layers = [2, 3]}, got {}"),
        ({"y": [1, 2], "x": {"type": "int", "low": 0, "high": 1, "when": "y"}},
         "c.toml: space.x.when: expected a table such as {optimizer = \"sgd\"} or"
         " {layers = [2, 3]}, got 'y'"),
        ({"y": [1, 2], "x": {"type": "int", "low": 0, "high": 1, "when": {"y": {"a": 1}}}},
         "c.toml: space.x.when.y: {'a': 1} is not a string, number or boolean"),
    ],
    ids=["parent later", "unknown parent", "did you mean", "float parent", "bad choice",
         "out of range", "empty list", "itself", "empty table", "not a table", "not a value"],
)
def test_a_bad_condition_is_one_line_naming_it(table: dict[str, Any], message: str) -> None:
    with pytest.raises(dse.ConfigError) as caught:
        dse.Space.from_dict(table, source="c.toml")
    assert str(caught.value) == message


def test_a_bad_condition_in_a_campaign_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(
        '[campaign]\nbackend = "probe"\n[[objectives]]\nmetric = "value"\n'
        + SMALL_SPACE_TOML.replace('when = { layers = 3 }', 'when = { layers = 4 }'))
    proc = run_dse(tmp_path, "run", "campaign.toml")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "dse: error: campaign.toml: space.width_3.when.layers: param 'layers': 4 is outside"
        " [1, 3]"]


# -- points of a tree -------------------------------------------------------------------------


def test_coerce_keeps_the_active_params_and_drops_the_others(space: dse.Space) -> None:
    every = {"optimizer": "adam", "momentum": 0.5, "beta2": "0.97", "layers": 2.0,
             "width_1": "64", "width_2": 32, "width_3": 16}
    assert space.coerce(every) == {"optimizer": "adam", "beta2": 0.97, "layers": 2,
                                   "width_1": 64, "width_2": 32}
    assert list(space.coerce(every)) == ["optimizer", "beta2", "layers", "width_1", "width_2"]
    assert space.coerce({"optimizer": "sgd", "momentum": 0.9, "layers": 1, "width_1": 16}) == {
        "optimizer": "sgd", "momentum": 0.9, "layers": 1, "width_1": 16}
    # An inactive value is dropped unchecked: it is not part of the point.
    assert "beta2" not in space.coerce({**every, "optimizer": "sgd", "beta2": "not a number"})


def test_coerce_refuses_a_missing_active_param_an_unknown_name_and_a_bad_value(
    space: dse.Space,
) -> None:
    with pytest.raises(dse.ParamError, match=r"missing \['momentum'\]"):
        space.coerce({"optimizer": "sgd", "layers": 1, "width_1": 16})
    with pytest.raises(dse.ParamError, match=r"missing \['width_2', 'width_3'\]"):
        space.coerce({"optimizer": "adam", "beta2": 0.95, "layers": 3, "width_1": 16})
    with pytest.raises(dse.ParamError, match=r"unknown \['depth'\]"):
        space.coerce({"optimizer": "adam", "beta2": 0.95, "layers": 1, "width_1": 16,
                      "depth": 3})
    with pytest.raises(dse.ParamError, match="outside"):
        space.coerce({"optimizer": "adam", "beta2": 2.0, "layers": 1, "width_1": 16})
    # A parent missing leaves its children out: only it is missing.
    with pytest.raises(dse.ParamError, match=r"missing \['layers'\]$"):
        space.coerce({"optimizer": "adam", "beta2": 0.95, "width_1": 16})


def test_two_proposals_differing_only_in_an_inactive_param_are_one_config(
    space: dse.Space,
) -> None:
    one = {"optimizer": "adam", "momentum": 0.1, "beta2": 0.95, "layers": 1, "width_1": 16,
           "width_2": 64}
    other = {**one, "momentum": 0.8, "width_2": 16, "width_3": 256}
    assert space.coerce(one) == space.coerce(other)
    assert dse.config_hash(space.coerce(one)) == dse.config_hash(space.coerce(other))
    assert dse.config_hash(space.coerce(one)) != dse.config_hash(
        space.coerce({**one, "layers": 2}))


def test_active_names_the_params_of_a_point_or_of_its_start(space: dse.Space) -> None:
    assert space.active({}) == ("optimizer", "layers", "width_1")
    assert space.active({"optimizer": "sgd"}) == ("optimizer", "momentum", "layers", "width_1")
    assert space.active({"optimizer": "adam", "layers": "3"}) == (
        "optimizer", "beta2", "layers", "width_1", "width_2", "width_3")
    # A value the parent does not take makes no condition hold.
    assert space.active({"optimizer": "rmsprop", "layers": 9}) == (
        "optimizer", "layers", "width_1")
    flat = dse.Space.from_dict({"a": [1, 2]})
    assert flat.active({}) == flat.names == ("a",)


def test_nested_conditions_hold_only_below_an_active_parent() -> None:
    space = dse.Space.from_dict({
        "optimizer": ["sgd", "adam"],
        "schedule": {"type": "categorical", "choices": ["constant", "step"],
                     "when": {"optimizer": "sgd"}},
        "gamma": {"type": "float", "low": 0.1, "high": 0.9, "when": {"schedule": "step"}},
    })
    assert space.active({"optimizer": "sgd", "schedule": "step"}) == (
        "optimizer", "schedule", "gamma")
    # schedule = "step" given, but schedule is inactive under adam: so is gamma.
    assert space.active({"optimizer": "adam", "schedule": "step"}) == ("optimizer",)
    assert space.coerce({"optimizer": "adam", "schedule": "step", "gamma": 0.5}) == {
        "optimizer": "adam"}
    assert space.cardinality is None
    stepped = dse.Space.from_dict({
        "optimizer": ["sgd", "adam"],
        "schedule": {"type": "categorical", "choices": ["constant", "step"],
                     "when": {"optimizer": "sgd"}},
        "gamma": {"type": "float", "low": 0.1, "high": 0.9, "step": 0.4,
                  "when": {"schedule": "step"}},
    })
    assert stepped.cardinality == len(brute_force(stepped)) == 1 + 1 + 3


def test_cardinality_counts_the_points_of_the_tree(small: dse.Space) -> None:
    assert small.cardinality == SMALL_POINTS == len(brute_force(small))
    # A parent of many values, a few of them named: counted by classes, not one by one.
    wide = dse.Space.from_dict({
        "n": {"type": "int", "low": 1, "high": 10**12},
        "w": {"type": "int", "low": 1, "high": 3, "when": {"n": [7, 10**9]}},
    })
    assert wide.cardinality == (10**12 - 2) + 2 * 3


def test_a_continuous_param_makes_the_tree_infinite_only_where_it_can_be_active(
    space: dse.Space,
) -> None:
    assert space.cardinality is None
    finite = dse.Space.from_dict({
        "a": [1, 2],
        "x": {"type": "float", "low": 0.0, "high": 1.0, "when": {"a": 1}},
    })
    assert finite.cardinality is None


def test_sample_draws_the_active_params_only(space: dse.Space) -> None:
    rng = random.Random(3)
    seen = set()
    for _ in range(200):
        point = space.sample(rng)
        assert set(point) == expected_active(point)
        assert space.coerce(point) == point
        seen.add((point["optimizer"], point["layers"]))
    assert len(seen) == 6


def test_a_flat_space_is_unchanged() -> None:
    space = dse.Space.from_dict({"a": [1, 2], "x": {"type": "float", "low": 0, "high": 1}})
    assert not space.conditional
    assert space.cardinality is None
    assert space.coerce({"a": "2", "x": 0.5}) == {"a": 2, "x": 0.5}
    with pytest.raises(dse.ParamError, match=r"missing \['x'\]"):
        space.coerce({"a": 1})


# -- the campaign around it -------------------------------------------------------------------


def test_an_expression_constraint_holds_where_it_reads_an_inactive_param(
    tmp_path: Path,
) -> None:
    campaign = tmp_path / "campaign.toml"
    campaign.write_text('[campaign]\nbackend = "probe"\nconstraints = ["momentum < 0.5"]\n'
                        '[[objectives]]\nmetric = "value"\n' + SMALL_SPACE_TOML)
    (rule,) = load_campaign(campaign).constraints
    assert not rule({"optimizer": "sgd", "momentum": 0.9, "layers": 1, "width_1": 16})
    assert rule({"optimizer": "sgd", "momentum": 0.0, "layers": 1, "width_1": 16})
    assert rule({"optimizer": "adam", "beta2": 0.95, "layers": 1, "width_1": 16})


@pytest.mark.parametrize(
    ("environment", "at"),
    [('command = ["python", "train.py", "--momentum", "{momentum}"]',
      "environment.command: {momentum}"),
     ('command = ["true"]\ncpus = "{width_3}"', "environment.cpus"),
     ('command = ["true"]\ntime_limit = "{momentum}"', "environment.time_limit")],
    ids=["placeholder", "resource", "time limit"],
)
def test_a_conditional_param_cannot_be_what_every_trial_needs(
    tmp_path: Path, environment: str, at: str,
) -> None:
    campaign = tmp_path / "campaign.toml"
    campaign.write_text(f'[campaign]\nbackend = "probe"\n[environment]\n{environment}\n'
                        '[[objectives]]\nmetric = "value"\n' + SMALL_SPACE_TOML)
    name = "width_3" if "width_3" in environment else "momentum"
    with pytest.raises(dse.ConfigError) as caught:
        load_campaign(campaign)
    assert str(caught.value) == (
        f"{campaign}: {at}: parameter {name!r} is conditional (absent where its `when` does"
        " not hold); a trial reads it from its params file (DSE_PARAMS_FILE,"
        " dse.trial.params())")


def test_a_baseline_holds_its_active_params(tmp_path: Path) -> None:
    campaign = tmp_path / "campaign.toml"
    campaign.write_text(
        '[campaign]\nbackend = "probe"\n[[objectives]]\nmetric = "value"\n'
        '[baseline]\nparams = { optimizer = "adam", beta2 = 0.95, momentum = 0.9, layers = 1,'
        ' width_1 = 16, width_2 = 64 }\n' + SMALL_SPACE_TOML)
    baseline = load_campaign(campaign).baseline
    assert baseline is not None
    assert baseline.params == {"optimizer": "adam", "beta2": 0.95, "layers": 1, "width_1": 16}
    campaign.write_text(campaign.read_text().replace("layers = 1,", "layers = 3,"))
    with pytest.raises(dse.ConfigError, match=r"baseline\.params: proposal does not match the"
                                              r" space: missing \['width_3'\]"):
        load_campaign(campaign)


def test_set_changes_a_condition(tmp_path: Path) -> None:
    campaign = tmp_path / "campaign.toml"
    campaign.write_text('[campaign]\nbackend = "probe"\n[[objectives]]\nmetric = "value"\n'
                        + SMALL_SPACE_TOML)
    loaded = load_campaign(campaign, overrides=["space.width_3.when.layers=[2, 3]",
                                                'space.momentum.when.optimizer="adam"'])
    assert loaded.space["width_3"].when == (("layers", (2, 3)),)
    assert loaded.space["momentum"].when == (("optimizer", ("adam",)),)
    with pytest.raises(dse.ConfigError, match=r"space\.momentum\.when\.optimizer: param"
                                              r" 'optimizer': 'nag' is not one of"):
        load_campaign(campaign, overrides=["space.momentum.when.optimizer=nag"])


# -- a real run -------------------------------------------------------------------------------

CAMPAIGN = """
[campaign]
name = "tree"
agent = "list"
backend = "probe"
max_parallelism = 1
poll_interval = "1ms"

[agent.list]
points = [
  {{ optimizer = "adam", beta2 = 0.95, momentum = 0.0, layers = 1, width_1 = 16 }},
  {{ optimizer = "adam", beta2 = 0.95, momentum = 0.9, layers = 1, width_1 = 16, width_2 = 64 }},
  {{ optimizer = "sgd", momentum = 0.9, layers = 3, width_1 = 64, width_2 = 32, width_3 = 8 }},
]

[[objectives]]
metric = "value"
{constraints}
{space}
"""


def run_tree(project: Path, constraints: str = "") -> subprocess.CompletedProcess[str]:
    write_plugin(project)
    (project / "campaign.toml").write_text(
        CAMPAIGN.format(space=SMALL_SPACE_TOML, constraints=constraints))
    proc = run_dse(project, "run", "campaign.toml")
    assert proc.returncode == 0, proc.stderr
    return proc


def recorded(project: Path) -> list[tuple[int, dict[str, Any], str, str]]:
    db = sqlite3.connect(project / ".dse" / "dse.sqlite")
    try:
        rows = db.execute("SELECT number, params, status, config_hash FROM trials"
                          " ORDER BY number").fetchall()
    finally:
        db.close()
    return [(n, json.loads(p), s, h) for n, p, s, h in rows]


def test_two_proposals_differing_only_in_an_inactive_param_run_once(tmp_path: Path) -> None:
    run_tree(tmp_path)
    trials = recorded(tmp_path)
    assert [(n, p, s) for n, p, s, _ in trials] == [
        (1, {"beta2": 0.95, "layers": 1, "optimizer": "adam", "width_1": 16}, "completed"),
        (2, {"beta2": 0.95, "layers": 1, "optimizer": "adam", "width_1": 16}, "cached"),
        (3, {"layers": 3, "momentum": 0.9, "optimizer": "sgd", "width_1": 64, "width_2": 32,
             "width_3": 8}, "completed"),
    ]
    assert trials[0][3] == trials[1][3] != trials[2][3]


def test_export_leaves_an_inactive_param_empty_and_show_prints_the_tree(
    tmp_path: Path,
) -> None:
    run_tree(tmp_path)
    proc = run_dse(tmp_path, "export", "tree", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    columns = [c for c in rows[0] if c.startswith("param.")]
    assert columns == ["param.optimizer", "param.momentum", "param.beta2", "param.layers",
                       "param.width_1", "param.width_2", "param.width_3"]
    assert [[row[c] for c in columns] for row in rows] == [
        ["adam", "", "0.95", "1", "16", "", ""],
        ["adam", "", "0.95", "1", "16", "", ""],
        ["sgd", "0.9", "", "3", "64", "32", "8"],
    ]

    shown = run_dse(tmp_path, "show", "tree:1")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  space"))
    assert lines[start:start + 7] == [
        "  space         optimizer   categorical [sgd, adam]  = adam",
        "                  momentum  float [0, 0.9] step 0.9  when optimizer = sgd  (inactive)",
        "                  beta2     categorical [0.95]  when optimizer = adam  = 0.95",
        "                layers      int [1, 3]  = 1",
        "                  width_2   int [32, 64] step 32  when layers in [2, 3]  (inactive)",
        "                  width_3   categorical [8]  when layers = 3  (inactive)",
        "                width_1     categorical [16, 64]  = 16",
    ]
    record = json.loads(run_dse(tmp_path, "show", "tree:3", "--json").stdout)
    tree = {entry["name"]: (entry.get("when"), entry["active"])
            for entry in record["run"]["space"]}
    assert tree == {"optimizer": (None, True), "momentum": ({"optimizer": ["sgd"]}, True),
                    "beta2": ({"optimizer": ["adam"]}, False), "layers": (None, True),
                    "width_1": (None, True), "width_2": ({"layers": [2, 3]}, True),
                    "width_3": ({"layers": [3]}, True)}
