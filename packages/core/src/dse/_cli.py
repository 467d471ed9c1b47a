"""The ``dse`` command."""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse._build import build_engine
from dse._campaign import Campaign, load_campaign
from dse._console import (
    Console,
    LiveView,
    duration_text,
    hours_text,
    money_text,
    rate_text,
)
from dse._engine import campaign_spec
from dse._errors import ConfigError, DseError, ExitCode
from dse._hashing import canonical_json
from dse._lock import CampaignLock
from dse._plugins import PluginManager
from dse._pool import PoolConfig, is_pool_file, load_pool, run_pool
from dse._report import (
    ObjectiveRollup,
    RunDetail,
    rollup_by_objective,
    run_detail,
    summarize,
)
from dse._scoring import RESOLVED_SCORER
from dse._show import EXPORT_SCHEMA, find_trial, record_lines, trial_records
from dse._store import Store, open_existing, workspace_db
from dse._version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

    from dse._budget import Spend
    from dse._engine import CampaignResult, Engine


_REPORT_KEYS = """\
--json prints {"workspace": PATH, "runs": [RUN...], "objectives": [OBJECTIVE...]}.
RUN:
  campaign, run, status, end_reason   the run and how it ended
  budget_reason    why the budget ended it ("money ceiling 1 USD"), or null
  serves           the objective labels it serves
  best             null or {trial, metric, direction, score, params}: the best completed trial
                   about the latest data version
  data_versions    [{version, trials, completed, mismatched, best: {trial, score}}], oldest first
  mismatched       trial numbers that read another data version than expected (flagged)
  invalid          [{trial, reason}]: results or scores flagged by dse invalidate (never ranked)
  scorer           the scorer of the run's scores ("default 0.1.0")
  trials           {total, <outcome>: count...}; failures: {<failure class>: count}
  currency         the currency of every money figure of the run
  spent            {money, cpu_hours, gpu_hours, node_hours, attempt_hours}: every attempt
  budget           one entry per ceiling the campaign has, each {spent, ceiling, unit}:
                   money (currency), compute (<unit>-hours), trials (trials run),
                   wall_clock (seconds since the run was created)
  wall_clock_s     the run's wall clock (creation to end, or to now while it runs)
  finished         trials that reached an outcome (not cache hits, not cancelled)
  effective        trials with a usable, scored result
  throughput_per_h finished trials per wall-clock hour
  effective_per_h  effective results per wall-clock hour
  cost_per_effective       money per effective result (null before the first)
  compute_per_effective_h  {cpu, gpu, node}: compute-hours per effective result
  cache_hits       [{trial, reuses_run, reuses_trial, cost (always 0), reused_cost}]
OBJECTIVE (every run of the workspace serving the label, per currency):
  objective, currency, runs, spent, finished, effective, cached, cost_per_effective,
  compute_per_effective_h
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dse", description="Run design-space-exploration campaigns."
    )
    parser.add_argument("--version", action="version", version=f"dse {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run", help="run a campaign file (or several sharing one pool)",
        description="Run a campaign. Several campaign files, or a pool file ([pool] capacity\n"
        "and [[campaign]] tables with a file and a weight each), run in one controller and\n"
        "share its resources: fair share by weight, reservations for trials that cannot\n"
        "start yet, short trials backfilled into the gaps (docs/scheduling.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("campaign", type=Path, nargs="+", metavar="CAMPAIGN.toml",
                     help="campaign files, or one pool file")
    run.add_argument("--workspace", type=Path, help="record directory (default: .dse beside"
                     " the campaign file)")
    run.add_argument("--json", action="store_true", help="print the outcome as JSON")
    run.add_argument("--fresh", action="store_true",
                     help="start a new run even if the last one did not finish")

    status = sub.add_parser("status", help="list the campaign runs of a workspace")
    status.add_argument("target", nargs="?", help="a campaign file, name or run id")
    status.add_argument("--workspace", type=Path)
    status.add_argument("--json", action="store_true")

    report = sub.add_parser(
        "report", help="what each run spent and delivered: the three numbers, per objective",
        description="Report each run of a campaign (or of every campaign in the workspace):\n"
        "how it ended, the best result, trials by outcome and failure class, spend against\n"
        "each ceiling of its budget, the three numbers, and a rollup per objective label\n"
        "across every run of the workspace that serves it.",
        epilog=_REPORT_KEYS, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("target", nargs="?",
                        help="a campaign file, name or run id (default: every campaign)")
    report.add_argument("--workspace", type=Path)
    report.add_argument("--json", action="store_true",
                        help="print one JSON object (keys below)")
    report.add_argument("--html", type=Path, metavar="OUT.html",
                        help="also write a self-contained HTML report with plots of the run"
                        " (the latest run of the campaign named; needs dse-core[report])")

    plugins = sub.add_parser("plugins", help="list installed backends and agents")
    plugins.add_argument("--json", action="store_true")

    show = sub.add_parser(
        "show", help="the run record of one trial: the five answers",
        description="Print what exactly a trial ran, against what data, how it ended, what it\n"
        "cost, and what was concluded and by which scorer.",
        epilog="TRIAL: a trial id (<campaign>-<run>-<number>), <campaign>:<number> (the latest\n"
        "run of the campaign) or <run>:<number>. --json keys: docs/record.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("trial", metavar="TRIAL")
    show.add_argument("--workspace", type=Path, help="record directory (default: .dse)")
    show.add_argument("--json", action="store_true", help="print the record as one JSON object")

    invalidate = sub.add_parser(
        "invalidate", help="flag results invalid (and every comparison that used them)",
        description="Mark results invalid without deleting anything: the trials (or scores)\n"
        "named, the cache hits reusing them, and every score compared against them as a\n"
        "baseline. Reports flag them; the agent is never fed them; a campaign that proposes\n"
        "the same configuration again runs a new trial linked to the one it replaces.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = invalidate.add_mutually_exclusive_group(required=True)
    which.add_argument("--trial", metavar="TRIAL",
                       help="one trial: <campaign>-<run>-<number>, <campaign>:<n> or <run>:<n>")
    which.add_argument("--data-version", metavar="V",
                       help="every trial that ran against, or read, data version V")
    which.add_argument("--scorer-version", metavar="S",
                       help="every score given by scorer version S (or NAME==S)")
    invalidate.add_argument("--reason", required=True, help="why (kept with the flag)")
    invalidate.add_argument("--workspace", type=Path, help="record directory (default: .dse)")
    invalidate.add_argument("--json", action="store_true")

    export = sub.add_parser("export", help="export a campaign run's trajectory")
    export.add_argument("target", help="a campaign file, name or run id")
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument("--workspace", type=Path)
    export.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dse`` command; returns the exit code."""
    args = _parser().parse_args(argv)
    console = Console(json_output=getattr(args, "json", False))
    commands = {
        "run": _run, "status": _status, "plugins": _plugins, "export": _export,
        "report": _report_command, "show": _show, "invalidate": _invalidate,
    }
    try:
        return commands[args.command](args, console)
    except DseError as exc:
        console.error(str(exc))
        return ExitCode.USAGE_ERROR
    except KeyboardInterrupt:
        console.error("interrupted")
        return ExitCode.INTERRUPTED
    except Exception as exc:
        if os.environ.get("DSE_DEBUG"):
            raise
        console.error(
            f"internal error: {type(exc).__name__}: {exc} (set DSE_DEBUG=1 for a traceback)"
        )
        return ExitCode.INTERNAL_ERROR


