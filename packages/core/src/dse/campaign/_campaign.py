"""Campaign files (TOML) and the :class:`Campaign` they describe.

Every error names the file, the key and what was expected, in one line.
"""

from __future__ import annotations

import dataclasses
import math
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dse.campaign._campaignfile import (
    RECORD_SCHEMES,
    apply_overrides,
    check_name,
    check_numbers,
    read_campaign_file,
)
from dse.campaign._code import CodeSpec
from dse.campaign._data import DataSpec, parse_data
from dse.campaign._deps import Dependencies
from dse.campaign._model import (
    Baseline,
    Campaign,
    EnvironmentConfig,
    ScorerSpec,
    StoppingSpec,
)
from dse.campaign._seeding import parse_enqueue, parse_warm_start
from dse.campaign._workload import detect_workload
from dse.model._budget import Price, parse_budget
from dse.model._constraints import (
    Constraint,
    callable_constraint,
    expression_constraint,
    is_callable_ref,
)
from dse.model._errors import ConfigError, did_you_mean
from dse.model._space import FloatRange, IntRange, ParamError, Space
from dse.model._spend import SPEND_METRICS
from dse.model._types import Direction, Objective, Resources
from dse.model._units import MAX_DURATION, parse_duration

_PARAM_REF = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
RESOURCE_LEAST: Mapping[str, int] = {"cpus": 1, "gpus": 0, "nodes": 1, "tasks_per_node": 1}
"""The :class:`Resources` fields an ``[environment]`` key (or a ``{param}``) sets, each with
the least it may be."""
_RESOURCE_KEYS = (("cpus", "cpus", "cpus_per_task"), ("gpus", "gpus", "gpus_per_node"),
                  ("nodes", "nodes", None), ("tasks_per_node", "tasks_per_node", None))
"""(field, key, alias): the campaign file's keys of each resource field."""
"""``"{name}"``: a setting taken from each trial's param *name*."""


class _Table:
    """Typed reads from one TOML table, with errors naming file and key."""

    def __init__(self, data: Mapping[str, Any], source: str, prefix: str) -> None:
        self.data = data
        self.source = source
        self.prefix = prefix
        self.used: set[str] = set()

    def where(self, key: str) -> str:
        return f"{self.source}: {self.prefix}{key}"

    def get(self, key: str, kind: type | tuple[type, ...], expected: str, default: Any) -> Any:
        self.used.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        bad_bool = isinstance(value, bool) and bool not in (
            kind if isinstance(kind, tuple) else (kind,)
        )
        if not isinstance(value, kind) or bad_bool:
            raise ConfigError(f"{self.where(key)}: expected {expected}, got {value!r}")
        return value

    def table(self, key: str) -> Mapping[str, Any]:
        value: Mapping[str, Any] = self.get(key, dict, "a table", {})
        return value

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise ConfigError(
                f"{self.source}: unknown key(s) {', '.join(self.prefix + k for k in unknown)}"
                + did_you_mean(unknown, self.used))


def _objectives(raw: Any, source: str) -> tuple[Objective, ...]:
    items = [raw] if isinstance(raw, Mapping) else raw
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{source}: objectives: expected [[objectives]] tables with 'metric'")
    result: list[Objective] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ConfigError(f"{source}: objectives[{i}]: expected a table, got {item!r}")
        table = _Table(item, source, f"objectives[{i}].")
        metric = table.get("metric", str, "a metric name", None)
        if not metric:
            raise ConfigError(f"{table.where('metric')}: missing (the metric name in result.json)")
        direction = table.get("direction", str, "'minimize' or 'maximize'", "minimize")
        try:
            parsed = Direction(direction)
        except ValueError:
            raise ConfigError(
                f"{table.where('direction')}: expected 'minimize' or 'maximize', got {direction!r}"
            ) from None
        if metric.startswith("spend.") and metric not in SPEND_METRICS:
            raise ConfigError(
                f"{table.where('metric')}: unknown spend metric {metric!r}; expected one of"
                f" {', '.join(SPEND_METRICS)}"
            )
        if any(o.metric == metric for o in result):
            raise ConfigError(f"{table.where('metric')}: {metric!r} is an objective already")
        reference = table.get("reference", (int, float), "a number", None)
        if reference is not None and (isinstance(reference, bool)
                                      or not math.isfinite(reference)):
            raise ConfigError(f"{table.where('reference')}: expected a finite number")
        table.finish()
        result.append(Objective(metric, parsed,
                                None if reference is None else float(reference)))
    return tuple(result)


