"""What the listing commands print: ``dse status`` and ``dse plugins`` as tables fitted to the
terminal, ``dse export``'s trajectory, ``dse invalidate``'s mark, ``dse doctor``'s check
and salvage. Pure functions of values already read, like :mod:`dse.report._render`."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from dse.model._states import TrialStatus
from dse.report._render import Table, money_text, rate_text

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

    from dse.plugins._plugins import PluginManager
    from dse.record._doctor import Checkup, TableRead
    from dse.record._records import CampaignRun, Invalidation, Trial
    from dse.report._report import RunSummary


FORMATS = ("csv", "json", "jsonl", "trajectory")
"""What ``dse export --format`` writes (:mod:`dse.report._export`)."""


STATUS_COLUMNS = ("run", "campaign", "status", "progress", "best", "trials", "completed",
                  "stopped", "failed", "cached", "running", "trials/h", "results/h",
                  "cost/result", "spent", "agent", "backend")


def status_entry(run: CampaignRun, summary: RunSummary,
                 counts: Mapping[TrialStatus, int],
                 best: tuple[int, str, float] | None = None) -> dict[str, Any]:
    """One run of ``dse status --json``; *counts*: its trials by status; *best*: its best
    trial about the latest data version (number, metric, score), if it has one."""
    max_trials = run.spec.get("max_trials")
    return {
        "run": run.id, "name": run.name, "status": run.status.value,
        "end_reason": run.end_reason, "agent": run.agent, "backend": run.backend,
        "trials": sum(counts.values()), **{s.value: n for s, n in counts.items()},
        # Running: an attempt runs now; queued: submitted, not started (or a retry waiting).
        **({"running": counts[TrialStatus.RUNNING] - summary.queued, "queued": summary.queued}
           if summary.queued else {}),
        "max_trials": max_trials if isinstance(max_trials, int) else None,
        "best": None if best is None else {"trial": best[0], "metric": best[1],
                                           "score": best[2]},
        "throughput_per_h": summary.throughput_per_h,
        "effective_per_h": summary.effective_per_h,
        "cost_per_effective": summary.cost_per_effective,
        "spent": summary.spent.money, "currency": summary.currency,
    }


_UNENDED = ("pending", "running", "queued")


def _progress(item: Mapping[str, Any]) -> str:
    """``35/40``: trials ended of the run's ``max_trials`` (of its trials, without one)."""
    ended = item["trials"] - sum(item.get(s, 0) for s in _UNENDED)
    cap = item.get("max_trials")
    return f"{ended}/{cap}" if cap else f"{ended}/{item['trials']}"


def _best(item: Mapping[str, Any]) -> str:
    best = item.get("best")
    return "-" if best is None else f"{best['score']:.6g} (trial{GLUE}{best['trial']})"


GLUE = "\u00a0"
"""A space a cell of :func:`fit_table` is never broken at (printed as a space)."""


STATUS_PRIORITY = ("campaign", "run", "status", "progress", "best", "failed", "running",
                   "results/h", "cost/result", "spent", "cached", "completed", "stopped",
                   "trials/h", "trials", "agent", "backend")
"""The columns of ``dse status`` in the order they are kept when the terminal is too narrow
for all of them (the rest are dropped, and named under the table); the first seven are
worth a cell wrapped."""


_WRAPPED = frozenset({"status", "best"})
"""Columns whose cells may wrap at their spaces (the others never wrap)."""


def status_table(entries: Iterable[Mapping[str, Any]], width: int | None = None
                 ) -> tuple[Table, tuple[str, ...]]:
    """``dse status`` for people, fitted to *width* columns (every column when None): its
    columns and one row per :func:`status_entry`, and the columns left out."""
    rows = []
    for item in entries:
        cost = item["cost_per_effective"]
        cells = {
            "run": str(item["run"]), "campaign": item["name"],
            "status": f"{item['status']} ({item['end_reason'] or '-'})",
            "progress": _progress(item), "best": _best(item),
            "trials": str(item["trials"]), "completed": str(item.get("completed", 0)),
            "stopped": str(item.get("stopped", 0)), "failed": str(item.get("failed", 0)),
            "cached": str(item.get("cached", 0)), "running": str(item.get("running", 0)) + (
                f",{GLUE}{item['queued']}{GLUE}queued" if item.get("queued") else ""),
            "trials/h": rate_text(item["throughput_per_h"]),
            "results/h": rate_text(item["effective_per_h"]),
            "cost/result": "-" if cost is None else f"{money_text(cost)} {item['currency']}",
            "spent": f"{money_text(item['spent'])} {item['currency']}",
            "agent": item["agent"], "backend": item["backend"],
        }
        rows.append([cells[name] for name in STATUS_COLUMNS])
    if width is None:
        return (STATUS_COLUMNS, [[c.replace(GLUE, " ") for c in row] for row in rows]), ()
    return fit_table(STATUS_COLUMNS, rows, STATUS_PRIORITY, _WRAPPED, width, keep=7)


