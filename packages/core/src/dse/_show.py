"""``dse show``: the run record of one trial, answering the five questions of the design.

1. what exactly was run, 2. against what data, 3. how it ended, 4. what it cost, 5. what
was concluded and by which scorer. :func:`trial_records` builds the JSON form (one object
per trial, the schema in ``docs/record.md``); :func:`record_lines` prints it for people.
"""

from __future__ import annotations

import json
import re
import shlex
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dse._budget import Spend
from dse._console import duration_text, hours_text, money_text
from dse._environment import _PLACEHOLDER, _render
from dse._errors import ConfigError
from dse._scoring import RESOLVED_SCORER
from dse._version import __version__

if TYPE_CHECKING:
    import sqlite3

    from dse._store import Store

DEFAULT_SCORER = {"name": "default", "version": __version__}
"""The scorer of a run recorded before scorers were (it read the primary objective's metric)."""

EXPORT_SCHEMA = 2
"""Version of the ``dse export --format json`` document (``docs/record.md``)."""

_TRIAL_ID = re.compile(r"(?P<campaign>.+)-(?P<run>\d+)-(?P<number>\d+)")
_SHORT = re.compile(r"(?P<run>[^:]+):(?P<number>\d+)")
_FORMS = "<campaign>-<run>-<number>, <campaign>:<number> or <run>:<number>"
_SPEND_KEYS = ("wall_s", "cpu_s", "gpu_s", "node_s", "money")


def find_trial(store: Store, text: str) -> tuple[sqlite3.Row, sqlite3.Row]:
    """The (run, trial) rows *text* names: a trial id ``<campaign>-<run>-<number>``, or
    ``<campaign>:<number>`` (the latest run of the campaign) or ``<run>:<number>``."""
    short = _SHORT.fullmatch(text)
    full = None if short else _TRIAL_ID.fullmatch(text)
    if short is not None:
        run = store.find_campaign(short["run"])
        if run is None:
            raise ConfigError(f"{store.path}: no campaign run named {short['run']!r}")
        number = int(short["number"])
    elif full is not None:
        rows = store.query("SELECT * FROM campaigns WHERE id = ? AND name = ?",
                           (int(full["run"]), full["campaign"]))
        if not rows:
            raise ConfigError(
                f"{store.path}: no run {full['run']} of a campaign named {full['campaign']!r}"
            )
        run, number = rows[0], int(full["number"])
    else:
        raise ConfigError(f"trial {text!r}: expected {_FORMS}")
    trials = store.query("SELECT * FROM trials WHERE campaign_id = ? AND number = ?",
                         (run["id"], number))
    if not trials:
        raise ConfigError(
            f"{store.path}: run {run['id']} of {run['name']} has no trial {number}"
        )
    return run, trials[0]


def trial_records(
    store: Store, run: sqlite3.Row, trials: list[sqlite3.Row] | None = None
) -> list[dict[str, Any]]:
    """The record of each of *trials* (default: every trial of *run*), in their order."""
    campaign_id = int(run["id"])
    if trials is None:
        trials = store.trials(campaign_id)
    attempts: dict[int, list[sqlite3.Row]] = {}
    for row in store.attempts(campaign_id):
        attempts.setdefault(int(row["trial_id"]), []).append(row)
    reused_ids = sorted({int(t["cache_of"]) for t in trials if t["cache_of"] is not None})
    reused: dict[int, sqlite3.Row] = {}
    if reused_ids:
        marks = ",".join("?" * len(reused_ids))
        for row in store.query(
            "SELECT t.id, t.number, t.campaign_id, c.name FROM trials t"
            f" JOIN campaigns c ON c.id = t.campaign_id WHERE t.id IN ({marks})",
            reused_ids,
        ):
            reused[int(row["id"])] = row
    spec = json.loads(run["spec"])
    context = _Context(store, run, trials)
    return [
        _record(run, spec, t, attempts.get(int(t["id"]), []), reused, context) for t in trials
    ]