def _pareto(top: _Table, objectives: tuple[Objective, ...], scorer: ScorerSpec) -> bool:
    """``[campaign] objectives``: ``"pareto"`` (optimised together) or ``"first"``."""
    how = top.get("objectives", str, "'pareto' or 'first'", "first")
    if how not in ("pareto", "first"):
        raise ConfigError(f"{top.where('objectives')}: expected 'pareto' or 'first', got {how!r}")
    if how == "first":
        return False
    if len(objectives) < 2:
        raise ConfigError(
            f"{top.where('objectives')}: 'pareto' optimises several objectives together;"
            " give two or more [[objectives]]"
        )
    if scorer.direction is not None:
        raise ConfigError(
            f"{top.where('objectives')}: with 'pareto' each score is ranked in its objective's"
            " direction; remove scorer.direction"
        )
    return True


def _environment(raw: Mapping[str, Any], source: str, base_dir: Path) -> EnvironmentConfig:
    table = _Table(raw, source, "environment.")
    command = table.get("command", (list, str), "a list of strings (or one string)", [])
    shell = table.get("shell", bool, "true or false", False)
    if isinstance(command, str):
        command = [command] if shell else command.split()
    if not all(isinstance(c, str) for c in command):
        raise ConfigError(f"{table.where('command')}: expected a list of strings, got {command!r}")
    limit = table.get("time_limit", (int, float, str), "a duration or '{param}'", None)
    limit_param = None
    if isinstance(limit, str) and (match := _PARAM_REF.fullmatch(limit)) is not None:
        limit_param, limit = match.group(1), None
    resource_params: dict[str, str] = {}
    counts: dict[str, int] = {}
    for field_name, key, alias in _RESOURCE_KEYS:
        low = RESOURCE_LEAST[field_name]
        value = table.get(key, (int, str), "an integer or '{param}'", None)
        if alias is not None:
            other = table.get(alias, (int, str), "an integer or '{param}'", None)
            if value is not None and other is not None:
                raise ConfigError(
                    f"{table.where(alias)}: give {key} or {alias}, not both (the same setting)")
            if other is not None:
                key, value = alias, other
        if value is None:
            value = low
        if isinstance(value, str):
            match = _PARAM_REF.fullmatch(value)
            if match is None:
                raise ConfigError(
                    f"{table.where(key)}: expected an integer or '{{param}}', got {value!r}")
            resource_params[field_name] = match.group(1)
            value = low
        if value < low:
            raise ConfigError(f"{table.where(key)}: expected an integer >= {low}, got {value}")
        counts[field_name] = value
    memory = table.get("memory_mb", int, "a positive integer (MiB per node)", None)
    if memory is not None and memory < 1:
        raise ConfigError(f"{table.where('memory_mb')}: expected an integer >= 1, got {memory}")
    for i, item in enumerate(command):
        if "\0" in item:
            raise ConfigError(f"{table.where('command')}[{i}]: {item!r} holds a NUL byte")
    env = table.get("env", dict, "a table of strings", {})
    if not all(isinstance(v, str) for v in env.values()):
        raise ConfigError(f"{table.where('env')}: every value must be a string")
    for key, value in env.items():
        # A NUL would end the string where the OS reads it; '=' would move the name's end.
        if not key or "\0" in key or "=" in key:
            raise ConfigError(
                f"{table.where('env')}: {key!r} is not a variable name (empty, '=' or a NUL)")
        if "\0" in value:
            raise ConfigError(f"{table.where('env')}.{key}: {value!r} holds a NUL byte")
    code_version = table.get("code_version", str, "a string", None)
    declared = table.get("dependencies", str, "a string (a version of what the command runs"
                         " with)", None)
    code = CodeSpec(*(tuple(_strings(table, key)) for key in ("code", "code_exclude")))
    workdir = table.get("workdir", str, "a directory path", None)
    if workdir is not None and "\0" in workdir:
        raise ConfigError(f"{table.where('workdir')}: {workdir!r} holds a NUL byte")
    if shell and len(command) > 1:
        raise ConfigError(
            f"{table.where('command')}: with shell = true, give the command as one string"
        )
    table.finish()
    return EnvironmentConfig(
        command=tuple(command),
        shell=shell,
        time_limit=None if limit is None else parse_duration(limit, table.where("time_limit")),
        time_limit_param=limit_param,
        resources=Resources(memory_mb=memory, **counts),
        resource_params=resource_params,
        env=dict(env),
        code_version=code_version,
        code=code,
        dependencies=None if declared is None else Dependencies(digest=declared),
        workdir=base_dir / workdir if workdir else base_dir,
    )