def _pool_files(paths: Sequence[Path]) -> tuple[list[Path], PoolConfig | None]:
    """The campaign files to run and their pool: a pool file's, one of their own for several
    campaign files (weights 1, as many slots as the largest max_parallelism), or none."""
    if len(paths) == 1 and is_pool_file(paths[0]):
        config = load_pool(paths[0])
        return list(config.campaigns), config
    if len(paths) == 1:
        return list(paths), None
    for path in paths:
        if is_pool_file(path):
            raise ConfigError(f"{path}: a pool file runs alone (it names its campaigns)")
    return list(paths), PoolConfig({}, source="command line")


def _run(args: argparse.Namespace, console: Console) -> int:
    files, pool = _pool_files(args.campaign)
    campaigns = [load_campaign(path, workspace=args.workspace) for path in files]
    for c in campaigns[1:]:
        first = campaigns[0]
        if (c.backend, dict(c.backend_options)) != (first.backend, dict(first.backend_options)):
            raise ConfigError(
                f"{c.source}: backend: the campaigns of a pool run on one backend, and"
                f" {first.source} uses {first.backend} with other options"
            )
    plugins = PluginManager()
    with contextlib.ExitStack() as stack:
        stores: dict[Path, Store] = {}
        for c in campaigns:
            lock = stack.enter_context(CampaignLock(c.workspace, c.name))
            if lock.notice is not None:
                console.status(lock.notice)
            if c.workspace not in stores:
                stores[c.workspace] = Store(workspace_db(c.workspace))
                stack.callback(stores[c.workspace].close)
        listener = LiveView(console)
        engines = []
        backend = None
        for c in campaigns:
            engine = build_engine(c, store=stores[c.workspace], plugins=plugins,
                                  listener=listener, backend=backend)
            backend = engine.backend
            engines.append(engine)
        resume = {
            c.name: run for c in campaigns
            if (run := _resumable_run(stores[c.workspace], c, console, fresh=args.fresh))
            is not None
        }
        interrupts = 0

        def on_signal(signum: int, frame: FrameType | None) -> None:
            nonlocal interrupts
            interrupts += 1
            if interrupts > 1:
                raise KeyboardInterrupt
            for engine in engines:
                engine.request_stop("cancelled")

        previous = {
            sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            try:
                alone = PoolConfig({"slots": campaigns[0].max_parallelism})
                results = run_pool(engines, pool or alone, resume=resume)
            finally:
                assert backend is not None
                backend.shutdown(wait=not any(e.abandoned for e in engines))
            details = [run_detail(stores[c.workspace], r.campaign_id)
                       for c, r in zip(campaigns, results, strict=True)]
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if pool is None:
        _outcome(results[0], details[0], campaigns[0], console, args.json)
    else:
        _pool_outcome(engines, results, details, campaigns, console, args.json)
    if any(r.status == "cancelled" for r in results):
        return ExitCode.INTERRUPTED
    return ExitCode.OK


def _pool_outcome(
    engines: Sequence[Engine], results: Sequence[CampaignResult], details: Sequence[RunDetail],
    campaigns: Sequence[Campaign], console: Console, as_json: bool,
) -> None:
    """Each campaign's outcome, then its share of the pool against its weight's."""
    pool = engines[0].pool
    assert pool is not None
    shares = pool.shares(time.time())
    weights = {e.campaign.name: pool.weight(e) for e in engines}
    total = sum(weights.values())
    if as_json:
        out = []
        for r, d, c in zip(results, details, campaigns, strict=True):
            entry = _outcome_json(r, d, c)
            entry["pool"] = {"weight": weights[c.name], "target_share": weights[c.name] / total,
                             "share": shares[c.name][1]}
            out.append(entry)
        console.data({"pool": dict(pool.config.capacity), "campaigns": out})
        return
    for r, d, c in zip(results, details, campaigns, strict=True):
        _outcome(r, d, c, console, False)
    capacity = ", ".join(f"{v} {k}" for k, v in pool.config.capacity.items())
    console.result(f"pool ({capacity}), while the campaigns competed: " + "; ".join(
        f"{name} used {shares[name][1]:.0%} (weight {weights[name]:g}, target"
        f" {weights[name] / total:.0%})" for name in weights))


def _resumable_run(
    store: Store, campaign: Campaign, console: Console, *, fresh: bool
) -> int | None:
    """The run of *campaign* to continue: the latest one, if it crashed or was cancelled."""
    row = store.find_campaign(campaign.name)
    if row is None or row["status"] not in ("running", "cancelled"):
        return None
    if fresh:
        console.status(f"run {row['id']} of {campaign.name} is {row['status']}; starting a new"
                       " run (--fresh)")
        return None
    stored = json.loads(row["spec"])
    stored.pop(RESOLVED_SCORER, None)
    if canonical_json(stored) != canonical_json(campaign_spec(campaign)):
        console.status(f"run {row['id']} of {campaign.name} did not finish, but the campaign"
                       " file changed since; starting a new run")
        return None
    what = "was cancelled" if row["status"] == "cancelled" else "did not finish"
    console.status(f"run {row['id']} of {campaign.name} {what}: resuming it")
    return int(row["id"])


def _outcome_json(result: CampaignResult, detail: RunDetail, campaign: Campaign) -> dict[str, Any]:
    s = result.stats
    best = result.best
    summary = detail.summary
    return {
        "campaign": result.name,
        "run": result.campaign_id,
        "status": result.status,
        "end_reason": result.end_reason,
        "budget_reason": detail.budget_reason,
        "trials": s.steps,
        "completed": s.completed,
        "failed": s.failed,
        "cached": s.cached,
        "rejected": s.rejected,
        "cancelled": s.cancelled,
        "interrupted": s.interrupted,
        "best": None if best is None else {
            "trial": best.number, "score": best.score, "params": dict(best.params),
            "metric": campaign.objectives[0].metric,
        },
        "currency": summary.currency,
        "spent": _spent_json(summary.spent),
        "budget": _ceilings(detail),
        "throughput_per_h": summary.throughput_per_h,
        "effective_per_h": summary.effective_per_h,
        "cost_per_effective": summary.cost_per_effective,
    }


def _outcome(result: CampaignResult, detail: RunDetail, campaign: Campaign, console: Console,
             as_json: bool) -> None:
    s = result.stats
    best = result.best
    summary = detail.summary
    if as_json:
        console.data(_outcome_json(result, detail, campaign))
        return
    console.result(
        f"campaign {result.name} run {result.campaign_id}: {result.status}"
        f" ({result.end_reason}); {s.steps} trials: {s.completed} completed, {s.failed} failed,"
        f" {s.cached} cached, {s.rejected} rejected, {s.cancelled} cancelled"
    )
    if best is not None:
        metric = campaign.objectives[0].metric
        console.result(
            f"best: trial {best.number} {metric}={best.score:.6g}"
            f" params {json.dumps(dict(best.params))}"
        )
    console.result(
        f"throughput {rate_text(summary.throughput_per_h)} trials/h, effective"
        f" {rate_text(summary.effective_per_h)} results/h, cost "
        + _per_effective(summary.cost_per_effective,
                         {u: summary.compute_per_effective_h(u)
                          for u in _shown_units(summary.spent, None)}, summary.currency)
    )
    if result.status == "budget_exhausted":
        console.result(_exhausted_line(detail))


def _exhausted_line(detail: RunDetail) -> str:
    """``budget exhausted: money ceiling 1 USD; spent 0.96 USD``: the ceiling that ended
    the run and what was spent of it."""
    s = detail.summary
    why = detail.budget_reason or "budget"
    ceilings = _ceilings(detail)
    if why.startswith("compute") and "compute" in ceilings:
        spent = f"spent {hours_text(ceilings['compute']['spent'])} {ceilings['compute']['unit']}"
    elif why.startswith("trials"):
        spent = f"{detail.dispatched} trials run"
    elif "wall-clock" in why:
        spent = f"ran {duration_text(s.wall_s)}, spent {money_text(s.spent.money)} {s.currency}"
    else:
        spent = f"spent {money_text(s.spent.money)} {s.currency}"
    return f"budget exhausted: {why}; {spent}"


def _open_target(target: str | None, workspace: Path | None) -> tuple[Store, str | None]:
    if target is not None and target.endswith(".toml"):
        campaign = load_campaign(target, workspace=workspace)
        return open_existing(campaign.workspace), campaign.name
    return open_existing(workspace or Path(".dse")), target


def _status(args: argparse.Namespace, console: Console) -> int:
    store, name = _open_target(args.target, args.workspace)
    rows = store.campaigns()
    if name is not None:
        rows = [r for r in rows if r["name"] == name or str(r["id"]) == name]
        if not rows:
            raise ConfigError(f"{store.path}: no campaign run named {name!r}")
    out = []
    now = time.time()
    for row in rows:
        summary = summarize(store, int(row["id"]), now=now)
        counts = {
            r["status"]: r["n"] for r in store.query(
                "SELECT status, COUNT(*) AS n FROM trials WHERE campaign_id = ? GROUP BY status",
                (row["id"],),
            )
        }
        out.append({
            "run": row["id"], "name": row["name"], "status": row["status"],
            "end_reason": row["end_reason"], "agent": row["agent"], "backend": row["backend"],
            "trials": row["trials"], **counts,
            "throughput_per_h": summary.throughput_per_h,
            "effective_per_h": summary.effective_per_h,
            "cost_per_effective": summary.cost_per_effective,
            "spent": summary.spent.money, "currency": summary.currency,
        })
    if args.json:
        console.data(out)
        return ExitCode.OK
    from rich.table import Table

    table = Table("run", "campaign", "status", "trials", "completed", "failed", "cached",
                  "running", "trials/h", "results/h", "cost/result", "spent", "agent",
                  "backend")
    for item in out:
        cost = item["cost_per_effective"]
        table.add_row(
            str(item["run"]), item["name"], f"{item['status']} ({item['end_reason'] or '-'})",
            str(item["trials"]), str(item.get("completed", 0)), str(item.get("failed", 0)),
            str(item.get("cached", 0)), str(item.get("running", 0)),
            rate_text(item["throughput_per_h"]), rate_text(item["effective_per_h"]),
            "-" if cost is None else f"{money_text(cost)} {item['currency']}",
            f"{money_text(item['spent'])} {item['currency']}", item["agent"], item["backend"],
        )
    console.out.print(table)
    return ExitCode.OK


def _selected_runs(store: Store, name: str | None) -> list[int]:
    rows = store.campaigns()
    if name is not None:
        rows = [r for r in rows if r["name"] == name or str(r["id"]) == name]
        if not rows:
            raise ConfigError(f"{store.path}: no campaign run named {name!r}")
    return [int(r["id"]) for r in rows]


def _report_command(args: argparse.Namespace, console: Console) -> int:
    store, name = _open_target(args.target, args.workspace)
    now = time.time()
    every = {int(r["id"]): run_detail(store, int(r["id"]), now=now) for r in store.campaigns()}
    chosen = [every[i] for i in _selected_runs(store, name)]
    labels = {label for d in chosen for label in d.summary.serves}
    rollups = [r for r in rollup_by_objective(d.summary for d in every.values())
               if r.label in labels]
    if args.json:
        console.data({
            "workspace": str(store.path),
            "runs": [_detail_json(d) for d in chosen],
            "objectives": [_rollup_json(r) for r in rollups],
        })
        return ExitCode.OK
    for detail in chosen:
        for line in _detail_lines(detail):
            console.result(line)
        console.result("")
    for rollup in rollups:
        console.result(_rollup_line(rollup))
    if args.html is not None:
        if not chosen:
            raise ConfigError(f"{store.path}: no campaign run to report")
        detail = chosen[-1]
        from dse._html import render_html

        lines = [*_detail_lines(detail), "", *(_rollup_line(r) for r in rollups
                                                   if r.label in detail.summary.serves)]
        out = render_html(store, detail.summary.campaign_id, args.html, lines)
        console.status(f"HTML report of {detail.summary.name} run {detail.summary.campaign_id}:"
                       f" {out}")
    return ExitCode.OK


def _spent_json(spent: Spend) -> dict[str, float]:
    return {"money": spent.money, "cpu_hours": spent.cpu_s / 3600.0,
            "gpu_hours": spent.gpu_s / 3600.0, "node_hours": spent.node_s / 3600.0,
            "attempt_hours": spent.wall_s / 3600.0}


def _ceilings(detail: RunDetail) -> dict[str, dict[str, Any]]:
    """Spent against each ceiling the run's budget has."""
    s = detail.summary
    budget = s.budget
    out: dict[str, dict[str, Any]] = {}
    if budget.get("money") is not None:
        out["money"] = {"spent": s.spent.money, "ceiling": budget["money"], "unit": s.currency}
    if budget.get("compute"):
        unit, hours = budget["compute"]
        out["compute"] = {"spent": s.spent.compute_s(unit) / 3600.0, "ceiling": hours,
                          "unit": f"{unit}-hours"}
    if budget.get("trials") is not None:
        out["trials"] = {"spent": detail.dispatched, "ceiling": budget["trials"],
                         "unit": "trials"}
    if budget.get("wall_clock_s") is not None:
        out["wall_clock"] = {"spent": s.wall_s, "ceiling": budget["wall_clock_s"], "unit": "s"}
    return out


def _detail_json(detail: RunDetail) -> dict[str, Any]:
    s = detail.summary
    best = detail.best
    return {
        "campaign": s.name, "run": s.campaign_id, "status": s.status,
        "end_reason": detail.end_reason, "budget_reason": detail.budget_reason,
        "serves": list(s.serves),
        "best": None if best is None else {
            "trial": best.trial, "metric": best.metric, "direction": best.direction,
            "score": best.score, "params": best.params,
        },
        "trials": {"total": sum(detail.outcomes.values()), **detail.outcomes},
        "data_versions": [
            {"version": g.version, "trials": g.trials, "completed": g.completed,
             "mismatched": g.mismatched,
             "best": None if g.best is None else {"trial": g.best.trial, "score": g.best.score}}
            for g in detail.data_versions
        ],
        "mismatched": list(detail.mismatched),
        "invalid": [{"trial": n, "reason": why} for n, why in detail.invalid],
        "scorer": detail.scorer,
        "failures": dict(s.failures),
        "currency": s.currency,
        "spent": _spent_json(s.spent),
        "budget": _ceilings(detail),
        "wall_clock_s": s.wall_s,
        "finished": s.finished,
        "effective": s.effective,
        "throughput_per_h": s.throughput_per_h,
        "effective_per_h": s.effective_per_h,
        "cost_per_effective": s.cost_per_effective,
        "compute_per_effective_h": {u: s.compute_per_effective_h(u) for u in _UNITS},
        "cache_hits": [
            {"trial": h.trial, "reuses_run": h.reuses_run, "reuses_trial": h.reuses_trial,
             "cost": 0.0, "reused_cost": h.reuses_spend.money}
            for h in detail.cache_hits
        ],
    }


def _rollup_json(rollup: ObjectiveRollup) -> dict[str, Any]:
    return {
        "objective": rollup.label, "currency": rollup.currency, "runs": list(rollup.runs),
        "spent": _spent_json(rollup.spent), "finished": rollup.finished,
        "effective": rollup.effective, "cached": rollup.cached,
        "cost_per_effective": rollup.cost_per_effective,
        "compute_per_effective_h": {u: rollup.compute_per_effective_h(u) for u in _UNITS},
    }


_UNITS = ("cpu", "gpu", "node")


def _shown_units(spent: Spend, ceiling_unit: str | None) -> list[str]:
    """The compute units worth a line: those spent (node-hours only without cpu or gpu
    ones), and the one with a ceiling."""
    units = [u for u in ("cpu", "gpu") if spent.compute_s(u) > 0]
    if not units and spent.node_s > 0:
        units = ["node"]
    if ceiling_unit is not None and ceiling_unit not in units:
        units.append(ceiling_unit)
    return units or ["cpu"]


def _per_effective(cost: float | None, compute: dict[str, float | None], currency: str) -> str:
    if cost is None:
        return "- (no effective result yet)"
    parts = [f"{money_text(cost)} {currency}"]
    parts += [f"{hours_text(h)} {u}-hours" for u, h in compute.items() if h is not None]
    return ", ".join(parts) + " per effective result"


def _detail_lines(detail: RunDetail) -> list[str]:
    s = detail.summary
    cur = s.currency
    ended = detail.end_reason or "-"
    if detail.budget_reason:
        ended += f": {detail.budget_reason}"
    lines = [f"campaign {s.name} run {s.campaign_id}: {s.status} ({ended})"]

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<13}{text}")

    row("serves", ", ".join(s.serves))
    best = detail.best
    row("best", "-" if best is None else (
        f"trial {best.trial}: {best.metric}={best.score:.6g} ({best.direction}),"
        f" params {json.dumps(best.params)}"))
    outcomes = ", ".join(f"{n} {status}" for status, n in sorted(
        detail.outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    row("trials", f"{sum(detail.outcomes.values())}" + (f": {outcomes}" if outcomes else ""))
    for group in detail.data_versions:
        flagged = f", {group.mismatched} read other data (flagged)" if group.mismatched else ""
        best_text = "-" if group.best is None else (
            f"best trial {group.best.trial} {group.best.metric}={group.best.score:.6g}")
        row("data", f"{group.version}: {group.trials} trials, {group.completed} completed,"
                    f" {best_text}{flagged}")
    if len(detail.data_versions) > 1:
        row("", "(each data version ranked on its own; best above: the latest)")
    if detail.mismatched:
        row("FLAGGED", "read other data than expected: trials "
            + ", ".join(str(n) for n in detail.mismatched))
    reasons: dict[str, list[int]] = {}
    for number, why in detail.invalid:
        reasons.setdefault(why, []).append(number)
    for why, numbers in reasons.items():
        row("INVALID", f"trials {', '.join(str(n) for n in numbers)}: {why} (not ranked)")
    row("scorer", detail.scorer)
    row("failures", ", ".join(f"{cls} {n}" for cls, n in sorted(s.failures.items()))
        or "none")
    ceilings = _ceilings(detail)
    spend = []
    money = ceilings.get("money")
    spend.append(f"money {money_text(s.spent.money)}" + (
        f" / {money_text(money['ceiling'])}" if money else "") + f" {cur}")
    compute = ceilings.get("compute")
    ceiling_unit = compute["unit"].removesuffix("-hours") if compute else None
    for unit in _shown_units(s.spent, ceiling_unit):
        text = f"compute {hours_text(s.spent.compute_s(unit) / 3600.0)}"
        if unit == ceiling_unit and compute is not None:
            text += f" / {compute['ceiling']:g}"
        spend.append(f"{text} {unit}-hours")
    trials = ceilings.get("trials")
    if trials:
        spend.append(f"trials run {detail.dispatched} / {trials['ceiling']}")
    wall = ceilings.get("wall_clock")
    spend.append(f"wall clock {duration_text(s.wall_s)}" + (
        f" / {duration_text(wall['ceiling'])}" if wall else ""))
    row("spend", spend[0])
    for text in spend[1:]:
        row("", text)
    row("throughput", f"{rate_text(s.throughput_per_h)} trials/h ({s.finished} finished)")
    row("effective", f"{rate_text(s.effective_per_h)} results/h ({s.effective} usable)")
    units = _shown_units(s.spent, ceiling_unit)
    row("cost", _per_effective(s.cost_per_effective,
                               {u: s.compute_per_effective_h(u) for u in units}, cur))
    if detail.cache_hits:
        reuses = "; ".join(
            f"trial {h.trial} reuses trial {h.reuses_trial}"
            + ("" if h.reuses_run == s.campaign_id else f" of run {h.reuses_run}")
            + f" ({money_text(h.reuses_spend.money)} {cur})"
            for h in detail.cache_hits[:5]
        ) + ("; ..." if len(detail.cache_hits) > 5 else "")
        row("cache hits", f"{len(detail.cache_hits)}, costing nothing: {reuses}")
    return lines


def _rollup_line(rollup: ObjectiveRollup) -> str:
    units = _shown_units(rollup.spent, None)
    runs = ", ".join(str(r) for r in rollup.runs)
    compute = ", ".join(f"{hours_text(rollup.spent.compute_s(u) / 3600.0)} {u}-hours"
                        for u in units)
    return (
        f"objective {rollup.label}: run{'s' if len(rollup.runs) > 1 else ''} {runs};"
        f" spent {money_text(rollup.spent.money)} {rollup.currency}, {compute};"
        f" {rollup.effective} effective results; "
        + _per_effective(rollup.cost_per_effective,
                         {u: rollup.compute_per_effective_h(u) for u in units},
                         rollup.currency)
    )


def _plugins(args: argparse.Namespace, console: Console) -> int:
    plugins = PluginManager()
    entries = [*plugins.backends.values(), *plugins.agents.values()]
    rows = [
        {
            "name": e.name, "kind": e.kind,
            "version": str(getattr(e.cls, "version", "") or e.version),
            "distribution": e.distribution, "distribution_version": e.version,
            "plugin": e.plugin,
        }
        for e in entries
    ]
    if args.json:
        console.data(rows)
        return ExitCode.OK
    from rich.table import Table

    table = Table("name", "kind", "version", "distribution")
    for row in rows:
        table.add_row(row["name"], row["kind"], row["version"],
                      f"{row['distribution']} {row['distribution_version']}")
    console.out.print(table)
    return ExitCode.OK


def trajectory(store: Store, campaign_id: int) -> list[dict[str, Any]]:
    """The rows of a run in step order, with CloudAI's trajectory columns first."""
    rows = []
    spec_rows = store.query("SELECT spec FROM campaigns WHERE id = ?", (campaign_id,))
    order = [p["name"] for p in json.loads(spec_rows[0]["spec"]).get("space", [])]
    bad_scores = {int(r["trial_id"]) for r in store.query(
        "SELECT s.trial_id FROM scores s JOIN trials t ON t.id = s.trial_id"
        " WHERE t.campaign_id = ? AND s.invalidation IS NOT NULL", (campaign_id,))}
    for t in store.trials(campaign_id):
        metrics = json.loads(t["metrics"]) if t["metrics"] else {}
        params = json.loads(t["params"])
        # The record keeps canonical (sorted) params; show them in the declared order.
        action = {k: params[k] for k in order if k in params} | params
        rows.append({
            "step": t["number"],
            "action": action,
            "reward": t["score"],
            "observation": metrics,
            "status": t["status"],
            "failure": t["failure"],
            "config_hash": t["config_hash"],
            "cache_of": t["cache_of"],
            "trial_dir": t["trial_dir"],
            "valid": t["invalidation"] is None and t["id"] not in bad_scores,
        })
    return rows


def _show(args: argparse.Namespace, console: Console) -> int:
    store = open_existing(args.workspace or Path(".dse"))
    try:
        run, trial = find_trial(store, args.trial)
        (record,) = trial_records(store, run, [trial])
    finally:
        store.close()
    if args.json:
        console.data(record)
        return ExitCode.OK
    for line in record_lines(record):
        console.result(line)
    return ExitCode.OK


def _invalidate(args: argparse.Namespace, console: Console) -> int:
    reason = " ".join(str(args.reason).split())
    if not reason:
        raise ConfigError("dse invalidate: --reason must say why")
    store = open_existing(args.workspace or Path(".dse"))
    try:
        row = None
        if args.trial is not None:
            kind, target = "trial", str(args.trial)
            _, row = find_trial(store, target)
        elif args.data_version is not None:
            kind, target = "data_version", str(args.data_version)
        else:
            kind, target = "scorer_version", str(args.scorer_version)
        done = store.invalidate(kind, target, reason, time.time(),
                                trial_row=int(row["id"]) if row is not None else None)
    finally:
        store.close()
    flag = "--" + kind.replace("_", "-")
    if done is None:
        what = {"trial": "trial", "data_version": "trial with data version",
                "scorer_version": "score by scorer version"}[kind]
        raise ConfigError(f"dse invalidate {flag} {target}: no {what} {target} in the record")
    mark, trials, scores = done
    if args.json:
        console.data({"invalidation": mark, "kind": kind, "target": target, "reason": reason,
                      "trials": trials, "scores": scores})
    else:
        console.result(f"invalidation {mark}: {trials} trial(s) and {scores} score(s) flagged"
                       f" invalid ({flag} {target}: {reason}); nothing was deleted")
    return ExitCode.OK


def _export(args: argparse.Namespace, console: Console) -> int:
    store, name = _open_target(args.target, args.workspace)
    assert name is not None
    row = store.find_campaign(name)
    if row is None:
        raise ConfigError(f"{store.path}: no campaign run named {name!r}")
    rows = trajectory(store, row["id"])
    if args.format == "json":
        invalidations = [dict(r) for r in store.query("SELECT * FROM invalidations ORDER BY id")]
        text = json.dumps({"schema": EXPORT_SCHEMA, "campaign": row["name"], "run": row["id"],
                           "status": row["status"], "trajectory": rows,
                           "trials": trial_records(store, row),
                           "invalidations": invalidations}, indent=2)
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["step", "action", "reward", "observation", "status", "failure",
                         "config_hash", "cache_of", "valid"])
        for r in rows:
            writer.writerow([
                r["step"], json.dumps(r["action"]), "" if r["reward"] is None else r["reward"],
                json.dumps(r["observation"]), r["status"], r["failure"] or "",
                r["config_hash"], r["cache_of"] or "", "true" if r["valid"] else "false",
            ])
        text = buffer.getvalue()
    if args.output:
        args.output.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        console.status(f"wrote {len(rows)} steps to {args.output}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return ExitCode.OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
