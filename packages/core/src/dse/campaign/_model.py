"""The campaign as values: what a campaign file says once read and checked (:class:`Campaign`,
its environment, scorer, stopping rule and baseline). :mod:`dse.campaign._campaign` reads
and checks the file."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dse.campaign._campaignfile import check_name
from dse.campaign._code import CodeSpec
from dse.model._budget import Budget, Price
from dse.model._errors import ConfigError
from dse.model._numbers import is_int64
from dse.model._template import PLACEHOLDER
from dse.model._types import Direction, Objective, Resources

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dse.campaign._data import DataSpec
    from dse.campaign._deps import Dependencies
    from dse.campaign._seeding import WarmStart
    from dse.model._constraints import Constraint
    from dse.model._space import Space

Mode = Literal["waves", "rolling"]


@dataclass(frozen=True, slots=True)
class ScorerSpec:
    """The campaign's ``[scorer]`` table."""

    name: str = "default"
    """A registered scorer name, or ``module:function``."""
    direction: Direction | None = None
    """Overrides the scorer's direction (default: the scorer's, else the objective's)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The rest of the table, passed to a registered scorer class."""


@dataclass(frozen=True, slots=True)
class EnvironmentConfig:
    """The ``[environment]`` table: what a trial runs and what it needs."""

    command: tuple[str, ...] = ()
    """Command template; ``{param}`` items are replaced by param values, one argv item each."""
    shell: bool = False
    """Run the command through ``/bin/sh -c`` (values are still passed as arguments)."""
    time_limit: float | None = None
    """Per-trial wall-clock limit in seconds (the largest a trial may have, when a param sets
    it)."""
    time_limit_param: str | None = None
    """The param that sets each trial's limit in seconds (``time_limit = "{param}"``)."""
    resources: Resources = field(default_factory=Resources)
    """Nodes, tasks per node, CPUs per task, GPUs and memory per node of a trial (the largest
    a trial may ask, when a param sets them)."""
    resource_params: Mapping[str, str] = field(default_factory=dict)
    """Resources set per trial by a param (``nodes = "{nodes}"``): :class:`Resources` field
    (``cpus``, ``gpus``, ``nodes``, ``tasks_per_node``) -> param."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables for every trial."""
    code_version: str | None = None
    """The version of the workload's code (part of the config hash): declared, else detected
    when the campaign is loaded from a file (its git state, else ``files:<digest>``)."""
    code: CodeSpec = field(default_factory=CodeSpec)
    """``code`` and ``code_exclude``: files that are code besides what the command runs."""
    code_files: Mapping[str, str] = field(default_factory=dict)
    """The files a detected ``files:`` code version digests (name → digest), for the record."""
    dependencies: Dependencies | None = None
    """What the command runs with (part of the config hash): declared
    (``dependencies = "…"``), else detected when the campaign is loaded from a file (the
    Python environment or the program the command resolves to); ``None``: not known."""
    workdir: Path | None = None
    """Working directory of the command (default: the campaign file's directory)."""
    checkpoint_every: float | None = None
    """Seconds between checkpoints the campaign asks for (``DSE_CHECKPOINT_EVERY``)."""

    def resources_for(self, params: Mapping[str, Any]) -> Resources:
        """What a trial of *params* holds: :attr:`resources`, with the nodes, tasks, CPUs or
        GPUs a param sets (``nodes = "{nodes}"``) taken from it."""
        chosen = {k: int(params[name]) for k, name in self.resource_params.items()
                  if name in params}
        return dataclasses.replace(self.resources, **chosen) if chosen else self.resources

    def params_read(self) -> list[tuple[str, str]]:
        """The params every trial's command needs a value of, each with where it is read
        (``environment.command: {x}``, ``environment.cpus``, ``environment.time_limit``)."""
        read = [(f"environment.command: {{{name}}}", name)
                for item in self.command for name in PLACEHOLDER.findall(item)]
        read += [(f"environment.{key}", name) for key, name in self.resource_params.items()]
        if self.time_limit_param:
            read.append(("environment.time_limit", self.time_limit_param))
        return read