def _strings(table: _Table, key: str) -> list[str]:
    """A key holding a list of non-empty strings (or one string)."""
    value = table.get(key, (list, str), "a list of paths or patterns", [])
    items = [value] if isinstance(value, str) else value
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item or "\0" in item:
            raise ConfigError(f"{table.where(key)}[{i}]: expected a path or pattern, got"
                              f" {item!r}")
    return items


def _sized_by_params(env: EnvironmentConfig, space: Space, where: str) -> EnvironmentConfig:
    """Check the params that set a trial's CPUs, GPUs or time limit, and make the campaign's
    resources and limit the largest they allow (what budgets reserve for a trial not yet
    proposed)."""
    largest = {key: getattr(env.resources, key) for key in RESOURCE_LEAST}
    for key, name in env.resource_params.items():
        at = f"{where}: environment.{key}"
        if name not in space.names:
            raise ConfigError(f"{at}: {{{name}}} is not a parameter of the space")
        param = space[name]
        values: Sequence[object] = () if param.size is None else param.values()
        if isinstance(param, IntRange):  # its ends, never its every value (2**40 of them)
            values = (param.low, param.values()[-1])
        low = RESOURCE_LEAST[key]
        if not values or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= low for v in values
        ):
            raise ConfigError(
                f"{at}: parameter {name!r} must take only integers >= {low} (an int range or"
                " integer choices)")
        largest[key] = max(v for v in values if isinstance(v, int))
    resources = Resources(memory_mb=env.resources.memory_mb, **largest)
    limit = env.time_limit
    seconds = env.time_limit_param
    if seconds is not None:
        at = f"{where}: environment.time_limit"
        if seconds not in space.names:
            raise ConfigError(f"{at}: {{{seconds}}} is not a parameter of the space")
        given = space[seconds]
        if not isinstance(given, IntRange | FloatRange) or given.low <= 0:
            raise ConfigError(
                f"{at}: parameter {seconds!r} must be an int or float range of seconds above 0")
        if given.high > MAX_DURATION:
            raise ConfigError(f"{at}: parameter {seconds!r} goes up to {given.high!r:.40}"
                              f" seconds; a time limit is at most {MAX_DURATION:.0f} (100 years)")
        limit = float(given.high)
    return dataclasses.replace(env, resources=resources, time_limit=limit)


