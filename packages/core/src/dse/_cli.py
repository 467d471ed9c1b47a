"""The ``dse`` command."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse._build import build_engine
from dse._campaign import Campaign, load_campaign
from dse._console import Console, LiveView
from dse._engine import campaign_spec
from dse._errors import ConfigError, DseError, ExitCode
from dse._hashing import canonical_json
from dse._lock import CampaignLock
from dse._plugins import PluginManager
from dse._store import Store, open_existing, workspace_db
from dse._version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

    from dse._engine import CampaignResult


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dse", description="Run design-space-exploration campaigns."
    )
    parser.add_argument("--version", action="version", version=f"dse {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a campaign file")
    run.add_argument("campaign", type=Path, metavar="CAMPAIGN.toml")
    run.add_argument("--workspace", type=Path, help="record directory (default: .dse beside"
                     " the campaign file)")
    run.add_argument("--json", action="store_true", help="print the outcome as JSON")
    run.add_argument("--fresh", action="store_true",
                     help="start a new run even if the last one did not finish")

    status = sub.add_parser("status", help="list the campaign runs of a workspace")
    status.add_argument("target", nargs="?", help="a campaign file, name or run id")
    status.add_argument("--workspace", type=Path)
    status.add_argument("--json", action="store_true")

    plugins = sub.add_parser("plugins", help="list installed backends and agents")
    plugins.add_argument("--json", action="store_true")

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
    try:
        if args.command == "run":
            return _run(args, console)
        if args.command == "status":
            return _status(args, console)
        if args.command == "plugins":
            return _plugins(args, console)
        if args.command == "export":
            return _export(args, console)
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
    return ExitCode.USAGE_ERROR  # pragma: no cover - argparse requires a command


def _run(args: argparse.Namespace, console: Console) -> int:
    campaign = load_campaign(args.campaign, workspace=args.workspace)
    plugins = PluginManager()
    with CampaignLock(campaign.workspace, campaign.name) as lock:
        if lock.notice is not None:
            console.status(lock.notice)
        store = Store(workspace_db(campaign.workspace))
        listener = LiveView(console)
        engine = build_engine(campaign, store=store, plugins=plugins, listener=listener)
        resume = _resumable_run(store, campaign, console, fresh=args.fresh)
        interrupts = 0

        def on_signal(signum: int, frame: FrameType | None) -> None:
            nonlocal interrupts
            interrupts += 1
            if interrupts > 1:
                raise KeyboardInterrupt
            engine.request_stop("cancelled")

        previous = {
            sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            try:
                result = engine.run(resume=resume)
            finally:
                engine.backend.shutdown(wait=not engine.abandoned)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            store.close()
    _report(result, campaign, console, args.json)
    if result.status == "cancelled":
        return ExitCode.INTERRUPTED
    return ExitCode.OK


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
    if canonical_json(json.loads(row["spec"])) != canonical_json(campaign_spec(campaign)):
        console.status(f"run {row['id']} of {campaign.name} did not finish, but the campaign"
                       " file changed since; starting a new run")
        return None
    what = "was cancelled" if row["status"] == "cancelled" else "did not finish"
    console.status(f"run {row['id']} of {campaign.name} {what}: resuming it")
    return int(row["id"])


def _report(result: CampaignResult, campaign: Campaign, console: Console, as_json: bool) -> None:
    s = result.stats
    best = result.best
    if as_json:
        console.data({
            "campaign": result.name,
            "run": result.campaign_id,
            "status": result.status,
            "end_reason": result.end_reason,
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
        })
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
    for row in rows:
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
        })
    if args.json:
        console.data(out)
        return ExitCode.OK
    from rich.table import Table

    table = Table("run", "campaign", "status", "trials", "completed", "failed", "cached",
                  "running", "agent", "backend")
    for item in out:
        table.add_row(
            str(item["run"]), item["name"], f"{item['status']} ({item['end_reason'] or '-'})",
            str(item["trials"]), str(item.get("completed", 0)), str(item.get("failed", 0)),
            str(item.get("cached", 0)), str(item.get("running", 0)), item["agent"],
            item["backend"],
        )
    console.out.print(table)
    return ExitCode.OK


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
        })
    return rows


def _export(args: argparse.Namespace, console: Console) -> int:
    store, name = _open_target(args.target, args.workspace)
    assert name is not None
    row = store.find_campaign(name)
    if row is None:
        raise ConfigError(f"{store.path}: no campaign run named {name!r}")
    rows = trajectory(store, row["id"])
    if args.format == "json":
        text = json.dumps({"campaign": row["name"], "run": row["id"], "status": row["status"],
                           "trajectory": rows}, indent=2)
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["step", "action", "reward", "observation", "status", "failure",
                         "config_hash", "cache_of"])
        for r in rows:
            writer.writerow([
                r["step"], json.dumps(r["action"]), "" if r["reward"] is None else r["reward"],
                json.dumps(r["observation"]), r["status"], r["failure"] or "",
                r["config_hash"], r["cache_of"] or "",
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