@dataclass(frozen=True, slots=True)
class Campaign:
    """A whole campaign: space, agent, environment, backend, objectives and policies."""

    name: str
    """Name, unique within a workspace; letters, digits, ``.``, ``_``, ``-``."""
    space: Space
    """The search space."""
    objectives: tuple[Objective, ...]
    """Objectives; the first one ranks trials ("best so far")."""
    pareto: bool = False
    """``[campaign] objectives = "pareto"``: the objectives are optimised together (every
    trial scored on each, ranked by Pareto front); else the first is, the rest carried."""
    agent: str = "random"
    """Registered agent name."""
    agent_options: Mapping[str, Any] = field(default_factory=dict)
    """The ``[agent.<name>]`` table."""
    warm_start: WarmStart | None = None
    """The earlier runs whose results the agent is told before it proposes (``[agent]
    warm_start``), or ``None``."""
    enqueue: tuple[dict[str, Any], ...] = ()
    """Configurations run before the agent's proposals (``[[enqueue]]``), coerced."""
    backend: str = "probe"
    """Registered backend name."""
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    """The ``[backend.<name>]`` table."""
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    """What a trial runs."""
    mode: Mode = "waves"
    """``waves``: start up to ``max_parallelism``, wait for all; ``rolling``: refill at once."""
    max_parallelism: int = 1
    """Most trials running at once."""
    lookahead: int = 0
    """Trials prepared ahead of free resources, so the pool scheduler can choose among them
    (longest expected first); 0: a trial is pulled from the agent only when it can start."""
    max_trials: int | None = None
    """Step allowance: most proposals accepted as trials or cache hits (``None``: no bound)."""
    seed: int = 0
    """Seed handed to the agent."""
    constraints: tuple[Constraint, ...] = ()
    """Predicates a proposal must satisfy; violations are rejected and take no slot."""
    max_consecutive_rejections: int = 1000
    """Rejections in a row after which the campaign stops."""
    max_consecutive_failures: int = 10
    """Trials in a row failing the same way, none completed yet, after which the campaign
    stops (``max_consecutive_failures``); 0: never."""
    poll_interval: tuple[float, float] | None = None
    """(first, largest) wait between passes with no change; ``None``: the backend's default."""
    max_interruptions: int = 3
    """Interruptions a trial may suffer and be retried; the next one ends it ``interrupted``."""
    interruption_threshold: int = 10
    """Interruptions within ``interruption_window`` that make the problem systematic."""
    interruption_window: float = 600.0
    """Sliding window (seconds) for ``interruption_threshold``."""
    node_interruption_threshold: int = 3
    """Distinct trials one node may interrupt before it is reported and avoided."""
    pause_on_interruptions: bool = True
    """Pause dispatch while interruptions are systematic (instead of burning retries)."""
    budget: Budget = field(default_factory=Budget)
    """Ceilings (the ``[budget]`` table), enforced before launch by the engine's ledger."""
    price: Price = field(default_factory=Price)
    """Money per resource-hour on this campaign's backend (``[backend.<name>.price]``)."""
    serves: tuple[str, ...] = ()
    """Objective labels this campaign serves (spend rolls up to them; default: its name)."""
    data: DataSpec | None = None
    """The inputs the trials read (the ``[data]`` table), whose version stamps every trial."""
    scorer: ScorerSpec = field(default_factory=ScorerSpec)
    """Who scores a complete run (the ``[scorer]`` table; default: the objective's metric)."""
    stopping: StoppingSpec | None = None
    """The rule that stops hopeless trials early (the ``[stopping]`` table), or ``None``."""
    baseline: Baseline | None = None
    """What scores are compared against (the ``[baseline]`` table), or ``None``."""
    integrations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Where its trials are also written as they end: each ``[integrations.<name>]`` table's
    options, by name (``mlflow``, ``tensorboard``, ``wandb`` or a plugin's)."""
    workspace: Path = Path(".dse")
    """Directory holding ``dse.sqlite`` and the trial directories."""
    record: str | None = None
    """The record, when not the workspace's SQLite file: a ``postgresql://`` URL (the
    ``[campaign] record`` key; ``--record`` and ``DSE_RECORD`` come first)."""
    source: Path | None = None
    """The campaign file, when loaded from one."""
    overrides: tuple[str, ...] = ()
    """The ``KEY=VALUE`` overrides applied over the campaign file (``dse run --set``), in
    order, as typed; the run's record keeps them."""

    def __post_init__(self) -> None:
        where = str(self.source) if self.source else "<campaign>"
        check_name(self.name, f"{where}: campaign.name")
        if not self.objectives:
            raise ConfigError(f"{where}: objectives: at least one objective is required")
        if self.mode not in ("waves", "rolling"):
            raise ConfigError(
                f"{where}: campaign.mode: expected 'waves' or 'rolling', got {self.mode!r}"
            )
        if self.max_parallelism < 1:
            raise ConfigError(f"{where}: campaign.max_parallelism: expected >= 1")
        if self.max_trials is not None and self.max_trials < 0:
            raise ConfigError(f"{where}: campaign.max_trials: expected >= 0")
        if self.lookahead < 0:
            raise ConfigError(f"{where}: campaign.lookahead: expected >= 0")
        if self.max_consecutive_rejections < 1:
            raise ConfigError(f"{where}: campaign.max_consecutive_rejections: expected >= 1")
        if self.max_consecutive_failures < 0:
            raise ConfigError(f"{where}: campaign.max_consecutive_failures: expected >= 0")
        for key in _WHOLE_FIELDS:  # a Campaign built in Python: the record keeps them
            value = getattr(self, key)
            if value is not None and not is_int64(value):
                raise ConfigError(f"{where}: campaign.{key}: expected an integer within 64"
                                  f" bits, got {value!r:.40}")


_WHOLE_FIELDS = ("max_parallelism", "lookahead", "max_trials", "seed",
                 "max_consecutive_rejections", "max_consecutive_failures", "max_interruptions",
                 "interruption_threshold", "node_interruption_threshold")
"""The integer fields of a :class:`Campaign`."""


@dataclass(frozen=True, slots=True)
class StoppingSpec:
    """The ``[stopping]`` table: which rule stops trials early, on which metric, over which
    steps (the workload's :func:`dse.trial.report_progress` steps)."""

    rule: str
    """The registered stopping rule (``median``, ``asha``, ``hyperband``, or a plugin's)."""
    max_step: int
    """The step a full run ends at (a trial reporting it is not compared any more)."""
    metric: str
    """The progress metric compared (default: the primary objective's)."""
    direction: Direction = Direction.MINIMIZE
    """Which way the metric is better (default: its objective's)."""
    min_step: int = 1
    """The first step a trial may be stopped at (ASHA's and Hyperband's smallest rung)."""
    promote: bool = True
    """Whether a stopped trial with a checkpoint may be promoted (resumed) later."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The ``[stopping.<rule>]`` table, handed to the rule."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """The ``[baseline]`` table: the params of the reference run, or an existing trial."""

    params: Mapping[str, Any] | None = None
    """Params of the baseline run (coerced to the space), run once per data version."""
    trial: str | None = None
    """An existing trial of the workspace (``<campaign>-<run>-<number>``, ``<campaign>:<n>``);
    its params are run again when the current data version is not the one it ran on."""
