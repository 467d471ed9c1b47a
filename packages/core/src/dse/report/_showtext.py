"""``dse show`` as text: the lines of a trial's record (:func:`dse.report._show.trial_records`
builds the record; this module only words it)."""

from __future__ import annotations

import json
import shlex
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dse.report._render import duration_text, hours_text, money_text, size_text

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence


def _resources_text(res: Mapping[str, Any]) -> str:
    """``"2 CPUs, 0 GPUs"``, or ``"3 nodes x 2 tasks x 1 CPU; 1 GPU, 4096 MiB per node"``."""
    def count(n: Any, what: str) -> str:
        return f"{n} {what}" + ("" if n == 1 else "s")

    memory = "" if res["memory_mb"] is None else f", {res['memory_mb']} MiB"
    if res["nodes"] * res["tasks_per_node"] == 1:
        return f"{count(res['cpus'], 'CPU')}, {count(res['gpus'], 'GPU')}{memory}"
    return (f"{count(res['nodes'], 'node')} x {count(res['tasks_per_node'], 'task')} x"
            f" {count(res['cpus'], 'CPU')}; {count(res['gpus'], 'GPU')}{memory} per node")


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


def space_lines(space: Sequence[Mapping[str, Any]],
                params: Mapping[str, Any] | None = None) -> list[str]:
    """A conditional space as a tree (each param as a run's record describes it): a param
    with a ``when`` indented under its parent (the last declared of its parents) with its
    condition, and with *params*, its value there or ``(inactive)``. Empty for a space
    without conditions."""
    if not any(entry.get("when") for entry in space):
        return []
    names = [str(entry.get("name")) for entry in space]
    children: dict[str | None, list[Mapping[str, Any]]] = {}
    for entry in space:
        parents = [n for n in names if n in (entry.get("when") or {})]
        children.setdefault(parents[-1] if parents else None, []).append(entry)
    shown: list[tuple[str, str]] = []

    def walk(parent: str | None, depth: int) -> None:
        for entry in children.get(parent, []):
            name = str(entry.get("name"))
            text = _param_text(entry)
            if params is not None:
                text += f"  = {_value_text(params[name])}" if name in params else "  (inactive)"
            shown.append(("  " * depth + name, text))
            walk(name, depth + 1)

    walk(None, 0)
    width = max(len(name) for name, _ in shown)
    return [f"{name:<{width}}  {text}" for name, text in shown]


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else repr(value)


def _param_text(entry: Mapping[str, Any]) -> str:
    """``float [0, 0.99] log  when optimizer = sgd``."""
    kind = str(entry.get("type"))
    if entry.get("choices") is not None:
        text = f"{kind} [{', '.join(_value_text(c) for c in entry['choices'])}]"
    else:
        text = f"{kind} [{_value_text(entry.get('low'))}, {_value_text(entry.get('high'))}]"
        step = entry.get("step")
        if step is not None and not (kind == "int" and step == 1):
            text += f" step {_value_text(step)}"
        if entry.get("log"):
            text += " log"
    conditions = []
    for parent, values in (entry.get("when") or {}).items():
        values = values if isinstance(values, list) else [values]
        conditions.append(f"{parent} = {_value_text(values[0])}" if len(values) == 1 else
                          f"{parent} in [{', '.join(_value_text(v) for v in values)}]")
    return text + (f"  when {' and '.join(conditions)}" if conditions else "")


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


def _ran_lines(r: Mapping[str, Any], row: Callable[[str, str], None]) -> None:
    """Answer 1 for people."""
    row("params", json.dumps(r["params"]))
    for i, tree in enumerate(space_lines(r.get("space") or (), r["params"])):
        row("space" if i == 0 else "", tree)
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
    if e.get("lineage") is not None:
        _lineage_lines(e["lineage"], row)
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
        if a.get("left_files"):
            row("", _left_text(a["left_files"]))


def _lineage_lines(lineage: Mapping[str, Any], row: Callable[[str, str], None]) -> None:
    """Population-based training: where the trial's checkpoint came from, with the params
    before and after, and the trials that started from its own."""
    parent = lineage["parent"]
    if parent is not None:
        row("started from", f"a copy of trial {parent['number']}'s checkpoint (it had"
            f" reported step {parent['step']}), in the place of trial {parent['replaces']}")
        before = parent["params_before"] or {}
        changed = [f"{k}: {before.get(k)!r} -> {v!r}" for k, v in parent["params_after"].items()
                   if before.get(k) != v]
        row("", "params " + (", ".join(changed) if changed else "unchanged"))
    for child in lineage["children"]:
        row("copied by", f"trial {child['number']} at step {child['step']} (in the place of"
            f" trial {child['replaces']})")


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
        elif d["verdict"] == "exploit":
            row("EXPLOITED", compared)
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


def _left_text(left: Mapping[str, Any], shown: int = 3) -> str:
    """Where an attempt's files that were not brought back are, and the largest of them."""
    files = sorted((left.get("files") or {}).items(), key=lambda kv: -int(kv[1]))
    named = ", ".join(f"{path} ({size_text(int(size))})" for path, size in files[:shown])
    more = f" and {len(files) - shown} more" if len(files) > shown else ""
    return f"left on node {left.get('node')} in {left.get('dir')}: {named}{more}"


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