def _stopping(raw: Any, where: str, objectives: tuple[Objective, ...]) -> StoppingSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: stopping: expected a table with 'rule' and 'max_step'")
    # The rules' option tables ([stopping.<rule>]) are theirs: only the chosen one is read.
    table = _Table({k: v for k, v in raw.items() if not isinstance(v, Mapping)}, where,
                   "stopping.")
    rule = table.get("rule", str, "a stopping rule name ('median', 'asha', 'hyperband')", None)
    if not rule:
        raise ConfigError(f"{table.where('rule')}: missing (median, asha, hyperband or a"
                          " plugin's rule)")
    options = raw.get(rule, {})
    if not isinstance(options, Mapping):
        raise ConfigError(f"{where}: stopping.{rule}: expected a table of options")
    max_step = table.get("max_step", int, "a whole number of steps >= 1", None)
    if max_step is None:
        raise ConfigError(f"{table.where('max_step')}: missing: the step a full run ends at")
    min_step = table.get("min_step", int, "a whole number of steps >= 1", 1)
    if not 1 <= min_step < max_step:
        raise ConfigError(f"{table.where('min_step')}: expected 1 <= min_step < max_step"
                          f" ({max_step}), got {min_step}")
    metric = table.get("metric", str, "a metric name", objectives[0].metric)
    known = {o.metric: o.direction for o in objectives}
    direction = table.get("direction", str, "'minimize' or 'maximize'", None)
    try:
        chosen = known.get(metric, Direction.MINIMIZE) if direction is None else Direction(
            direction)
    except ValueError:
        raise ConfigError(f"{table.where('direction')}: expected 'minimize' or 'maximize',"
                          f" got {direction!r}") from None
    promote = table.get("promote", bool, "true or false", True)
    table.finish()
    return StoppingSpec(rule=rule, max_step=max_step, metric=metric, direction=chosen,
                        min_step=min_step, promote=promote, options=dict(options))


def _scorer(raw: Mapping[str, Any], source: str) -> ScorerSpec:
    table = _Table(raw, source, "scorer.")
    name = table.get("name", str, "a scorer name or 'module:function'", "default")
    direction = table.get("direction", str, "'minimize' or 'maximize'", None)
    try:
        parsed = None if direction is None else Direction(direction)
    except ValueError:
        raise ConfigError(
            f"{table.where('direction')}: expected 'minimize' or 'maximize', got {direction!r}"
        ) from None
    options = {k: v for k, v in raw.items() if k not in ("name", "direction")}
    return ScorerSpec(name=name or "default", direction=parsed, options=options)


def _baseline(raw: Any, source: str, space: Space) -> Baseline | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: baseline: expected a table with 'params' or 'trial'")
    table = _Table(raw, source, "baseline.")
    params = table.get("params", dict, "a table of parameter values", None)
    trial = table.get("trial", str, "a trial id such as 'tiles-1-3' or 'tiles:3'", None)
    table.finish()
    if (params is None) == (trial is None):
        raise ConfigError(f"{source}: baseline: give exactly one of 'params' or 'trial'")
    if params is not None:
        try:
            params = space.coerce(params)
        except ParamError as exc:
            raise ConfigError(f"{source}: baseline.params: {exc}") from None
    return Baseline(params=params, trial=trial)


def _plugin_choice(
    top: _Table, section: Mapping[str, Any], key: str, default: str
) -> tuple[str, Mapping[str, Any]]:
    name = top.get(key, str, f"a registered {key} name", default)
    options = section.get(name, {}) if isinstance(section, Mapping) else {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"{top.source}: {key}.{name}: expected a table of options")
    return name, dict(options)


def load_campaign(path: str | Path, *, workspace: str | Path | None = None,
                  overrides: Sequence[str] = ()) -> Campaign:
    """Read and validate a campaign file.

    :param path: the TOML file.
    :param workspace: override of ``campaign.workspace`` (default ``.dse`` beside the file).
    :param overrides: ``KEY=VALUE`` strings applied over the file first, as ``dse run --set``
        does (:func:`dse.campaign._campaignfile.apply_overrides` says how keys and values read).
    """
    path = Path(path)
    data = read_campaign_file(path)
    if not overrides:
        return campaign_from_dict(data, source=path, workspace=workspace)
    changed = apply_overrides(data, overrides, str(path))
    try:
        campaign = campaign_from_dict(changed, source=path, workspace=workspace)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (with --set {' --set '.join(overrides)})") from None
    return dataclasses.replace(campaign, overrides=tuple(overrides))


def _campaign_backend(top: _Table, root: _Table, data: Mapping[str, Any],
                      where: str) -> tuple[str, dict[str, Any], Price | None]:
    """The backend a campaign names, its options and its price. A command runs on the local
    backend unless another is named; the probe (which plays scripts and runs no command)
    only when asked, or when there is no command to run."""
    environment_table = data.get("environment")
    has_command = isinstance(environment_table, Mapping) and bool(environment_table.get("command"))
    backend, chosen = _plugin_choice(top, root.table("backend"), "backend",
                                     "local" if has_command else "probe")
    options = dict(chosen)
    return backend, options, _price(options, f"{where}: backend.{backend}.price")


