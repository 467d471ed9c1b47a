"""``dse show``: the run record of one trial, answering the five questions of the design.

1. what exactly was run, 2. against what data, 3. how it ended, 4. what it cost, 5. what
was concluded and by which scorer. :func:`trial_records` builds the JSON form (one object
per trial, the schema in ``docs/record.md``); :func:`record_lines` prints it for people.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dse._version import __version__
from dse.model._hashing import canonical_json
from dse.model._spend import Spend
from dse.model._states import RESOLVED_SCORER
from dse.model._template import substitute
from dse.report._front import pareto_objectives, pareto_ranks_by_row
from dse.report._render import duration_text, hours_text, money_text

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dse.record._base import Storage
    from dse.record._records import (
        Attempt,
        CampaignRun,
        DecisionRow,
        EnvironmentRecord,
        Invalidation,
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


def _resources_text(res: Mapping[str, Any]) -> str:
    """``"2 CPUs, 0 GPUs"``, or ``"3 nodes x 2 tasks x 1 CPU; 1 GPU, 4096 MiB per node"``."""
    def count(n: Any, what: str) -> str:
        return f"{n} {what}" + ("" if n == 1 else "s")

    memory = "" if res["memory_mb"] is None else f", {res['memory_mb']} MiB"
    if res["nodes"] * res["tasks_per_node"] == 1:
        return f"{count(res['cpus'], 'CPU')}, {count(res['gpus'], 'GPU')}{memory}"
    return (f"{count(res['nodes'], 'node')} x {count(res['tasks_per_node'], 'task')} x"
            f" {count(res['cpus'], 'CPU')}; {count(res['gpus'], 'GPU')}{memory} per node")


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
    stops = [d for d in decisions if d["verdict"] == "stop"]
    stopped = stops[-1] if stops and trial.status.value == "stopped" else None
    return {"stopped": stopped, "decisions": decisions}


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


def record_lines(record: dict[str, Any]) -> list[str]:
    """The five answers of one trial's record as titled sections of plain lines."""
    t, r, d, e, c, k = (record[key] for key in
                        ("trial", "run", "data", "ended", "cost", "concluded"))
    lines = [f"trial {t['id']} (campaign {t['campaign']}, run {t['run']}, trial {t['number']})"]

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<14}{text}")

    lines += ["", "1. What was run"]
    _ran_lines(r, row)

    lines += ["", "2. Against what data"]
    row("expected", d["expected"] or "not declared")
    row("read", d["read"] or ("not reported" if d["expected"] else "not declared"))
    if d["mismatch"]:
        row("MISMATCH", f"read {d['read']}, expected {d['expected']}")

    lines += ["", "3. How it ended"]
    _ended_lines(t, e, row)

    lines += ["", "4. What it cost"]
    cur = c["currency"]
    for a in c["attempts"]:
        text = _spend_text(a, cur) if a["recorded"] else "not recorded"
        if a["usage"]:
            text += f"; backend usage {json.dumps(a['usage'], sort_keys=True)}"
        row(f"attempt {a['attempt']}", text)
    total = _spend_text(c["total"], cur)
    if e["reuses"] is not None and not c["attempts"]:
        total += f" (a cache hit costs nothing: trial {e['reuses']['number']} paid)"
    row("total", total)

    lines += ["", "5. What was concluded"]
    _concluded_lines(k, row)
    return lines


def _code_text(r: Mapping[str, Any]) -> str:
    version = r["code_version"]
    if not version:
        return "not declared (no git checkout, and the command names no file of its own)"
    files = list(r.get("code_files") or ())
    if not files:
        return str(version)
    count = len(files) + int(r.get("code_files_more") or 0)
    shown = ", ".join(files[:4]) + (", …" if count > 4 else "")
    return f"{version} ({count} file{'s' if count != 1 else ''}: {shown})"


_SAID_BY = {"trial": "the trial reported", "reused": "the result it reuses reported",
            "dispatch": "found before dispatch"}