class _Context:
    """What the records of one run's trials refer to, read in a few queries: scores,
    invalidations, environments and the trials they link to."""

    def __init__(self, store: Store, run: sqlite3.Row, trials: list[sqlite3.Row]) -> None:
        campaign_id = int(run["id"])
        self.scores: dict[int, list[sqlite3.Row]] = {}
        for row in store.query(
            "SELECT s.* FROM scores s JOIN trials t ON t.id = s.trial_id"
            " WHERE t.campaign_id = ? ORDER BY s.id", (campaign_id,),
        ):
            self.scores.setdefault(int(row["trial_id"]), []).append(row)
        self.invalidations = {
            int(row["id"]): row for row in store.query("SELECT * FROM invalidations")
        }
        digests = sorted({str(t["dependencies"]) for t in trials if t["dependencies"]})
        self.environments: dict[str, sqlite3.Row] = {}
        if digests:
            marks = ",".join("?" * len(digests))
            for row in store.query(
                f"SELECT * FROM environments WHERE digest IN ({marks})", digests
            ):
                self.environments[str(row["digest"])] = row
        linked = {int(t["replaces"]) for t in trials if t["replaces"] is not None}
        linked |= {int(s["baseline_trial"]) for rows in self.scores.values() for s in rows
                   if s["baseline_trial"] is not None}
        self.names: dict[int, dict[str, Any]] = {}
        if linked:
            ids = sorted(linked)
            marks = ",".join("?" * len(ids))
            for row in store.query(
                "SELECT t.id, t.number, t.campaign_id, c.name FROM trials t"
                f" JOIN campaigns c ON c.id = t.campaign_id WHERE t.id IN ({marks})", ids,
            ):
                self.names[int(row["id"])] = _trial_ref(row)
        self.replaced_by: dict[int, list[dict[str, Any]]] = {}
        ids = [int(t["id"]) for t in trials]
        for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500)):
            marks = ",".join("?" * len(chunk))
            for row in store.query(
                "SELECT t.id, t.number, t.campaign_id, t.replaces, c.name FROM trials t"
                f" JOIN campaigns c ON c.id = t.campaign_id WHERE t.replaces IN ({marks})"
                " ORDER BY t.id", chunk,
            ):
                self.replaced_by.setdefault(int(row["replaces"]), []).append(_trial_ref(row))

    def invalid(self, mark: int | None) -> dict[str, Any] | None:
        if mark is None or mark not in self.invalidations:
            return None
        row = self.invalidations[mark]
        return {"invalidation": int(row["id"]), "kind": row["kind"], "target": row["target"],
                "reason": row["reason"], "at": row["at"]}


def _trial_ref(row: sqlite3.Row) -> dict[str, Any]:
    return {"trial": f"{row['name']}-{row['campaign_id']}-{row['number']}",
            "run": int(row["campaign_id"]), "number": int(row["number"])}


def _record(
    run: sqlite3.Row,
    spec: dict[str, Any],
    trial: sqlite3.Row,
    attempts: list[sqlite3.Row],
    reused: dict[int, sqlite3.Row],
    context: _Context,
) -> dict[str, Any]:
    name, number = str(run["name"]), int(trial["number"])
    trial_id = f"{name}-{run['id']}-{number}"
    params = json.loads(trial["params"])
    env = spec.get("environment", {})
    agent_name, _, agent_version = str(run["agent"]).partition("==")
    objectives = spec.get("objectives") or [{}]
    currency = spec.get("currency") or "USD"

    command = list(env.get("command") or [])
    argv = None
    if command and trial["trial_dir"]:
        argv = _argv(command, params, trial_id, str(trial["trial_dir"]),
                     max((int(a["attempt"]) for a in attempts), default=1))

    keys = trial.keys()
    expected = trial["data_version"] if "data_version" in keys else None
    read = trial["data_version_read"] if "data_version_read" in keys else None
    mismatch = expected is not None and read is not None and read != expected

    reuses = None
    if trial["cache_of"] is not None and int(trial["cache_of"]) in reused:
        other = reused[int(trial["cache_of"])]
        reuses = {
            "trial": f"{other['name']}-{other['campaign_id']}-{other['number']}",
            "run": int(other["campaign_id"]), "number": int(other["number"]),
        }

    costs = [_attempt_cost(a) for a in attempts]
    total = Spend()
    for cost in costs:
        total = total + Spend(**{k: cost[k] for k in _SPEND_KEYS})

    score = trial["score"]
    metrics = json.loads(trial["metrics"]) if trial["metrics"] else {}
    dependencies = None
    if trial["dependencies"]:
        found = context.environments.get(str(trial["dependencies"]))
        dependencies = {
            "digest": trial["dependencies"],
            "python": found["python"] if found is not None else None,
            "distributions": json.loads(found["distributions"]) if found is not None else None,
        }
    scores = [
        {
            "scorer": row["scorer"], "version": row["scorer_version"], "score": row["score"],
            "baseline": context.names.get(int(row["baseline_trial"]))
            if row["baseline_trial"] is not None else None,
            "at": row["created_at"], "invalid": context.invalid(row["invalidation"]),
        }
        for row in context.scores.get(int(trial["id"]), [])
    ]
    latest = scores[-1] if scores else None
    resolved = spec.get(RESOLVED_SCORER) or DEFAULT_SCORER
    scorer = ({"name": latest["scorer"], "version": latest["version"]} if latest
              else {"name": resolved["name"], "version": resolved["version"]})
    invalid = context.invalid(trial["invalidation"])
    score_invalid = latest["invalid"] if latest else None
    return {
        "trial": {"id": trial_id, "campaign": name, "run": int(run["id"]), "number": number},
        "run": {
            "params": params,
            "config_hash": trial["config_hash"],
            "command": command or None,
            "shell": bool(env.get("shell", False)),
            "argv": argv,
            "code_version": env.get("code_version"),
            "dependencies": dependencies,
            "agent": {"name": agent_name, "version": agent_version or None},
            "proposal": int(trial["proposal"]),
            "baseline_run": int(trial["proposal"]) == 0,
            "wave": int(trial["wave"]),
            "backend": run["backend"],
            "trial_dir": trial["trial_dir"],
        },
        "data": {"expected": expected, "read": read, "mismatch": mismatch},
        "ended": {
            "outcome": trial["status"],
            "failure": trial["failure"],
            "message": trial["message"],
            "reuses": reuses,
            "replaces": context.names.get(int(trial["replaces"]))
            if trial["replaces"] is not None else None,
            "replaced_by": context.replaced_by.get(int(trial["id"]), []),
            "created_at": trial["created_at"],
            "ended_at": trial["ended_at"],
            "attempts": [_attempt(a) for a in attempts],
        },
        "cost": {"currency": currency, "attempts": costs, "total": total.as_dict()},
        "concluded": {
            "scorer": scorer,
            "objective": {"metric": objectives[0].get("metric"),
                          "direction": objectives[0].get("direction")},
            "direction": resolved.get("direction") or objectives[0].get("direction"),
            "metrics": metrics,
            "score": score,
            "baseline": latest["baseline"] if latest else None,
            "no_score": None if score is not None else _no_score(trial),
            "valid": invalid is None and score_invalid is None,
            "invalid": invalid or score_invalid,
            "scores": scores,
        },
    }


