"""``dse show``: the run record of one trial, answering the five questions of the design.

1. what exactly was run, 2. against what data, 3. how it ended, 4. what it cost, 5. what
was concluded and by which scorer. :func:`trial_records` builds the JSON form (one object
per trial, the schema in ``docs/record.md``); :func:`record_lines` prints it for people.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dse._version import __version__
from dse.model._hashing import canonical_json
from dse.model._spend import Spend
from dse.model._states import RESOLVED_SCORER
from dse.model._template import substitute
from dse.report._front import pareto_objectives, pareto_ranks_by_row

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dse.record._base import Storage
    from dse.record._records import (
        Attempt,
        CampaignRun,
        DecisionRow,
        EnvironmentRecord,
        Invalidation,
        LineageRow,
        ProgressRow,
        Score,
        Trial,
        TrialRef,
    )

DEFAULT_SCORER = {"name": "default", "version": __version__}
"""The scorer of a run recorded before scorers were (it read the primary objective's metric)."""

EXPORT_SCHEMA = 2
"""Version of the ``dse export --format json`` document (``docs/record.md``)."""

_SPEND_KEYS = ("wall_s", "cpu_s", "gpu_s", "node_s", "money")


def trial_records(
    store: Storage, run: CampaignRun, trials: Sequence[Trial] | None = None,
    ranks: Mapping[int, int] | None = None,
) -> list[dict[str, Any]]:
    """The record of each of *trials* (default: every trial of *run*), in their order: what
    is read is theirs (their attempts, scores, links), never the rest of the run's — but for
    a Pareto run, each trial's rank among the run's (*ranks*: trial row -> Pareto rank, as
    :func:`dse.report._front.pareto_ranks_by_row` gives it; read here when not given)."""
    if trials is None:
        trials = store.reads.trials(run.id)
    attempts: dict[int, list[Attempt]] = {}
    for attempt in store.reads.attempts(run.id, trials=[t.id for t in trials]):
        attempts.setdefault(attempt.trial_id, []).append(attempt)
    reused = store.reads.trial_refs(t.cache_of for t in trials if t.cache_of is not None)
    context = _Context(store, run, trials)
    if run.spec.get("pareto"):
        context.ranks = ranks if ranks is not None else pareto_ranks_by_row(store, run.id,
                                                                            run.spec)
    return [_record(run, t, attempts.get(t.id, []), reused, context) for t in trials]


class _Context:
    """What the records of one run's trials refer to, read in a few queries: scores,
    invalidations, environments and the trials they link to."""

    def __init__(self, store: Storage, run: CampaignRun, trials: Sequence[Trial]) -> None:
        self.scores: dict[int, list[Score]] = {}
        for score in store.summaries.trial_scores(t.id for t in trials):
            self.scores.setdefault(score.trial_id, []).append(score)
        self.invalidations: dict[int, Invalidation] = {i.id: i for i in store.reads.invalidations()}
        self.reused_dependencies = store.reads.trial_dependencies(
            t.cache_of for t in trials if t.cache_of is not None)
        """The dependency digest the result each cache hit reuses was measured with."""
        dispatched = _dispatched(run)
        self.environments: Mapping[str, EnvironmentRecord] = store.reads.environments({
            *(t.dependencies for t in trials if t.dependencies),
            *self.reused_dependencies.values(),
            *([dispatched["digest"]] if dispatched else []),
        })
        linked = {t.replaces for t in trials if t.replaces is not None}
        linked |= {s.baseline_trial for rows in self.scores.values() for s in rows
                   if s.baseline_trial is not None}
        self.names = {row: _trial_ref(ref) for row, ref in store.reads.trial_refs(linked).items()}
        self.progress = store.reads.progress_tails(t.id for t in trials)
        self.decisions: dict[int, list[DecisionRow]] = {}
        for decision in store.stops.trial_decisions(t.id for t in trials):
            self.decisions.setdefault(decision.trial_row, []).append(decision)
        self.first_steps = store.stops.first_steps(
            row for row, rows in self.decisions.items()
            if any(d.verdict == "promote" for d in rows))
        self.replaced_by = {
            row: [_trial_ref(ref) for ref in refs]
            for row, refs in store.reads.replacements(t.id for t in trials).items()
        }
        self.ranks: Mapping[int, int] = {}
        """A Pareto run's trials' ranks (trial row -> rank)."""
        lineage = store.stops.lineage(run.id)
        self.parents = {row.trial_row: row for row in lineage}
        """Population-based training: each trial that started from a copy of another's
        checkpoint -> its lineage row."""
        self.children: dict[int, list[LineageRow]] = {}
        for row in lineage:
            self.children.setdefault(row.parent_row, []).append(row)
        shown = {self.parents[t.id].parent_row for t in trials if t.id in self.parents}
        self.parent_params = {row: found.params for row in shown
                              if (found := store.stops.trial_by_row(row)) is not None}
        """The params of the parents of the trials shown (one read each)."""

    def invalid(self, mark: int | None) -> dict[str, Any] | None:
        if mark is None or mark not in self.invalidations:
            return None
        row = self.invalidations[mark]
        return {"invalidation": row.id, "kind": row.kind, "target": row.target,
                "reason": row.reason, "at": row.at}


def _trial_ref(ref: TrialRef) -> dict[str, Any]:
    return {"trial": ref.trial_id, "run": ref.campaign_id, "number": ref.number}


def _record(
    run: CampaignRun,
    trial: Trial,
    attempts: list[Attempt],
    reused: Mapping[int, TrialRef],
    context: _Context,
) -> dict[str, Any]:
    trial_id = f"{run.name}-{run.id}-{trial.number}"
    expected, read = trial.data_version, trial.data_version_read
    reuses = None
    if trial.cache_of is not None and trial.cache_of in reused:
        reuses = _trial_ref(reused[trial.cache_of])
    costs = [_attempt_cost(a) for a in attempts]
    total = Spend()
    for cost in costs:
        total = total + Spend(**{k: cost[k] for k in _SPEND_KEYS})
    return {
        "trial": {"id": trial_id, "campaign": run.name, "run": run.id, "number": trial.number},
        "run": _what_ran(run, trial, trial_id, attempts, context),
        "data": {"expected": expected, "read": read,
                 "mismatch": expected is not None and read is not None and read != expected},
        "ended": {
            "outcome": trial.status.value,
            "failure": trial.failure.value if trial.failure is not None else None,
            "message": trial.message,
            "reuses": reuses,
            "replaces": context.names.get(trial.replaces)
            if trial.replaces is not None else None,
            "replaced_by": context.replaced_by.get(trial.id, []),
            "created_at": trial.created_at,
            "ended_at": trial.ended_at,
            "attempts": [_attempt(a) for a in attempts],
            "progress": _progress(context.progress.get(trial.id)),
            "stopping": _stopping(trial, context),
            "lineage": _lineage(trial, context),
        },
        "cost": {"currency": run.spec.get("currency") or "USD", "attempts": costs,
                 "total": total.as_dict()},
        "concluded": _concluded(run, trial, context),
    }


def _what_ran(run: CampaignRun, trial: Trial, trial_id: str, attempts: list[Attempt],
              context: _Context) -> dict[str, Any]:
    """Answer 1: the params, the command, the environment and the candidate."""
    env = run.spec.get("environment", {})
    params = trial.params
    agent_name, _, agent_version = run.agent.partition("==")
    command = list(env.get("command") or [])
    argv = None
    if command and trial.trial_dir:
        argv = _argv(command, params, trial_id, trial.trial_dir,
                     max((a.attempt for a in attempts), default=1),
                     shell=bool(env.get("shell", False)))
    dispatched = _dispatched(run)
    reused = context.reused_dependencies.get(trial.cache_of) if trial.cache_of else None
    if trial.dependencies:
        dependencies = _environment(trial.dependencies, "trial", context)
    elif reused:
        dependencies = _environment(reused, "reused", context)
    elif dispatched is not None and dispatched.get("python") is not None:
        dependencies = _environment(dispatched["digest"], "dispatch", context)
    else:
        dependencies = None
    return {
        "params": params,
        **_space_tree(run, params),
        "config_hash": trial.config_hash,
        "command": command or None,
        "shell": bool(env.get("shell", False)),
        "argv": argv,
        "workdir": env.get("workdir"),
        "resources": _resources(env, params),
        "code_version": env.get("code_version"),
        "code_files": env.get("code_files"),
        "code_files_more": env.get("code_files_more", 0),
        "dependencies": dependencies,
        "dispatched_dependencies": dispatched,
        "agent": {"name": agent_name, "version": agent_version or None},
        "proposal": trial.proposal,
        "baseline_run": trial.proposal == 0,
        "wave": trial.wave,
        "backend": run.backend,
        "trial_dir": trial.trial_dir,
    }


def _space_tree(run: CampaignRun, params: Mapping[str, Any]) -> dict[str, Any]:
    """``{"space": ...}`` for a run of a conditional space: each param as the run's record
    describes it (its ``when`` too) and whether it was active in *params*; else nothing."""
    space = run.spec.get("space") or []
    if not any(entry.get("when") for entry in space):
        return {}
    return {"space": [{**entry, "active": entry.get("name") in params} for entry in space]}


def _dispatched(run: CampaignRun) -> dict[str, Any] | None:
    """The dependencies the controller found before the run's trials were dispatched (part of
    their identity), as the run's spec keeps them; ``None`` for a run that has none."""
    found = run.spec.get("environment", {}).get("dependencies")
    return dict(found) if isinstance(found, Mapping) and found.get("digest") else None


def _environment(digest: str, source: str, context: _Context) -> dict[str, Any]:
    """An environment by digest, as the record keeps it, and who said it (*source*: the
    ``trial`` itself, the ``reused`` trial's report, or the controller at ``dispatch``)."""
    found = context.environments.get(digest)
    return {
        "digest": digest,
        "python": found.python if found is not None else None,
        "distributions": dict(found.distributions) if found is not None else None,
        "source": source,
    }


_RESOURCES = {"nodes": 1, "tasks_per_node": 1, "cpus": 1, "gpus": 0, "memory_mb": None}
"""The resources a run's spec records, with the value a record made before one existed
means."""


def _resources(env: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """What the trial asked for: the campaign's resources, or the param that set each."""
    out = {}
    for key, default in _RESOURCES.items():
        name = env.get(f"{key}_param")
        out[key] = params.get(name, default) if name else env.get(key, default)
    return out


def _concluded(run: CampaignRun, trial: Trial, context: _Context) -> dict[str, Any]:
    """Answer 5: the metrics, every score given and by which scorer, and the flags."""
    spec = run.spec
    objectives = spec.get("objectives") or [{}]
    scores = [
        {
            "scorer": row.scorer, "version": row.scorer_version, "score": row.score,
            "baseline": context.names.get(row.baseline_trial)
            if row.baseline_trial is not None else None,
            "at": row.created_at, "invalid": context.invalid(row.invalidation),
        }
        for row in context.scores.get(trial.id, [])
    ]
    latest = scores[-1] if scores else None
    resolved = spec.get(RESOLVED_SCORER) or DEFAULT_SCORER
    scorer = ({"name": latest["scorer"], "version": latest["version"]} if latest
              else {"name": resolved["name"], "version": resolved["version"]})
    invalid = context.invalid(trial.invalidation)
    score_invalid = latest["invalid"] if latest else None
    stopped = _stopping(trial, context)
    return {
        "scorer": scorer,
        "objective": {"metric": objectives[0].get("metric"),
                      "direction": objectives[0].get("direction")},
        "direction": resolved.get("direction") or objectives[0].get("direction"),
        "metrics": trial.metrics or {},
        "step": trial.step if trial.step is not None else (
            stopped["stopped"]["step"] if stopped and stopped["stopped"] else None),
        "max_step": (spec.get("stopping") or {}).get("max_step"),
        "score": trial.score,
        "baseline": latest["baseline"] if latest else None,
        "no_score": None if trial.score is not None else _no_score(trial),
        "valid": invalid is None and score_invalid is None,
        "invalid": invalid or score_invalid,
        "scores": scores,
        "pareto": _pareto(spec, trial, context),
    }


def _pareto(spec: Mapping[str, Any], trial: Trial, context: _Context) -> dict[str, Any] | None:
    """A Pareto run's trial: its score of each objective and its rank among the valid scored
    trials of its data version (``None``: it has no valid scores)."""
    objectives = pareto_objectives(spec)
    if objectives is None:
        return None
    vector = trial.scores
    return {
        "scores": None if vector is None else {
            metric: value for (metric, _), value in zip(objectives, vector, strict=True)},
        "rank": context.ranks.get(trial.id),
        "version": trial.data_version_read or trial.data_version,
    }


def _argv(command: list[str], params: dict[str, Any], trial_id: str, trial_dir: str,
          attempt: int, *, shell: bool) -> list[str] | None:
    """The command as the trial's last attempt ran it, each value in its own item (through
    a shell, quoted as it was); ``None`` if it cannot be rebuilt."""
    values: dict[str, Any] = dict(params)
    values.update(trial_id=trial_id, trial_dir=trial_dir, attempt=attempt,
                  checkpoint_dir=f"{trial_dir}/checkpoint",
                  params_file=f"{trial_dir}/params.json")
    try:
        return [substitute(item, values, shlex.quote if shell else str) for item in command]
    except KeyError:
        return None


def _progress(tail: tuple[int, ProgressRow] | None) -> dict[str, Any] | None:
    if tail is None:
        return None
    n, last = tail
    return {"points": n, "last": {"attempt": last.attempt, "step": last.step,
                                  "metrics": dict(last.metrics), "at": last.at}}


def _stopping(trial: Trial, context: _Context) -> dict[str, Any] | None:
    """The stopping rule's decisions about *trial*, and the one that stopped it."""
    rows = context.decisions.get(trial.id)
    if not rows:
        return None
    decisions = [_decision(d, context.first_steps.get((trial.id, d.attempt + 1))
                           if d.verdict == "promote" else None) for d in rows]
    stops = [d for d in decisions if d["verdict"] in ("stop", "exploit")]
    stopped = stops[-1] if stops and trial.status.value == "stopped" else None
    return {"stopped": stopped, "decisions": decisions}


def _lineage(trial: Trial, context: _Context) -> dict[str, Any] | None:
    """Population-based training: the trial whose checkpoint *trial* started from (and the
    params before and after), the member it replaced, and the trials started from its own."""
    parent = context.parents.get(trial.id)
    children = context.children.get(trial.id, [])
    if parent is None and not children:
        return None
    return {
        "parent": None if parent is None else {
            "number": parent.parent, "step": parent.parent_step,
            "params_before": context.parent_params.get(parent.parent_row),
            "params_after": trial.params, "replaces": parent.member},
        "children": [{"number": c.number, "step": c.parent_step, "replaces": c.member}
                     for c in children],
    }


def _decision(row: DecisionRow, resumed_step: int | None) -> dict[str, Any]:
    return {
        "attempt": row.attempt, "verdict": row.verdict, "rule": row.rule,
        "version": row.rule_version, "rung": row.rung, "step": row.step, "value": row.value,
        "cutoff": row.cutoff, "peers": row.peers,
        "compared": [[number, value] for number, value in row.compared],
        "reason": row.reason, "bracket": row.bracket, "at": row.at,
        "resumed_step": resumed_step,
    }


def _attempt(row: Attempt) -> dict[str, Any]:
    return {
        "attempt": row.attempt,
        "backend": row.backend,
        "job_id": row.job_id,
        "state": row.state.value,
        "exit_code": row.exit_code,
        "signal": row.signal,
        "node": row.node,
        "reason": row.reason,
        "peak_rss_kb": row.peak_rss_kb,
        "submitted_at": row.submitted_at,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "resumed": row.resumed,
        "work_lost_s": row.work_lost_s,
        "expected_s": row.expected_s,
        "left_files": row.left_files,
    }


def _attempt_cost(row: Attempt) -> dict[str, Any]:
    spend = row.spend
    out: dict[str, Any] = {"attempt": row.attempt}
    out.update({k: float(getattr(spend, k)) if spend is not None else 0.0 for k in _SPEND_KEYS})
    out["recorded"] = spend is not None
    out["usage"] = row.usage
    return out


def _no_score(trial: Trial) -> str:
    """Why a trial has no score, in the words of the record."""
    status = trial.status.value
    if trial.message:
        return trial.message
    if trial.failure is not None:
        return trial.failure.value
    if status in ("running", "pending"):
        return "the trial has not ended"
    return f"the trial was {status}"


# -- text ---------------------------------------------------------------------------------


def explain_reuse(store: Storage, run: CampaignRun, trial: Trial, record: dict[str, Any]) -> None:
    """Say in *record* why *trial*, measured anew, did not reuse the latest earlier result of
    the same params (``run.not_reused``: which part of the identity differed), if there is
    one."""
    if trial.cache_of is not None:
        return
    other = store.reads.earlier_measurement(run.name, canonical_json(trial.params), trial.id)
    if other is None or other.config_hash == trial.config_hash:
        return
    then = store.reads.campaign(other.campaign_id)
    if then is None:
        return
    parts = identity_changes(store, then, other, run, trial)
    record["run"]["not_reused"] = (
        f"trial {other.number} of run {other.campaign_id} measured these params; "
        + ("; ".join(parts) if parts else "its identity differs (environment variables, the"
           " backend's placement, or an earlier release's hash)"))


def identity_changes(store: Storage, then_run: CampaignRun, then: Trial, run: CampaignRun,
                     trial: Trial) -> list[str]:
    """What differs between the identities two trials of the same params were measured
    under, as the runs' specs record them ("dependencies differ: numpy 2.4.6 → 2.5.0")."""
    old, new = then_run.spec.get("environment", {}), run.spec.get("environment", {})
    parts = []
    for key, label in (("command", "command"), ("shell", "shell"), ("cpus", "CPUs"),
                       ("gpus", "GPUs"), ("memory_mb", "memory"), ("nodes", "nodes"),
                       ("tasks_per_node", "tasks per node")):
        if old.get(key) != new.get(key):
            parts.append(f"{label} differs: {old.get(key)} → {new.get(key)}")
    if old.get("code_version") != new.get("code_version"):
        parts.append(f"code version differs: {old.get('code_version') or 'none'} →"
                     f" {new.get('code_version') or 'none'}"
                     + _changed_files(old.get("code_files"), new.get("code_files")))
    was, now = (_digest_of(e.get("dependencies")) for e in (old, new))
    if was != now:
        parts.append("dependencies differ: "
                     + _changed_dists(store, was, now, then.dependencies))
    if old.get("workdir") != new.get("workdir"):
        was = old.get("workdir") or "not recorded (an earlier release)"
        parts.append(f"work directory differs: {was} → {new.get('workdir')}")
    if then.data_version != trial.data_version:
        parts.append(f"data version differs: {then.data_version} → {trial.data_version}")
    if then_run.backend.partition("==")[0] != run.backend.partition("==")[0]:
        parts.append(f"backend differs: {then_run.backend} → {run.backend}")
    return parts


def _digest_of(found: object) -> str | None:
    return str(found["digest"]) if isinstance(found, Mapping) and found.get("digest") else None


def _changed_files(old: object, new: object) -> str:
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return ""
    changed = [f"{n} changed" for n in new if n in old and old[n] != new[n]]
    changed += [f"{n} added" for n in new if n not in old]
    changed += [f"{n} removed" for n in old if n not in new]
    return f" ({', '.join(changed[:3])}{', …' if len(changed) > 3 else ''})" if changed else ""


def _changed_dists(store: Storage, was: str | None, now: str | None,
                   reported: str | None) -> str:
    """The versions that moved between two environments (by digest), else the digests."""
    envs = store.reads.environments(d for d in (was or reported, now) if d)
    before, after = envs.get(was or reported or ""), envs.get(now or "")
    if before is None or after is None:
        return f"{was or 'not recorded (an earlier release)'} → {now or 'not known'}"
    moved = []
    if before.python != after.python:
        moved.append(f"python {before.python} → {after.python}")
    old, new = before.distributions, after.distributions
    moved += [f"{n} {old[n]} → {new[n]}" for n in sorted(new) if n in old and old[n] != new[n]]
    moved += [f"{n} {new[n]} added" for n in sorted(new) if n not in old]
    moved += [f"{n} {old[n]} removed" for n in sorted(old) if n not in new]
    return (", ".join(moved[:4]) + (", …" if len(moved) > 4 else "")) or f"{was} → {now}"