def fit_table(columns: Sequence[str], rows: Sequence[Sequence[str]], priority: Sequence[str],
              wrapped: Collection[str], width: int, *, keep: int
              ) -> tuple[Table, tuple[str, ...]]:
    """The columns of a table, in *priority* order, that fit *width* terminal columns as
    Rich draws a table (a bar between cells, a space each side of a cell); the cells of the
    *wrapped* columns broken at their spaces, widest column first, so that no cell is ever
    cut (nor at a :data:`GLUE`). The first *keep* columns of *priority* are worth a cell
    wrapped; the others are left out sooner. Returns the table (columns in their first
    order) and the columns left out."""
    index = {name: i for i, name in enumerate(columns)}

    def lines(i: int) -> list[str]:
        return [columns[i], *(line for row in rows for line in row[i].split("\n"))]

    natural = {name: max(len(t) for t in lines(index[name])) for name in columns}
    least = {name: max(len(word) for t in lines(index[name]) for word in t.split(" "))
             if name in wrapped else natural[name] for name in columns}

    def total(names: Sequence[str], sizes: Mapping[str, int]) -> int:
        return sum(sizes[k] for k in names) + 3 * len(names) + 1

    kept: list[str] = []
    for name in priority[:keep]:
        if total([*kept, name], least) <= width:
            kept.append(name)
    if not kept:  # narrower than one column: the first, as it is
        kept = [priority[0]]
    # Past the first *keep*, a column is shown only where it makes no cell wrap.
    for name in priority[keep:]:
        if total([*kept, name], natural) <= width:
            kept.append(name)
    widths = {name: natural[name] for name in kept}
    excess = total(kept, natural) - width
    while excess > 0:
        slack = max((k for k in kept if widths[k] > least[k]),
                    key=lambda k: widths[k] - least[k], default=None)
        if slack is None:
            break
        widths[slack] -= 1
        excess -= 1
    shown = sorted(kept, key=index.__getitem__)
    out = [[(_wrap(row[index[n]], widths[n]) if n in wrapped else row[index[n]]).replace(
        GLUE, " ") for n in shown] for row in rows]
    return (tuple(shown), out), tuple(n for n in columns if n not in kept)


def _wrap(text: str, width: int) -> str:
    """*text* broken at its spaces (not at a :data:`GLUE`) into lines of at most *width*
    characters (a word longer than that stays whole)."""
    if len(text) <= width:
        return text
    return "\n".join(textwrap.wrap(text, width, break_long_words=False,
                                    break_on_hyphens=False))


def plugin_rows(plugins: PluginManager) -> list[dict[str, Any]]:
    """``dse plugins --json``: every backend, agent, scorer, stopping rule and integration
    installed, with the version the record stamps (the class's ``version``, else its
    distribution's)."""
    entries = [*plugins.backends.values(), *plugins.agents.values(),
               *plugins.scorers.values(), *plugins.stopping_rules.values(),
               *plugins.integrations.values()]
    return [
        {
            "name": e.name, "kind": e.kind,
            "version": e.class_version or e.version,
            "distribution": e.distribution, "distribution_version": e.version,
            "plugin": e.plugin,
        }
        for e in entries
    ]


def plugins_table(rows: Iterable[Mapping[str, Any]]) -> Table:
    """``dse plugins`` for people: its columns and rows."""
    return ("name", "kind", "version", "distribution"), [
        [row["name"], row["kind"], row["version"],
         f"{row['distribution']} {row['distribution_version']}"]
        for row in rows
    ]