def campaign_from_dict(
    data: Mapping[str, Any], *, source: Path | None = None, workspace: str | Path | None = None,
    detect: bool | None = None,
) -> Campaign:
    """Build a :class:`Campaign` from the parsed contents of a campaign file.

    :param detect: find the workload's code version and dependencies where the campaign does
        not declare them (:func:`detect_workload`); default: when it has a *source* file.
    """
    where = str(source) if source else "<campaign>"
    check_numbers(data, where)
    root = _Table(data, where, "")
    top = _Table(root.table("campaign"), where, "campaign.")
    base_dir = source.parent if source else Path.cwd()
    default_name = source.stem if source else None
    name = top.get("name", str, "a campaign name", default_name)
    if name is None:
        raise ConfigError(f"{where}: campaign.name: missing")
    check_name(name, f"{where}: campaign.name")
    space = Space.from_dict(root.table("space"), source=where)
    objectives = _campaign_objectives(root, data, where)
    agent, agent_options = _plugin_choice(top, root.table("agent"), "agent", "random")
    backend, backend_options, price = _campaign_backend(top, root, data, where)
    root.used.update(("data", "scorer", "baseline", "budget", "stopping", "integrations",
                      "enqueue"))
    integrations = _integrations(data.get("integrations"), where)
    data_spec = parse_data(data.get("data"), f"{where}: data", base_dir.resolve())
    scorer = _scorer(root.table("scorer"), where)
    stopping = _stopping(data.get("stopping"), where, objectives)
    pareto = _pareto(top, objectives, scorer)
    baseline = _baseline(data.get("baseline"), where, space)
    budget = parse_budget(data.get("budget"), f"{where}: budget")
    if budget.currency is not None and price is not None and budget.currency != price.currency:
        raise ConfigError(
            f"{where}: budget: ceilings in {budget.currency} but backend.{backend}.price is in"
            f" {price.currency}"
        )
    serves = _serves(top)
    settings = _dispatch_settings(top)
    constraints = _campaign_constraints(top, space, base_dir, where)
    settings.update(_poll_and_interruptions(top, where))
    checkpoint_every = _checkpoint_every(top)
    ws = top.get("workspace", str, "a directory path", ".dse")
    record = _record_url(top)
    # Absolute: trials run in other directories and must still find their files.
    workspace_path = (Path(workspace) if workspace is not None else base_dir / ws).resolve()
    environment = _campaign_environment(
        root, space, where, base_dir, detect=source is not None if detect is None else detect,
        exclude=workspace_path, checkpoint_every=checkpoint_every, data=data_spec,
    )
    top.finish()
    root.finish()
    return Campaign(
        name=name,
        space=space,
        objectives=objectives,
        pareto=pareto,
        agent=agent,
        agent_options=agent_options,
        warm_start=parse_warm_start(root.table("agent"), where, space),
        enqueue=parse_enqueue(data.get("enqueue"), where, space, constraints),
        backend=backend,
        backend_options=backend_options,
        environment=environment,
        constraints=constraints,
        budget=budget,
        price=price or Price(),
        serves=tuple(serves) if serves is not None else (name,),
        data=data_spec,
        scorer=scorer,
        stopping=stopping,
        baseline=baseline,
        integrations=integrations,
        workspace=workspace_path,
        record=record,
        source=source,
        **settings,
    )


