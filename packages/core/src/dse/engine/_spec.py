"""A campaign as the record keeps it with each run (a JSON-able description)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._hashing import canonical_json
from dse.model._types import RESOLVED_SCORER, CampaignStatus, TrialStatus
from dse.plugins._environment import workdir_identity

if TYPE_CHECKING:
    from dse.campaign._model import Campaign, EnvironmentConfig
    from dse.model._space import Parameter
    from dse.plugins._protocols import Environment, Runner
    from dse.plugins._scoring import Scorer
    from dse.record._base import Storage
    from dse.record._batch import Batch


def campaign_spec(campaign: Campaign) -> dict[str, Any]:
    """A JSON-able description of a campaign, stored with each run."""
    space = [_param_spec(param) for param in campaign.space]
    env = campaign.environment
    spec: dict[str, Any] = {
        "name": campaign.name,
        "space": space,
        "objectives": [
            {"metric": o.metric, "direction": o.direction.value,
             **({} if o.reference is None else {"reference": o.reference})}
            for o in campaign.objectives
        ],
        "agent": campaign.agent,
        "agent_options": dict(campaign.agent_options),
        "backend": campaign.backend,
        "backend_options": {k: str(v) for k, v in campaign.backend_options.items()},
        "mode": campaign.mode,
        "max_parallelism": campaign.max_parallelism,
        "max_trials": campaign.max_trials,
        "seed": campaign.seed,
        "constraints": [c.text for c in campaign.constraints],
        "max_consecutive_rejections": campaign.max_consecutive_rejections,
        "environment": {
            "command": list(env.command),
            "shell": env.shell,
            "time_limit": env.time_limit,
            "cpus": env.resources.cpus,
            "gpus": env.resources.gpus,
            "memory_mb": env.resources.memory_mb,
            **{k: getattr(env.resources, k) for k in ("nodes", "tasks_per_node")
               if getattr(env.resources, k) != 1},
            **{f"{k}_param": v for k, v in env.resource_params.items()},
            **({"time_limit_param": env.time_limit_param} if env.time_limit_param else {}),
            "code_version": env.code_version,
            # Part of the identity: as it names it (relative to the workspace's directory).
            "workdir": workdir_identity(env.workdir, campaign.workspace.parent),
            **_code_and_dependencies(env),
        },
        "budget": campaign.budget.as_dict(),
        "price": {
            "cpu_hour": campaign.price.cpu_hour, "gpu_hour": campaign.price.gpu_hour,
            "node_hour": campaign.price.node_hour, "billing_hour": campaign.price.billing_hour,
        },
        "currency": campaign.budget.currency or campaign.price.currency,
        "serves": list(campaign.serves),
        "scorer": {
            "name": campaign.scorer.name,
            "direction": campaign.scorer.direction.value if campaign.scorer.direction else None,
            "options": dict(campaign.scorer.options),
        },
        "baseline": None if campaign.baseline is None else {
            "params": dict(campaign.baseline.params) if campaign.baseline.params else None,
            "trial": campaign.baseline.trial,
        },
    }
    if campaign.overrides:
        spec["overrides"] = list(campaign.overrides)  # `dse run --set`, as typed
    if campaign.pareto:
        spec["pareto"] = True  # the objectives are optimised together: `dse report` fronts
    if campaign.lookahead:
        spec["lookahead"] = campaign.lookahead
    if campaign.max_consecutive_failures != 10:  # the default's runs resume as they were
        spec["max_consecutive_failures"] = campaign.max_consecutive_failures
    stopping = campaign.stopping
    if stopping is not None:
        # What `dse report` reads of the rule (its metric, and max_step for what it saved).
        spec["stopping"] = {
            "rule": stopping.rule, "max_step": stopping.max_step,
            "min_step": stopping.min_step, "metric": stopping.metric,
            "direction": stopping.direction.value, "promote": stopping.promote,
            "options": dict(stopping.options),
        }
    if campaign.integrations:  # where its trials were also written (names; no secrets)
        spec["integrations"] = sorted(campaign.integrations)
    return spec


def _param_spec(param: Parameter) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": param.name, "type": param.kind}
    for key in ("choices", "low", "high", "step", "log"):
        if hasattr(param, key):
            value = getattr(param, key)
            entry[key] = list(value) if isinstance(value, tuple) else value
    if param.when:  # a conditional param: `dse show` and the reports draw the tree
        entry["when"] = {parent: list(values) for parent, values in param.when}
    return entry


def agent_stamp(agent: object, named: str) -> str:
    """``name==version`` of *agent* (the campaign's ``agent`` is *named*), as the record keeps
    it: a ``module:Class`` agent without them is named so, and versioned by its code (its
    distribution's version, or its module's source digest: an edited file is a new agent)."""
    from dse.plugins._scoring import source_version

    cls = type(agent)
    name = getattr(agent, "name", None) or (named if ":" in named else cls.__name__)
    version = getattr(agent, "version", None) or source_version(cls)
    return f"{name}=={version}"


CODE_FILES_KEPT = 1000
"""The most files of a ``files:`` code version a run's record lists (beyond, their count)."""


def _code_and_dependencies(env: EnvironmentConfig) -> dict[str, Any]:
    """What the record keeps of the code a ``files:`` version digests and of the
    dependencies (their digest, program and Python; the distributions are kept once per
    digest in the record's environments)."""
    out: dict[str, Any] = {}
    if env.code_files:
        files = dict(list(env.code_files.items())[:CODE_FILES_KEPT])
        out["code_files"] = files
        if len(env.code_files) > len(files):
            out["code_files_more"] = len(env.code_files) - len(files)
    if env.dependencies is not None:
        out["dependencies"] = env.dependencies.describe()
    return out


def record_run(
    store: Storage, campaign: Campaign, *, scorer: Scorer, agent: object, runner: Runner,
    now: float,
) -> int:
    """Record a new run of *campaign* (its spec, and the scorer, agent and runner it runs
    with); return its id."""
    spec = campaign_spec(campaign)
    spec[RESOLVED_SCORER] = {
        "name": scorer.name, "version": scorer.version, "direction": scorer.direction.value,
    }
    return store.create_campaign(
        name=campaign.name,
        source=str(campaign.source) if campaign.source else None,
        spec=spec,
        agent=agent_stamp(agent, campaign.agent),
        backend=f"{runner.name}=={runner.version}",
        mode=campaign.mode,
        max_parallelism=campaign.max_parallelism,
        now=now,
    )


LEASE_ENV = "DSE_LEASE_S"


"""Sets the shortest lease a controller holds, in seconds (by default
:data:`dse.record.sql._leases.LEASE_FLOOR_S`)."""


def lease_ttl(campaign: Campaign, poll: tuple[float, float] | None) -> float:
    """How long a renewal of *campaign*'s lease holds: twice the longest wait between two
    polling passes (the campaign's, else the backend's *poll*), and no less than the floor."""
    from dse.record.sql._leases import LEASE_FLOOR_S

    floor = float(os.environ.get(LEASE_ENV) or LEASE_FLOOR_S)
    longest = (campaign.poll_interval or poll or (0.0, 0.0))[1]
    return max(2.0 * float(longest), floor)


def hold_campaign(store: Storage, campaign: Campaign, poll: tuple[float, float] | None) -> None:
    """Take (or keep) *campaign*'s lease in the record for this process: a controller on any
    host that holds it, renewed, is a :class:`~dse.LockedError` naming it."""
    from dse.record._lock import LockHolder

    store.take_lease(campaign.name, LockHolder.current().as_record(),
                     lease_ttl(campaign, poll))


def open_run(
    store: Storage, batch: Batch, campaign: Campaign, *, resume: int | None, reuse: bool,
    scorer: Scorer, agent: object, runner: Runner, now: float,
) -> tuple[int, str]:
    """Record a new run of *campaign* (or reopen run *resume*) as driven by this process;
    return its id and the line :func:`record_identity` says (empty when none).

    The campaign's lease is taken first (:func:`hold_campaign`): a controller that holds it,
    renewed, on any host, refuses this one — a deleted lock file does not let a second
    controller drive it too. This process is then recorded as the run's controller (its
    ``controller`` event, in *batch*)."""
    from dse.record._lock import LockHolder  # a run's alone: reads never lock

    hold_campaign(store, campaign, runner.default_poll_interval)
    if resume is not None:
        run = resume
        store.reopen_campaign(resume)
    else:
        run = record_run(store, campaign, scorer=scorer, agent=agent, runner=runner, now=now)
    batch.add_event(campaign=run, trial=None, at=now, kind="controller",
                    data=LockHolder.current().as_record())
    return run, record_identity(store, batch, campaign, run, new=resume is None and reuse)


@dataclass(frozen=True, slots=True)
class RunChoice:
    """What ``dse run`` does with a campaign's latest run (:func:`resumable_run`)."""

    resume: int | None = None
    """The run to continue, if any."""
    supersede: int | None = None
    """A run its controller left ``running`` that is not continued (the campaign changed,
    or ``--fresh``): it is closed first — its running trials finish and are recorded, nothing
    new starts in it, it ends ``stopped (superseded)`` — then a new run starts."""
    line: str = ""
    """What is done, in one line (empty when there was no such run)."""


def resumable_run(store: Storage, campaign: Campaign, *, fresh: bool) -> RunChoice:
    """The run of *campaign* to continue — the latest, when it did not finish (running when
    its controller died, or cancelled) and the campaign is the same (its file and ``--set``
    overrides give the same spec) — or the one to close before a new run starts: what
    ``dse run`` and :func:`dse.run` both decide."""
    # Before anything is said or decided: another controller may drive a run of it. Its
    # lease says so on any host (a deleted lock file does not take it away).
    hold_campaign(store, campaign, None)
    row = store.reads.find_campaign(campaign.name)
    if row is None or row.status not in (CampaignStatus.RUNNING, CampaignStatus.CANCELLED):
        return RunChoice()
    # A run left running (its controller died) is never left behind: its trials may still
    # run, and would run beside the new run's (and their results be lost).
    supersede = row.id if row.status is CampaignStatus.RUNNING else None
    if fresh:
        return RunChoice(supersede=supersede, line=(
            f"run {row.id} of {campaign.name} is {row.status.value};"
            f" {_starting(store, supersede)} (--fresh)"))
    stored = dict(row.spec)
    stored.pop(RESOLVED_SCORER, None)
    spec = campaign_spec(campaign)
    if canonical_json(stored) != canonical_json(spec):
        return RunChoice(supersede=supersede, line=(
            f"run {row.id} of {campaign.name} did not finish, but the campaign changed since:"
            f" {spec_changes(stored, spec)}; {_starting(store, supersede)}"))
    what = "was cancelled" if row.status is CampaignStatus.CANCELLED else "did not finish"
    return RunChoice(resume=row.id, line=f"run {row.id} of {campaign.name} {what}: resuming it")


def _starting(store: Storage, supersede: int | None) -> str:
    """How the new run starts, in words: at once, or once run *supersede* is closed."""
    if supersede is None:
        return "starting a new run"
    running = store.reads.trial_counts(supersede).get(TrialStatus.RUNNING, 0)
    if not running:
        return "closing it (superseded), then starting a new run"
    return (f"its {running} running trial{'s' if running != 1 else ''} finish first, recorded"
            f" in run {supersede} (which then ends superseded); then a new run starts")


CHANGES_SHOWN = 3
"""The differences :func:`spec_changes` names (the rest are counted)."""


def spec_changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """What differs between a run's recorded spec *before* and the campaign's *now*, in
    words: the ``--set`` overrides that changed, each with both values (``--set
    max_parallelism: 2 before, 4 now``); else the keys of the spec that did (the file was
    edited: ``max_trials: 20 before, 30 now``)."""
    sets = [_overrides(before), _overrides(now)]
    keys = sorted(k for k in {*sets[0], *sets[1]} if sets[0].get(k) != sets[1].get(k))
    old, new = _flat(before), _flat(now)
    if keys:
        # A key set on one side only has the file's value on the other.
        parts = [f"--set {k}: {sets[0].get(k) or _shown(old, k, ' (the file)')} before,"
                 f" {sets[1].get(k) or _shown(new, k, ' (the file)')} now" for k in keys]
    else:
        paths = sorted(p for p in {*old, *new} if p != "overrides" and old.get(p) != new.get(p))
        parts = [f"{p}: {_shown(old, p)} before, {_shown(new, p)} now" for p in paths]
    more = len(parts) - CHANGES_SHOWN
    return "; ".join(parts[:CHANGES_SHOWN]) + (f"; and {more} more" if more > 0 else "")


def _overrides(spec: Mapping[str, Any]) -> dict[str, str]:
    """The ``--set KEY=VALUE`` overrides of *spec*, KEY -> VALUE as typed (the last wins)."""
    return dict(str(o).partition("=")[::2] for o in spec.get("overrides") or ())


def _flat(spec: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """*spec*'s values by dotted key (tables walked into, lists kept whole)."""
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, Mapping) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _shown(values: Mapping[str, Any], path: str, where: str = "") -> str:
    """The value at *path* of a flat spec, short (and *where* it comes from), or ``not
    set``."""
    if path not in values:
        return "not set"
    text = canonical_json(values[path])
    return (text if len(text) <= 60 else text[:57] + "...") + where


def result_identity(environment: Environment, runner: Runner) -> dict[str, Any]:
    """What a result's identity holds besides its params and data version: the environment's
    workload identity, the backend and its placement (docs/record.md, "The identity of a
    result")."""
    return {**environment.identity(), "backend": runner.name,
            "placement": dict(runner.placement())}


def record_identity(store: Storage, batch: Batch, campaign: Campaign, run: int, *,
                    new: bool) -> str:
    """Keep in *batch* the Python environment the campaign's command was found to run with
    (what ``dse show`` compares a trial's report with), and, for a *new* run that reuses
    results, the line :func:`unversioned_results` says (empty when none)."""
    deps = campaign.environment.dependencies
    if deps is not None and deps.python is not None:
        batch.add_environment(digest=deps.digest, python=deps.python,
                              distributions=deps.distributions)
    return unversioned_results(store, campaign, run) if new else ""


def unversioned_results(store: Storage, campaign: Campaign, run: int) -> str:
    """The line a new run *run* says when earlier runs of *campaign* recorded results without
    the code version or dependency digest it now has (an earlier release's, or a campaign
    that declared neither): those are shown and exported but never reused. Said by the first
    run after them (not again once a run has recorded results with both); empty when none."""
    env = campaign.environment
    missing: list[tuple[int, list[str]]] = []
    # Latest first, back to the last run that recorded results with both (it said so).
    for row in reversed(store.reads.campaigns()):
        if row.id >= run or row.name != campaign.name:
            continue
        recorded = row.spec.get("environment", {})
        lacks = [part for part, now, then in (
            ("code version", env.code_version, recorded.get("code_version")),
            ("dependency digest", env.dependencies, recorded.get("dependencies")),
            ("work directory", env.workdir, recorded.get("workdir")),
        ) if now is not None and then is None]
        if not lacks:
            break
        counts = store.reads.trial_counts(row.id)
        results = sum(n for status, n in counts.items() if status.is_reusable())
        if results:
            missing.append((results, lacks))
    if not missing:
        return ""
    total = sum(n for n, _ in missing)
    parts = sorted({part for _, lacks in missing for part in lacks})
    named = " or ".join(parts) if len(parts) < 3 else f"{', '.join(parts[:-1])} or {parts[-1]}"
    return (f"{total} result(s) of earlier runs were recorded without a {named}:"
            " shown and exported, never reused; this run measures their configurations again")