def trajectory(run: CampaignRun, trials: Iterable[Trial],
               invalid_scores: set[int]) -> list[dict[str, Any]]:
    """The steps of *run* (*trials* in step order), with CloudAI's trajectory columns first;
    *invalid_scores*: the trial rows whose score is flagged."""
    order = [p["name"] for p in run.spec.get("space", [])]
    rows = []
    for t in trials:
        params = t.params
        # The record keeps canonical (sorted) params; show them in the declared order.
        action = {k: params[k] for k in order if k in params}
        action.update(params)
        rows.append({
            "step": t.number,
            "action": action,
            "reward": t.score,
            "observation": t.metrics or {},
            "status": t.status.value,
            "failure": t.failure.value if t.failure is not None else None,
            "config_hash": t.config_hash,
            "cache_of": t.cache_of,
            "trial_dir": t.trial_dir,
            "valid": t.invalidation is None and t.id not in invalid_scores,
            "scores": t.scores,
        })
    return rows


def invalidation_json(mark: Invalidation) -> dict[str, Any]:
    """One ``dse invalidate`` as ``dse export --format json`` lists it."""
    return {"id": mark.id, "at": mark.at, "kind": mark.kind, "target": mark.target,
            "reason": mark.reason, "trials": mark.trials, "scores": mark.scores}


def _lost_text(table: TableRead) -> str:
    """``lost: keys 10198-10267`` of a table read past damaged pages."""
    if table.lost == [(None, None)] and not table.rows:
        return "unreadable (its pages, or its schema, are damaged)"
    spans = []
    for after, before in table.lost:
        low = ("the start" if after is None
               else f"{after + 1}" if isinstance(after, int) else f"past {after}")
        high = ("the end" if before is None
                else f"{before - 1}" if isinstance(before, int) else f"before {before}")
        spans.append(low if low == high else f"{low} to {high}")
    return f"{table.rows:,} row(s) read; lost: the rows of keys {', '.join(spans)}"


def doctor_lines(checkup: Checkup, workspace: str) -> list[str]:
    """What ``dse doctor`` says of a record: sound, empty, or damaged (what, what reads, how
    many trials a salvage keeps)."""
    path, size = checkup.path, f"{checkup.size / 1e6:,.1f} MB"
    if checkup.state == "empty":
        return [f"{path}: empty (0 bytes): no run is recorded in it (`dse run` starts a new"
                " record there); nothing to save"]
    if checkup.state == "ok":
        return [f"{path}: sound (integrity_check ok; schema {checkup.schema};"
                f" {checkup.rows('trials'):,} trial(s); {size})"]
    lines = [f"{path}: DAMAGED ({size}): {checkup.problem_count} problem(s)"]
    lines += [f"  {problem}" for problem in checkup.problems]
    if checkup.problem_count > len(checkup.problems):
        lines.append(f"  ... and {checkup.problem_count - len(checkup.problems)} more")
    if not checkup.tables:
        return [*lines, "nothing of it reads as tables: nothing to save"]
    lines.append("what still reads, table by table:")
    width = max(len(t.name) for t in checkup.tables)
    for table in checkup.tables:
        what = _lost_text(table) if table.lost else f"{table.rows:,} row(s)"
        lines.append(f"  {table.name:<{width}}  {what}")
    counted = "" if checkup.counted is None else f" (its summaries count {checkup.counted:,})"
    lines.append(f"trials: {checkup.rows('trials'):,} can be saved{counted}")
    lines.append(f"save them: dse doctor --workspace {workspace} --salvage NEW.sqlite (a new"
                 " record of what reads; the damaged file is left as it is)")
    return lines


def salvage_line(record: str, out: Checkup) -> str:
    """What ``dse doctor --salvage`` wrote, and how to put it in place."""
    return (f"wrote {out.path}: a record of what read ({out.rows('trials'):,} trial(s),"
            f" {out.rows('attempts'):,} attempt(s); integrity_check"
            f" {'ok' if out.state == 'ok' else 'NOT ok'}); to use it, keep the damaged file"
            f" aside and put it in its place: mv {record} {record}.damaged && mv {out.path}"
            f" {record}")


def doctor_json(checkup: Checkup, salvaged: Checkup | None = None) -> dict[str, Any]:
    """``dse doctor --json``."""
    def one(c: Checkup) -> dict[str, Any]:
        return {"record": str(c.path), "size": c.size, "state": c.state,
                "problems": c.problems, "problem_count": c.problem_count, "schema": c.schema,
                "tables": [{"name": t.name, "rows": t.rows, "lost": [list(r) for r in t.lost]}
                           for t in c.tables],
                "trials": {"read": c.rows("trials"), "counted": c.counted}}

    return one(checkup) | {"salvage": None if salvaged is None else one(salvaged)}