def _argv(command: list[str], params: dict[str, Any], trial_id: str, trial_dir: str,
          attempt: int) -> list[str] | None:
    """The command as the trial's last attempt ran it (``None`` if it cannot be rebuilt)."""
    values: dict[str, Any] = dict(params)
    values.update(trial_id=trial_id, trial_dir=trial_dir, attempt=attempt,
                  checkpoint_dir=f"{trial_dir}/checkpoint",
                  params_file=f"{trial_dir}/params.json")
    try:
        return [_PLACEHOLDER.sub(lambda m: _render(values[m.group(1)]), item)
                for item in command]
    except KeyError:
        return None


def _attempt(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "attempt": int(row["attempt"]),
        "backend": row["backend"],
        "job_id": row["job_id"],
        "state": row["state"],
        "exit_code": row["exit_code"],
        "signal": row["signal"],
        "node": row["node"],
        "reason": row["reason"],
        "peak_rss_kb": row["peak_rss_kb"],
        "submitted_at": row["submitted_at"],
        "started_at": row["started_at"],
        "ended_at": row["ended_at"],
        "resumed": bool(row["resumed"]),
        "work_lost_s": row["work_lost_s"],
        "expected_s": row["expected_s"],
    }


def _attempt_cost(row: sqlite3.Row) -> dict[str, Any]:
    spend = json.loads(row["spend"]) if row["spend"] else {}
    out: dict[str, Any] = {"attempt": int(row["attempt"])}
    out.update({k: float(spend.get(k, 0.0)) for k in _SPEND_KEYS})
    out["recorded"] = bool(row["spend"])
    out["usage"] = json.loads(row["usage"]) if row["usage"] else None
    return out


def _no_score(trial: sqlite3.Row) -> str:
    """Why a trial has no score, in the words of the record."""
    status = str(trial["status"])
    if trial["message"]:
        return str(trial["message"])
    if trial["failure"]:
        return str(trial["failure"])
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
    row("params", json.dumps(r["params"]))
    row("config hash", r["config_hash"])
    if r["command"]:
        row("command", shlex.join(r["command"]) + (" (through a shell)" if r["shell"] else ""))
        if r["argv"] is not None:
            row("argv", shlex.join(r["argv"]))
    else:
        row("command", "none (the backend runs no command)")
    row("code version", r["code_version"] or "not declared")
    deps = r["dependencies"]
    if deps is None:
        row("dependencies", "not reported (dse.trial.report() records them)")
    else:
        count = len(deps["distributions"]) if deps["distributions"] is not None else "?"
        row("dependencies", f"{deps['digest']} (python {deps['python'] or '?'},"
            f" {count} distributions)")
    agent = r["agent"]
    if r["baseline_run"]:
        row("candidate", f"the campaign's baseline (wave {r['wave']})")
    else:
        row("candidate", f"agent {agent['name']} {agent['version'] or '(no version)'},"
            f" proposal {r['proposal']} (wave {r['wave']})")
    row("backend", r["backend"])
    if r["trial_dir"]:
        row("trial dir", r["trial_dir"])

    lines += ["", "2. Against what data"]
    row("expected", d["expected"] or "not declared")
    row("read", d["read"] or ("not reported" if d["expected"] else "not declared"))
    if d["mismatch"]:
        row("MISMATCH", f"read {d['read']}, expected {d['expected']}")

    lines += ["", "3. How it ended"]
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
    scorer = k["scorer"]
    row("scorer", f"{scorer['name']} {scorer['version']} ({k['direction']})")
    row("metrics", json.dumps(k["metrics"]) if k["metrics"] else "none")
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
    for earlier in k["scores"][:-1]:
        row("earlier score", f"{earlier['score']:.6g} by {earlier['scorer']}"
            f" {earlier['version']}" + (" (invalid)" if earlier["invalid"] else ""))
    return lines


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