def _integrations(raw: Any, where: str) -> dict[str, dict[str, Any]]:
    """The ``[integrations]`` table: each ``[integrations.<name>]`` table its options (``name =
    true`` for none); which names exist is the plugins' to say, when the engine is built."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: integrations: expected a table, got {raw!r:.40}")
    chosen: dict[str, dict[str, Any]] = {}
    for name, options in raw.items():
        if options is True:
            chosen[name] = {}
        elif isinstance(options, Mapping):
            chosen[name] = dict(options)
        elif options is not False:
            raise ConfigError(f"{where}: integrations.{name}: expected a table of options or"
                              f" true, got {options!r:.40}")
    return chosen


def _checkpoint_every(top: _Table) -> float | None:
    every = top.get("checkpoint_every", (int, float, str), "a duration", None)
    return None if every is None else parse_duration(every, top.where("checkpoint_every"))


def _record_url(top: _Table) -> str | None:
    """``[campaign] record``: a PostgreSQL URL with no password in it (the campaign file is
    kept in the record; credentials come from ``PGPASSWORD`` or ``~/.pgpass``)."""
    url: str | None = top.get("record", str, "a postgresql:// URL", None)
    where = top.where("record")
    if url is None:
        return None
    if not url.startswith(RECORD_SCHEMES):
        raise ConfigError(f"{where}: {url!r} is not a record URL (postgresql://[user@]host"
                          "[:port]/database)")
    parts = urllib.parse.urlsplit(url)
    if parts.password is not None or "password" in urllib.parse.parse_qs(parts.query):
        raise ConfigError(f"{where}: the record URL holds a password; the campaign file is"
                          " kept in the record: give it through PGPASSWORD or ~/.pgpass")
    return url


def _campaign_objectives(
    root: _Table, data: Mapping[str, Any], where: str
) -> tuple[Objective, ...]:
    root.used.add("objectives")
    root.used.add("objective")
    if "objectives" in data and "objective" in data:
        raise ConfigError(
            f"{where}: objective: give either [objective] or [[objectives]], not both")
    raw_obj = data.get("objectives", data.get("objective"))
    if raw_obj is None:
        raise ConfigError(f"{where}: objectives: missing; add [[objectives]] with metric = \"...\"")
    return _objectives(raw_obj, where)


def _price(backend_options: dict[str, Any], where_price: str) -> Price | None:
    """The backend's ``price`` table, taken out of its options (``None`` when unpriced)."""
    if "price" not in backend_options:
        return None
    raw_price = backend_options.pop("price")
    if isinstance(raw_price, dict) and any(isinstance(v, dict) for v in raw_price.values()):
        # One table per partition (queue): the campaign's partition picks, else "default".
        partition = backend_options.get("partition")
        key = partition if partition in raw_price else "default"
        if key not in raw_price:
            raise ConfigError(
                f"{where_price}: no price for partition {partition!r} and no 'default'"
                f" (priced: {sorted(raw_price)})"
            )
        # Keys beside the partition tables (a currency, a common rate) apply to every
        # partition that does not set its own.
        shared = {k: v for k, v in raw_price.items() if not isinstance(v, dict)}
        raw_price, where_price = {**shared, **raw_price[key]}, f"{where_price}.{key}"
    return Price.from_table(raw_price, where_price)


def _serves(top: _Table) -> list[str] | None:
    serves: list[str] | str | None = top.get(
        "serves", (list, str), "a list of objective labels", None
    )
    if isinstance(serves, str):
        serves = [serves]
    if serves is not None and not all(isinstance(x, str) and x for x in serves):
        raise ConfigError(f"{top.where('serves')}: expected a list of non-empty strings")
    return serves


def _dispatch_settings(top: _Table) -> dict[str, Any]:
    """``mode``, ``max_parallelism``, ``lookahead``, ``max_trials``, ``seed``,
    ``max_consecutive_rejections`` and ``max_consecutive_failures``, checked, as
    :class:`Campaign` fields."""
    mode = top.get("mode", str, "'waves' or 'rolling'", "waves")
    if mode not in ("waves", "rolling"):
        raise ConfigError(f"{top.where('mode')}: expected 'waves' or 'rolling', got {mode!r}")
    parallel = top.get("max_parallelism", int, "a positive integer", 1)
    if parallel < 1:
        raise ConfigError(
            f"{top.where('max_parallelism')}: expected a positive integer, got {parallel}"
        )
    lookahead = top.get("lookahead", int, "a non-negative integer", 0)
    if lookahead < 0:
        raise ConfigError(f"{top.where('lookahead')}: expected a non-negative integer")
    max_trials = top.get("max_trials", int, "a non-negative integer", None)
    if max_trials is not None and max_trials < 0:
        raise ConfigError(f"{top.where('max_trials')}: expected a non-negative integer")
    seed = top.get("seed", int, "an integer", 0)
    max_rej = top.get("max_consecutive_rejections", int, "a positive integer", 1000)
    if max_rej < 1:
        raise ConfigError(f"{top.where('max_consecutive_rejections')}: expected a positive integer")
    max_fail = top.get("max_consecutive_failures", int, "a non-negative integer", 10)
    if max_fail < 0:
        raise ConfigError(
            f"{top.where('max_consecutive_failures')}: expected a non-negative integer (0:"
            f" never stop), got {max_fail}")
    return {
        "mode": mode, "max_parallelism": parallel, "lookahead": lookahead,
        "max_trials": max_trials, "seed": seed, "max_consecutive_rejections": max_rej,
        "max_consecutive_failures": max_fail,
    }