def _dependency_lines(r: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The dependencies as dispatched (part of the identity) and as the trial (or the result a
    cache hit reuses) reported them, said once when they agree."""
    dispatched, deps = r.get("dispatched_dependencies"), r["dependencies"]
    lines: list[tuple[str, str]] = []
    if dispatched is not None:
        python = dispatched.get("python")
        what = (f"python {python}, {dispatched.get('distributions', '?')} distributions"
                if python is not None else "a program's digest")
        text = f"{dispatched['digest']} ({what}; {dispatched.get('program') or 'declared'})"
        if deps is not None and deps["source"] != "dispatch":
            said = _SAID_BY[deps["source"]]
            text += f"; {said} the same" if deps["digest"] == dispatched["digest"] else ""
        lines.append(("dependencies", text))
    if deps is not None and (dispatched is None or deps["digest"] != dispatched["digest"]):
        count = len(deps["distributions"]) if deps["distributions"] is not None else "?"
        label = "dependencies" if dispatched is None else "  reported"
        lines.append((label, f"{deps['digest']} (python {deps['python'] or '?'}, {count}"
                      f" distributions, as {_SAID_BY[deps['source']]})"))
    if not lines:
        lines.append(("dependencies", "not known (the command's program was not found, and"
                      " the trial reported none: dse.trial.report() records them)"))
    return lines


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


def _ran_lines(r: Mapping[str, Any], row: Callable[[str, str], None]) -> None:
    """Answer 1 for people."""
    row("params", json.dumps(r["params"]))
    row("config hash", r["config_hash"])
    if r["command"]:
        row("command", shlex.join(r["command"]) + (" (through a shell)" if r["shell"] else ""))
        if r["argv"] is not None:
            row("argv", shlex.join(r["argv"]))
        if r.get("workdir") is not None:
            row("workdir", r["workdir"])
    else:
        row("command", "none (the backend runs no command)")
    row("resources", _resources_text(r["resources"]))
    row("code version", _code_text(r))
    for line in _dependency_lines(r):
        row(*line)
    if r.get("not_reused"):
        row("not reused", r["not_reused"])
    agent = r["agent"]
    if r["baseline_run"]:
        row("candidate", f"the campaign's baseline (wave {r['wave']})")
    else:
        row("candidate", f"agent {agent['name']} {agent['version'] or '(no version)'},"
            f" proposal {r['proposal']} (wave {r['wave']})")
    row("backend", r["backend"])
    if r["trial_dir"]:
        row("trial dir", r["trial_dir"])


def _ended_lines(
    t: Mapping[str, Any], e: Mapping[str, Any], row: Callable[[str, str], None]
) -> None:
    """Answer 3 for people."""
    outcome = e["outcome"]
    if e["failure"]:
        outcome += f" ({e['failure']}: {e['message'] or '-'})"
    elif e["message"]:
        outcome += f" ({e['message']})"
    row("outcome", outcome)
    if e["reuses"] is not None:
        other = e["reuses"]
        where = "" if other["run"] == t["run"] else f" of run {other['run']}"
        row("cache hit", f"reuses trial {other['number']}{where} ({other['trial']})")
    if e["replaces"] is not None:
        row("replaces", f"{e['replaces']['trial']} (invalidated)")
    for other in e["replaced_by"]:
        row("replaced by", other["trial"])
    if e["progress"] is not None:
        last = e["progress"]["last"]
        metrics = ", ".join(f"{k}={'not finite' if v is None else format(v, 'g')}"
                            for k, v in last["metrics"].items())  # None: NaN, an infinity
        points = e["progress"]["points"]
        row("progress", f"{points} point{'' if points == 1 else 's'}; last: step {last['step']} of"
            f" attempt {last['attempt']}" + (f" ({metrics})" if metrics else ""))
    if e["stopping"] is not None:
        _stopping_lines(e["stopping"], row)
    if not e["attempts"]:
        row("attempts", "none")
    for a in e["attempts"]:
        row(f"attempt {a['attempt']}", _attempt_text(a))
        extra = []
        if a["reason"]:
            extra.append(f"reason: {a['reason']}")
        if a["resumed"]:
            extra.append("resumed from a checkpoint")
        if a["work_lost_s"]:
            extra.append(f"work lost {duration_text(a['work_lost_s'])}")
        if extra:
            row("", "; ".join(extra))


def _stopping_lines(stopping: Mapping[str, Any], row: Callable[[str, str], None]) -> None:
    """Where the stopping rule compared the trial: the rungs it passed, each stop (with its
    value, the cutoff, the peers, the rule and the reason) and each promotion."""
    passed = [d for d in stopping["decisions"] if d["verdict"] == "continue"]
    if passed:
        rule = f"{passed[-1]['rule']} {passed[-1]['version']}"
        row("passed", "rung" + ("s " if len(passed) > 1 else " ")
            + ", ".join(str(d["rung"]) for d in passed) + f" ({rule})")
    for d in stopping["decisions"]:
        if d["verdict"] == "continue":
            continue
        peers = f"{d['peers']} peer" + ("" if d["peers"] == 1 else "s")
        cutoff = ("no cutoff" if d["cutoff"] is None else f"cutoff {d['cutoff']:.6g}")
        compared = (f"at rung {d['rung']} (step {d['step']} of attempt {d['attempt']}):"
                    f" value {_value(d['value'])}, {cutoff}, {peers} ({d['rule']} {d['version']}"
                    + ("" if d["bracket"] is None else f", bracket {d['bracket']}") + ")")
        if d["verdict"] == "stop":
            row("STOPPED" if d == stopping["stopped"] else "stopped", compared)
        else:
            resumed = ("not resumed yet" if d["resumed_step"] is None else
                       f"resumed at step {d['resumed_step']} in attempt {d['attempt'] + 1}")
            row("promoted", f"{compared}; {resumed}")
        if d["reason"]:
            row("", f"reason: {d['reason']}")


def _value(value: float | None) -> str:
    return "not a finite number (the worst)" if value is None else f"{value:.6g}"


def _concluded_lines(k: Mapping[str, Any], row: Callable[[str, str], None]) -> None:
    """Answer 5 for people."""
    scorer = k["scorer"]
    row("scorer", f"{scorer['name']} {scorer['version']} ({k['direction']})")
    row("metrics", json.dumps(k["metrics"]) if k["metrics"] else "none")
    if k["step"] is not None:
        of = "" if k["max_step"] is None else f" of {k['max_step']}"
        row("fidelity", f"the metrics are from step {k['step']}{of}: the trial was stopped"
            " there (a partial, low-fidelity result)")
    objective = k["objective"]
    if k["score"] is None:
        row("score", f"no score: {k['no_score']}")
    elif scorer["name"] == "default":
        row("score", f"{objective['metric']}={k['score']:.6g} ({objective['direction']})")
    else:
        row("score", f"{k['score']:.6g}")
    if k["baseline"] is not None:
        row("baseline", f"compared against {k['baseline']['trial']}")
    if k["invalid"] is not None:
        bad = k["invalid"]
        row("INVALID", f"{bad['reason']} (dse invalidate --{bad['kind'].replace('_', '-')}"
            f" {bad['target']}, {_when(bad['at'])})")
    pareto = k.get("pareto")
    if pareto is not None and pareto["scores"] is not None:
        values = " ".join(f"{m}={v:.6g}" for m, v in pareto["scores"].items())
        rank = pareto["rank"]
        where = "" if pareto["version"] is None else f" of data version {pareto['version']}"
        row("objectives", values)
        row("pareto rank", "none: not valid" if rank is None else (
            f"{rank}" + (" (on the front)" if rank == 1 else "")
            + f" among the valid trials{where}"))
    for earlier in k["scores"][:-1]:
        row("earlier score", f"{earlier['score']:.6g} by {earlier['scorer']}"
            f" {earlier['version']}" + (" (invalid)" if earlier["invalid"] else ""))


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "?"
    return datetime.fromtimestamp(stamp).astimezone().isoformat(timespec="seconds")


def _attempt_text(a: dict[str, Any]) -> str:
    parts = [f"job {a['job_id'] or '-'}: {a['state']}"]
    if a["signal"] is not None:
        parts.append(f"signal {a['signal']}")
    elif a["exit_code"] is not None:
        parts.append(f"exit {a['exit_code']}")
    if a["node"]:
        parts.append(f"on {a['node']}")
    text = ", ".join(parts)
    start, end = a["started_at"], a["ended_at"]
    text += f"; {_when(start)} to {_when(end) if end is not None else 'now'}"
    if start is not None and end is not None:
        text += f" ({duration_text(max(end - start, 0.0))}"
        if a["expected_s"] is not None:
            text += f", expected {duration_text(a['expected_s'])}"
        text += ")"
    return text


def _spend_text(spend: dict[str, Any], currency: str) -> str:
    parts = [f"wall {duration_text(spend['wall_s'])}"]
    parts += [f"{unit} {hours_text(spend[f'{unit}_s'] / 3600.0)} h"
              for unit in ("cpu", "gpu", "node") if spend[f"{unit}_s"]]
    parts.append(f"{money_text(spend['money'])} {currency}")
    return ", ".join(parts)
