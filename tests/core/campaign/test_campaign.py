from __future__ import annotations

import re
from pathlib import Path

import pytest

from dse import CommandEnvironment, ConfigError, ConstraintError, Direction, load_campaign
from dse.campaign._campaignfile import campaign_place
from dse.plugins._protocols import TrialInfo

GOOD = """
[campaign]
name = "tiles"
agent = "grid"
backend = "probe"
mode = "rolling"
max_parallelism = 3
max_trials = 12
seed = 5
constraints = ["a * 2 <= 8", "not (b == 'x' and a > 2)"]
poll_interval = ["10ms", "1s"]

[agent.grid]
points = 3

[[objectives]]
metric = "loss"

[[objectives]]
metric = "acc"
direction = "maximize"

[environment]
command = ["python", "train.py", "--a", "{a}"]
time_limit = "2m"
cpus = 2

[space]
a = { type = "int", low = 1, high = 4 }
b = ["x", "y"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_a_full_campaign_file_is_read(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, GOOD))
    assert c.name == "tiles"
    assert (c.agent, dict(c.agent_options)) == ("grid", {"points": 3})
    assert c.mode == "rolling"
    assert c.max_parallelism == 3
    assert c.max_trials == 12
    assert [o.metric for o in c.objectives] == ["loss", "acc"]
    assert c.objectives[1].direction is Direction.MAXIMIZE
    assert c.environment.time_limit == 120.0
    assert c.environment.resources.cpus == 2
    assert c.poll_interval == (0.01, 1.0)
    assert c.workspace == tmp_path / ".dse"
    assert [k.text for k in c.constraints] == ["a * 2 <= 8", "not (b == 'x' and a > 2)"]
    assert c.constraints[0]({"a": 4, "b": "y"}) is True
    assert c.constraints[0]({"a": 5, "b": "y"}) is False
    assert c.constraints[1]({"a": 3, "b": "x"}) is False


def test_a_callable_constraint_is_imported_beside_the_file(tmp_path: Path) -> None:
    (tmp_path / "rules_for_test_campaign.py").write_text(
        "def small(params):\n    return params['a'] < 3\n"
    )
    text = GOOD.replace('constraints = ["a * 2 <= 8", "not (b == \'x\' and a > 2)"]',
                        'constraints = ["rules_for_test_campaign:small"]')
    c = load_campaign(write(tmp_path, text))
    assert c.constraints[0]({"a": 2, "b": "x"}) is True
    assert c.constraints[0]({"a": 3, "b": "x"}) is False


def test_a_param_sets_each_trials_gpus_and_time_limit(tmp_path: Path) -> None:
    text = GOOD.replace('time_limit = "2m"\ncpus = 2', 'time_limit = "{a}"\ngpus = "{g}"')
    text = text.replace('b = ["x", "y"]', 'b = ["x", "y"]\ng = [1, 2, 4]')
    c = load_campaign(write(tmp_path, text))
    # Budgets reserve the largest a trial may take.
    assert (c.environment.resources.gpus, c.environment.time_limit) == (4, 4.0)
    env = CommandEnvironment(c.environment, c.objectives, param_names=c.space.names)
    trial_dir = tmp_path / "t"
    trial_dir.mkdir()
    spec = env.prepare(TrialInfo("tiles-1-1", 1, 1, {"a": 3, "b": "x", "g": 2}, trial_dir))
    assert (spec.resources.gpus, spec.resources.cpus, spec.time_limit) == (2, 1, 3.0)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('mode = "rolling"', 'mode = "burst"', "campaign.mode: expected 'waves' or 'rolling'"),
        ("max_parallelism = 3", "max_parallelism = 0", "campaign.max_parallelism"),
        ("max_parallelism = 3", 'max_parallelism = "3"', "campaign.max_parallelism: expected"),
        ("seed = 5", "seed = true", "campaign.seed"),
        ('"a * 2 <= 8"', '"a * 2 <="', "not an expression"),
        ('"a * 2 <= 8"', '"c > 1"', "names 'c', which is not a parameter"),
        ('"a * 2 <= 8"', '"__import__(\'os\')"', "may only call"),
        ('"a * 2 <= 8"', '"a.real > 1"', "Attribute"),
        ('"a * 2 <= 8"', '"nomodule_zz:f"', "cannot import 'nomodule_zz'"),
        ('time_limit = "2m"', 'time_limit = "soon"', "environment.time_limit"),
        ('time_limit = "2m"', "time_limit = inf",
         "environment.time_limit: expected a finite number, got inf"),
        ('time_limit = "2m"', "time_limit = nan",
         "environment.time_limit: expected a finite number, got nan"),
        ('time_limit = "2m"', 'time_limit = "1e300s"',
         "environment.time_limit: expected a non-negative duration of at most 100 years"),
        ("max_parallelism = 3", "max_parallelism = 9223372036854775808",
         "campaign.max_parallelism: expected an integer within 64 bits"),
        ('"{a}"', '"{zz}"', "placeholder {zz}"),
        ('metric = "loss"', 'metric = "loss"\nweight = 2', "objectives[0].weight"),
        ('direction = "maximize"', 'direction = "up"', "objectives[1].direction"),
        ('name = "tiles"', 'name = "../x"', "campaign.name"),
        ("cpus = 2", 'cpus = "{zz}"', "environment.cpus: {zz} is not a parameter"),
        ("cpus = 2", 'cpus = "{b}"', "parameter 'b' must take only integers >= 1"),
        ("cpus = 2", 'cpus = "two"', "environment.cpus: expected an integer or '{param}'"),
        ('time_limit = "2m"', 'time_limit = "{b}"', "parameter 'b' must be an int or float"),
        ('time_limit = "2m"', 'time_limit = "{zz}"', "{zz} is not a parameter"),
        ("max_trials = 12", "lookahead = -1", "campaign.lookahead: expected a non-negative"),
    ],
)
def test_errors_name_the_file_and_key(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    def load_and_build() -> None:
        c = load_campaign(path)
        CommandEnvironment(c.environment, c.objectives, param_names=c.space.names,
                           source=str(path))

    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_and_build()
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        ("9**9**9**9 > 0", "9 ** 9 ** 9 would have about 1228093895 bits"),
        ("a > 0 or 10 ** 10 ** 6 > a", "10 ** 10 ** 6 would have about 3321929 bits"),
        ("b in 'x' * 10 ** 9", "would have about 1000000000 items"),
        ("a < " + "9" * 2000, "has 6644 bits"),
        ("-" * 120 + "a < 3", "nested at most 100 deep"),
        (" + ".join(["a"] * 600) + " > 0", "syntax nodes"),
    ],
)
def test_a_constraint_too_costly_to_evaluate_is_refused_at_load(
    tmp_path: Path, constraint: str, message: str
) -> None:
    path = write(tmp_path, GOOD.replace('"a * 2 <= 8"', repr(constraint), 1))
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_campaign(path)
    assert f"{path}: campaign.constraints[0]: constraint {constraint!r}" in str(info.value)


@pytest.mark.parametrize(
    ("constraint", "params", "message"),
    [
        ("2 ** a > 0", {"a": 10 ** 6}, "2 ** a would have about 1000001 bits"),
        ("a * a * a * a > 0", {"a": 2 ** 2000}, "over the limit of 4096"),
        ("b * a != ''", {"a": 10 ** 9, "b": "xy"}, "b * a would have about 2000000000 items"),
        ("round(a, -10 ** 9) == 0", {"a": 5}, "round to -1000000000 digits"),
    ],
)
def test_a_constraint_too_costly_for_a_proposal_raises_naming_it(
    tmp_path: Path, constraint: str, params: dict[str, object], message: str
) -> None:
    path = write(tmp_path, GOOD.replace('"a * 2 <= 8"', repr(constraint), 1))
    (check, _) = load_campaign(path).constraints
    with pytest.raises(ConstraintError, match=re.escape(message)) as info:
        check(params)
    assert f"{path}: campaign.constraints[0]: constraint {constraint!r} exceeds the cost limit"\
        in str(info.value)


def test_ordinary_constraints_stay_exact(tmp_path: Path) -> None:
    text = GOOD.replace('"a * 2 <= 8"', '"a ** 2 + a ** 2 < 33", "2 ** a <= 2 ** 64"', 1)
    check, power, _ = load_campaign(write(tmp_path, text)).constraints
    assert check({"a": 4}) is True
    assert check({"a": 5}) is False
    assert power({"a": 64}) is True
    assert power({"a": 65}) is False


def test_missing_objectives_is_explained(tmp_path: Path) -> None:
    text = GOOD.split("[[objectives]]")[0] + "[space]\na = [1, 2]\n"
    with pytest.raises(ConfigError, match="objectives: missing"):
        load_campaign(write(tmp_path, text))


def test_the_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, GOOD.replace('name = "tiles"\n', "")))
    assert c.name == "c"


def test_objective_and_objectives_together_is_one_error(tmp_path: Path) -> None:
    text = GOOD.replace('[[objectives]]\nmetric = "loss"',
                        '[objective]\nmetric = "x"\n\n[[objectives]]\nmetric = "loss"', 1)
    with pytest.raises(ConfigError, match=r"give either \[objective\] or \[\[objectives\]\]"):
        load_campaign(write(tmp_path, text))


PLACES = [
    ("", None),
    ('name = "other"\n', None),
    ('workspace = "records/here"\n', None),
    ('name = "x.y-z_1"\nworkspace = "/abs/ws"\n', None),
    ("", "elsewhere"),
]


@pytest.mark.parametrize(("keys", "override"), PLACES)
def test_the_record_of_a_campaign_file_is_found_as_load_campaign_finds_it(
    tmp_path: Path, keys: str, override: str | None
) -> None:
    # `dse status/report/export FILE.toml` read only the name and the workspace.
    path = write(tmp_path, GOOD.replace('name = "tiles"\n', keys))
    c = load_campaign(path, workspace=override)
    assert campaign_place(path, workspace=override) == (c.name, c.workspace, None)


@pytest.mark.parametrize("text", [
    GOOD.replace('name = "tiles"', 'name = 5'),
    GOOD.replace('name = "tiles"', 'name = true'),
    GOOD.replace('name = "tiles"', 'name = "../up"'),
    GOOD.replace('name = "tiles"', 'workspace = 3'),
    GOOD.replace("[campaign]", "campaign = 1\n[other]"),
    "[campaign\n",
])
def test_a_bad_name_or_workspace_is_the_same_error_for_every_command(
    tmp_path: Path, text: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as loading:
        load_campaign(path)
    with pytest.raises(ConfigError) as placing:
        campaign_place(path)
    assert str(placing.value) == str(loading.value)


def test_the_record_of_a_campaign_file_is_found_whatever_its_other_keys(tmp_path: Path) -> None:
    # The record says how each run was configured: a file edited since (here, into one
    # `dse run` refuses) still names where its runs are.
    path = write(tmp_path, GOOD.replace('a = { type = "int", low = 1, high = 4 }', "a = 7"))
    with pytest.raises(ConfigError):
        load_campaign(path)
    assert campaign_place(path) == ("tiles", tmp_path / ".dse", None)