def _campaign_constraints(
    top: _Table, space: Space, base_dir: Path, where: str
) -> tuple[Constraint, ...]:
    raw_constraints = top.get("constraints", (list, str), "a list of expressions", [])
    if isinstance(raw_constraints, str):
        raw_constraints = [raw_constraints]
    names = frozenset(space.names)
    constraints = []
    for i, text in enumerate(raw_constraints):
        cwhere = f"{where}: campaign.constraints[{i}]"
        if not isinstance(text, str):
            raise ConfigError(f"{cwhere}: expected a string, got {text!r}")
        if is_callable_ref(text):
            constraints.append(callable_constraint(text, base_dir, cwhere))
        else:
            constraints.append(expression_constraint(text, names, cwhere))
    return tuple(constraints)


def _poll_and_interruptions(top: _Table, where: str) -> dict[str, Any]:
    """``poll_interval`` and the interruption settings, checked, as :class:`Campaign`
    fields."""
    poll = top.get("poll_interval", (int, float, str, list), "a duration or [first, max]", None)
    poll_interval = None
    if poll is not None:
        pair = poll if isinstance(poll, list) else [poll, poll]
        if len(pair) != 2:
            raise ConfigError(f"{top.where('poll_interval')}: expected a duration or [first, max]")
        first, largest = (parse_duration(p, top.where("poll_interval")) for p in pair)
        poll_interval = (first, max(first, largest))
    max_interruptions = top.get("max_interruptions", int, "a non-negative integer", 3)
    threshold = top.get("interruption_threshold", int, "a positive integer", 10)
    window = parse_duration(
        top.get("interruption_window", (int, float, str), "a duration", 600.0),
        top.where("interruption_window"),
    )
    node_threshold = top.get("node_interruption_threshold", int, "a positive integer", 3)
    pause = top.get("pause_on_interruptions", bool, "true or false", True)
    if max_interruptions < 0 or threshold < 1 or node_threshold < 1:
        raise ConfigError(
            f"{where}: campaign: max_interruptions >= 0, interruption_threshold >= 1 and"
            " node_interruption_threshold >= 1 expected"
        )
    return {
        "poll_interval": poll_interval, "max_interruptions": max_interruptions,
        "interruption_threshold": threshold, "interruption_window": window,
        "node_interruption_threshold": node_threshold, "pause_on_interruptions": pause,
    }


def _campaign_environment(
    root: _Table, space: Space, where: str, base_dir: Path, *, detect: bool, exclude: Path,
    checkpoint_every: float | None, data: DataSpec | None,
) -> EnvironmentConfig:
    environment = _environment(root.table("environment"), where, base_dir.resolve())
    for at, name in environment.params_read() if space.conditional else ():
        if name in space.names and space[name].when:  # absent where it is inactive
            raise ConfigError(f"{where}: {at}: parameter {name!r} is conditional (absent where"
                              " its `when` does not hold); a trial reads it from its params"
                              " file (DSE_PARAMS_FILE, dse.trial.params())")
    if environment.resource_params or environment.time_limit_param:
        environment = _sized_by_params(environment, space, where)
    if detect and environment.workdir:
        environment = detect_workload(environment, workspace=exclude,
                                      data=data.paths if data is not None else (),
                                      where=f"{where}: environment")
    if checkpoint_every is not None:
        environment = dataclasses.replace(environment, checkpoint_every=checkpoint_every)
    return environment
