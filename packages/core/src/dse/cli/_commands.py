"""The ``dse`` subcommands: each reads its arguments, does the work through the engine and
the store, and hands the values to :mod:`dse.report._render` (or :mod:`dse.report._show`,
:mod:`dse.report._html`)
to print. :data:`COMMANDS` is what :mod:`dse.cli._cli` dispatches to.

A module only one subcommand uses is imported by its handler: every ``dse`` command imports
this module, and ``dse status`` should not pay for ``dse show``'s (nor the engine ``dse run``
alone imports).
"""

from __future__ import annotations

import contextlib
import functools
import json
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.model._errors import ConfigError, ExitCode, PluginError
from dse.model._states import FailureClass
from dse.record._open import lease_state, reader, record_url, writer
from dse.record.sqlite import TrialSelection, check_writable, workspace_db
from dse.report._listings import plugin_rows, plugins_table, status_entry, status_table
from dse.report._render import (
    detail_lines,
    outcome_json,
    outcome_lines,
    pool_share_line,
    report_json,
    rollup_line,
)

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping, Sequence

    from dse.campaign._model import Campaign
    from dse.engine._engine import Engine
    from dse.engine._spec import RunChoice
    from dse.model._outcome import CampaignResult
    from dse.pool._poolfile import PoolConfig
    from dse.record._base import Storage
    from dse.report._report import RunDetail
    from dse.report._terminal import Console

__all__ = ["COMMANDS"]


def _pool_files(paths: Sequence[Path]) -> tuple[list[Path], PoolConfig | None]:
    """The campaign files to run and their pool: a pool file's, one of their own for several
    campaign files (weights 1, as many slots as the largest max_parallelism), or none."""
    from dse.pool._poolfile import PoolConfig, is_pool_file, load_pool

    if len(paths) == 1 and is_pool_file(paths[0]):
        config = load_pool(paths[0])
        return list(config.campaigns), config
    if len(paths) == 1:
        return list(paths), None
    for path in paths:
        if is_pool_file(path):
            raise ConfigError(f"{path}: a pool file runs alone (it names its campaigns)")
    return list(paths), PoolConfig({}, source="command line")


def _init(args: argparse.Namespace, console: Console) -> int:
    from dse.cli._starter import write_starter
    from dse.plugins._plugins import PluginManager

    def installed() -> None:
        """A starter that names a plugin not installed would not run: refused."""
        plugins = PluginManager()
        for kind, name, registered, lookup in (
                ("agent", args.agent, plugins.agents, plugins.agent_class),
                ("backend", args.backend, plugins.backends, plugins.backend_class)):
            if name not in registered:  # the lookup's error lists the installed ones
                try:
                    lookup(name)
                except PluginError as exc:
                    raise PluginError(f"dse init --{kind}: nothing written: {exc}") from None

    written = write_starter(args.campaign, name=args.name, agent=args.agent,
                            backend=args.backend, force=args.force, check=installed)
    console.status(f"wrote {' and '.join(str(p) for p in written)}; run it: dse run"
                   f" {args.campaign}")
    return ExitCode.OK


def _campaigns(args: argparse.Namespace, files: Sequence[Path],
               pool: PoolConfig | None) -> list[Campaign]:
    """The campaigns of `dse run`, each with the `--set` overrides (one file only)."""
    from dse.campaign._campaign import load_campaign

    if args.overrides and pool is not None:
        raise ConfigError(f"{args.campaign[0]}: --set applies to one campaign file, not to"
                          " a pool file (set the keys in each campaign's file)")
    if args.overrides and len(files) > 1:
        raise ConfigError("--set applies to one campaign file; several were given")
    return [load_campaign(path, workspace=args.workspace, overrides=args.overrides)
            for path in files]


def _run(args: argparse.Namespace, console: Console) -> int:
    # These: `dse run`'s alone (the reads start faster).
    from dse.launch._build import build_engine, closing_engine
    from dse.launch._console import LiveView
    from dse.launch._signals import CancelOnSignal
    from dse.plugins._plugins import PluginManager
    from dse.pool._pool import run_pool
    from dse.pool._poolfile import PoolConfig
    from dse.record._lock import CampaignLock

    files, pool = _pool_files(args.campaign)
    campaigns = _campaigns(args, files, pool)
    _one_backend(campaigns)
    plugins = PluginManager()
    # Everything that can refuse the campaign is built before the workspace is touched: a
    # campaign refused at configuration time writes nothing.
    urls = {c.workspace: record_url(args.record, c.record) for c in campaigns}
    stores = {w: writer(w, url, connect=False, say=console.warning) for w, url in urls.items()}
    for w, url in urls.items():
        if url is None:
            check_writable(stores[w].path)  # before the lock files: one line, exit 3
    listener = LiveView(console)
    engines = []
    backend = None
    for c in campaigns:
        engine = build_engine(c, store=stores[c.workspace], plugins=plugins,
                              listener=listener, backend=backend)
        backend = engine.backend
        engine.reuse = not args.fresh
        engines.append(engine)
    with contextlib.ExitStack() as stack:
        for c in campaigns:
            lock = stack.enter_context(CampaignLock(c.workspace, c.name, lease=functools.partial(
                lease_state, c.workspace, urls[c.workspace], c.name)))
            if lock.notice is not None:
                console.status(lock.notice)
        for store in stores.values():
            store.connect()
            stack.callback(store.close)
        choices = {c.name: _run_choice(stores[c.workspace], c, console, fresh=args.fresh)
                   for c in campaigns}
        resume = {name: ch.resume for name, ch in choices.items() if ch.resume is not None}
        watched = list(engines)
        with CancelOnSignal(watched, backend):
            try:
                alone = PoolConfig({"slots": campaigns[0].max_parallelism})
                try:
                    # A run left running is closed first: its trials finish, recorded in it.
                    for c in campaigns:
                        if (run := choices[c.name].supersede) is None:
                            continue
                        closer = closing_engine(c, store=stores[c.workspace], plugins=plugins,
                                                listener=listener, backend=backend)
                        watched.append(closer)
                        if closer.run(resume=run).status == "cancelled":
                            return ExitCode.INTERRUPTED  # Ctrl+C while it closed
                        watched.remove(closer)
                    results = run_pool(engines, pool or alone, resume=resume)
                except KeyboardInterrupt:
                    # The second Ctrl+C: every run is recorded cancelled, nothing waited for.
                    results = _abandoned(engines)
            finally:
                assert backend is not None
                backend.shutdown(wait=not any(e.abandoned for e in engines))
            details = _details(stores, campaigns, results)
    if pool is None:
        _outcome(results[0], details[0], campaigns[0], console, args.json)
    else:
        _pool_outcome(engines, results, details, campaigns, console, args.json)
    if any(r.status == "cancelled" for r in results):
        return ExitCode.INTERRUPTED
    if any(r.no_result for r in results):  # every trial failed, or a streak stopped it
        return ExitCode.NO_RESULT
    return ExitCode.OK


def _details(stores: Mapping[Path, Storage], campaigns: Sequence[Campaign],
             results: Sequence[CampaignResult]) -> list[RunDetail]:
    """What ``dse report`` says of each run just ended."""
    from dse.report._report import run_detail

    return [run_detail(stores[c.workspace], r.campaign_id)
            for c, r in zip(campaigns, results, strict=True)]


def _one_backend(campaigns: Sequence[Campaign]) -> None:
    """The campaigns of a pool run on one backend, with the same options."""
    for c in campaigns[1:]:
        first = campaigns[0]
        if (c.backend, dict(c.backend_options)) != (first.backend, dict(first.backend_options)):
            raise ConfigError(
                f"{c.source}: backend: the campaigns of a pool run on one backend, and"
                f" {first.source} uses {first.backend} with other options"
            )


def _abandoned(engines: Sequence[Engine]) -> list[CampaignResult]:
    """How each campaign ended, after a second Ctrl+C abandoned the pool."""
    results = [e.finished for e in engines]
    if any(r is None for r in results):
        raise KeyboardInterrupt  # interrupted before every run was recorded as ended
    return [r for r in results if r is not None]


def _outcome(result: CampaignResult, detail: RunDetail, campaign: Campaign, console: Console,
             as_json: bool) -> None:
    if as_json:
        console.data(outcome_json(result, detail, campaign))
        return
    for line in outcome_lines(result, detail, campaign):
        console.result(line)


def _pool_outcome(
    engines: Sequence[Engine], results: Sequence[CampaignResult], details: Sequence[RunDetail],
    campaigns: Sequence[Campaign], console: Console, as_json: bool,
) -> None:
    """Each campaign's outcome, then its share of the pool against its weight's."""
    pool = engines[0].pool
    assert pool is not None
    shares = {name: share[1] for name, share in pool.shares(time.time()).items()}
    weights = {e.campaign.name: pool.weight(e) for e in engines}
    total = sum(weights.values())
    if as_json:
        out = []
        for r, d, c in zip(results, details, campaigns, strict=True):
            entry = outcome_json(r, d, c)
            entry["pool"] = {"weight": weights[c.name], "target_share": weights[c.name] / total,
                             "share": shares[c.name]}
            out.append(entry)
        console.data({"pool": dict(pool.config.capacity), "campaigns": out})
        return
    for r, d, c in zip(results, details, campaigns, strict=True):
        _outcome(r, d, c, console, False)
    console.result(pool_share_line(pool.config.capacity, weights, shares))


def _run_choice(
    store: Storage, campaign: Campaign, console: Console, *, fresh: bool
) -> RunChoice:
    """What to do with *campaign*'s latest run (:func:`dse.engine._spec.resumable_run`), said."""
    from dse.engine._spec import resumable_run

    choice = resumable_run(store, campaign, fresh=fresh)
    if choice.line:
        console.status(choice.line)
    return choice


def _open_target(args: argparse.Namespace, console: Console) -> tuple[Storage, str | None]:
    target, workspace = args.target, args.workspace
    if target is not None and target.endswith(".toml"):
        # Only its name, workspace and record: the record says the rest, as it ran.
        from dse.campaign._campaignfile import campaign_place

        name, where, url = campaign_place(target, workspace=workspace)
        return reader(where, record_url(args.record, url), say=console.warning), name
    return reader(workspace, record_url(args.record), say=console.warning), target


def _selected_runs(store: Storage, name: str | None) -> list[int]:
    rows = store.reads.campaigns()
    if name is not None:
        rows = [r for r in rows if r.name == name or str(r.id) == name]
        if not rows:
            raise ConfigError(f"{store.where}: no campaign run named {name!r}")
    return [r.id for r in rows]


def _status(args: argparse.Namespace, console: Console) -> int:
    from dse.report._summary import run_best, summarize

    store, name = _open_target(args, console)
    runs = {r.id: r for r in store.reads.campaigns()}
    now = time.time()
    out = [
        status_entry(runs[run], summarize(store, run, now=now), store.reads.trial_counts(run),
                     run_best(store, runs[run]))
        for run in _selected_runs(store, name)
    ]
    if args.json:
        console.data(out)
        return ExitCode.OK
    width = console.out_width
    table, dropped = status_table(out, width)
    console.table(*table)
    if dropped:
        note = (f"{len(dropped)} more column{'s' if len(dropped) > 1 else ''} in a wider"
                f" terminal (or dse status --json): {', '.join(dropped)}")
        for line in textwrap.wrap(note, max(width - 1, 40), break_on_hyphens=False):
            console.status(line)
    return ExitCode.OK


def _report(args: argparse.Namespace, console: Console) -> int:
    from dse.report._report import rollup_by_objective, run_detail

    if args.watch is not None and (args.html is None or args.json):
        raise ConfigError("dse report: --watch rewrites the page --html writes (give --html"
                          " OUT.html, without --json)")
    if args.html is not None:
        from dse.report._html import check_matplotlib

        check_matplotlib()  # before anything is printed: the one line, not a report first
    store, name = _open_target(args, console)
    now = time.time()
    every = {r.id: run_detail(store, r.id, now=now) for r in store.reads.campaigns()}
    chosen = [every[i] for i in _selected_runs(store, name)]
    labels = {label for d in chosen for label in d.summary.serves}
    rollups = [r for r in rollup_by_objective(d.summary for d in every.values())
               if r.label in labels]
    if args.json:
        console.data(report_json(store.where, chosen, rollups))
    else:
        for detail in chosen:
            for line in detail_lines(detail):
                console.result(line)
            console.result("")
        for rollup in rollups:
            console.result(rollup_line(rollup))
    if args.html is not None:  # with --json too: the JSON on stdout, the page in its file
        if not chosen:
            raise ConfigError(f"{store.where}: no campaign run to report")
        detail = chosen[-1]
        from dse.report._html import watch_html_report, write_html_report

        run = f"{detail.summary.name} run {detail.summary.campaign_id}"
        if args.watch is None:
            out = write_html_report(store, detail.summary.campaign_id, args.html,
                                    details=every.values())
            console.status(f"HTML report of {run}: {out}")
            return ExitCode.OK
        console.status(f"HTML report of {run}: {args.html}, rewritten every {args.watch:g} s"
                       " while the run is running (Ctrl+C stops)")
        status = watch_html_report(store, detail.summary.campaign_id, args.html,
                                   every=args.watch, details=every.values())
        console.status(f"HTML report of {run}: {args.html} (the run is {status}: not"
                       " rewritten any more)")
    return ExitCode.OK


def _plugins(args: argparse.Namespace, console: Console) -> int:
    from dse.plugins._plugins import PluginManager

    rows = plugin_rows(PluginManager())
    if args.json:
        console.data(rows)
    else:
        console.table(*plugins_table(rows))
    return ExitCode.OK


def _show(args: argparse.Namespace, console: Console) -> int:
    from dse.report._show import explain_reuse, trial_records
    from dse.report._showtext import record_lines

    store = reader(args.workspace, record_url(args.record), say=console.warning)
    try:
        run, trial = store.reads.find_trial(args.trial)
        (record,) = trial_records(store, run, [trial])
        explain_reuse(store, run, trial, record)
    finally:
        store.close()
    if args.json:
        console.data(record)
        return ExitCode.OK
    for line in record_lines(record):
        console.result(line)
    return ExitCode.OK


def _dashboard(args: argparse.Namespace, console: Console) -> int:
    from dse.campaign._campaignfile import RECORD_SCHEMES
    from dse.dashboard._server import open_dashboard

    target = args.target
    url = target if target is not None and target.startswith(RECORD_SCHEMES) else None
    workspace = Path(target) if target is not None and url is None else None
    try:
        server = open_dashboard(workspace, record_url(args.record or url), host=args.host,
                                port=args.port, token=args.token)
    except OSError as exc:
        raise ConfigError(f"dse dashboard: cannot listen on {args.host}:{args.port}"
                          f" ({exc.strerror or exc})") from None
    console.status(f"dse dashboard: {server.url}  (Ctrl-C stops it)")
    with contextlib.suppress(KeyboardInterrupt):
        server.serve()
    return ExitCode.OK


def _sync(args: argparse.Namespace, console: Console) -> int:
    from dse.campaign._campaign import load_campaign
    from dse.integrations._exporter import sync_integrations
    from dse.plugins._plugins import PluginManager
    from dse.record._lock import CampaignLock

    campaign = load_campaign(args.campaign, workspace=args.workspace, overrides=args.overrides)
    if not campaign.integrations:
        raise ConfigError(f"{args.campaign}: no [integrations.<name>] table: nothing to write to")
    url = record_url(args.record, campaign.record)
    store = reader(campaign.workspace, url, say=console.warning)
    # The campaign's lock: a controller running it writes its trials itself (two writers of
    # one place could each take the other's half-written trial for a killed one's).
    lease = functools.partial(lease_state, campaign.workspace, url, campaign.name)
    with contextlib.closing(store), CampaignLock(campaign.workspace, campaign.name, lease=lease):
        written, failed = sync_integrations(campaign, store, PluginManager().integration_class)
    for line in failed:
        console.error(line)
    console.status(f"dse sync: {written} trial(s) of {campaign.name} written to"
                   f" {', '.join(campaign.integrations)}")
    return ExitCode.ENVIRONMENT_ERROR if failed else ExitCode.OK


def _enqueue(args: argparse.Namespace, console: Console) -> int:
    from dse.api._enqueue import enqueue_named

    if bool(args.params) == bool(args.configs):
        raise ConfigError("dse enqueue: give the configuration as --set PARAM=VALUE options"
                          " or as --json, one of them")
    configs: Any = {}
    for item in args.params:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"dse enqueue: --set {item!r}: expected PARAM=VALUE")
        configs[name.strip()] = value
    if args.configs:
        try:
            configs = json.loads(args.configs)
        except ValueError as exc:
            raise ConfigError(f"dse enqueue: --json: not JSON ({exc})") from None
    count = 1 if isinstance(configs, dict) else len(configs)
    name, waiting = enqueue_named(args.campaign, configs, workspace=args.workspace,
                                  record=args.record, source="dse enqueue")
    console.result(f"enqueued {count} configuration{'s' if count != 1 else ''} for campaign"
                   f" {name} ({waiting} waiting)")
    return ExitCode.OK


def _invalidate(args: argparse.Namespace, console: Console) -> int:
    reason = " ".join(str(args.reason or "").split())
    if not reason and not args.dry_run:
        raise ConfigError("dse invalidate: --reason must say why")
    kind, target, select = _invalidation_target(args)
    store = reader(args.workspace, record_url(args.record), write=True, say=console.warning)
    try:
        trial_row = store.reads.find_trial(target)[1].id if kind == "trial" else None
        done = store.invalidate(kind, target, reason or "(dry run)", time.time(),
                                trial_row=trial_row, select=select, dry_run=args.dry_run)
    finally:
        store.close()
    flag = f"--{kind.replace('_', '-')} {target}" if select is None else target
    if done is None and select is not None:
        raise ConfigError(f"dse invalidate: no trial in the record matches {target}")
    if done is None:
        what = {"trial": "trial", "data_version": "trial with data version",
                "scorer_version": "score by scorer version"}[kind]
        raise ConfigError(f"dse invalidate {flag}: no {what} {target} in the record")
    mark, trials, scores = done
    if args.json:
        console.data({"invalidation": None if args.dry_run else mark, "kind": kind,
                      "target": target, "reason": reason, "trials": trials, "scores": scores,
                      "dry_run": bool(args.dry_run)})
    elif args.dry_run:
        console.result(f"dry run: would flag {trials} trial(s) and {scores} score(s) invalid"
                       f" ({flag}); nothing was changed")
    else:
        console.result(f"invalidation {mark}: {trials} trial(s) and {scores} score(s) flagged"
                       f" invalid ({flag}: {reason}); nothing was deleted")
    return ExitCode.OK


def _invalidation_target(args: argparse.Namespace) -> tuple[str, str, TrialSelection | None]:
    """(kind, target, selection) of ``dse invalidate``'s options, checked."""
    scoped = args.run is not None or args.campaign is not None
    if args.trial is not None or args.data_version is not None or args.scorer_version is not None:
        if scoped:
            raise ConfigError("dse invalidate: --run and --campaign select with --failed or"
                              " alone, not with --trial, --data-version or --scorer-version")
        if args.trial is not None:
            return "trial", str(args.trial), None
        if args.data_version is not None:
            return "data_version", str(args.data_version), None
        return "scorer_version", str(args.scorer_version), None
    if args.failed is None and not scoped:
        raise ConfigError("dse invalidate: say what to flag: --trial, --data-version,"
                          " --scorer-version, --failed [CLASS], --run N or --campaign NAME")
    if args.failed:
        classes = [f.value for f in FailureClass]
        if args.failed not in classes:
            raise ConfigError(f"dse invalidate --failed {args.failed}: no such failure class;"
                              f" one of {', '.join(classes)}")
    select = TrialSelection(failed=args.failed, run=args.run, campaign=args.campaign)
    return "trials", select.describe(), select


def _export(args: argparse.Namespace, console: Console) -> int:
    from dse.report._export import export_text

    store, name = _open_target(args, console)
    assert name is not None
    run = store.reads.find_campaign(name)
    if run is None:
        raise ConfigError(f"{store.where}: no campaign run named {name!r}")
    pieces = export_text(store, run, args.format)
    if not args.output:
        for piece in pieces:
            console.write(piece)
        return ExitCode.OK
    with args.output.open("w", encoding="utf-8", newline="") as out:
        for piece in pieces:
            out.write(piece)
    steps = sum(store.reads.trial_counts(run.id).values())
    console.status(f"wrote {steps} steps to {args.output}")
    return ExitCode.OK


def _record(args: argparse.Namespace, console: Console) -> int:
    from dse.record._open import named
    from dse.record.sql._copy import copy_record

    source = named(args.source, write=False, say=console.warning)
    try:
        target = named(args.target, write=True, say=console.warning)
        try:
            if source.where == target.where:
                raise ConfigError(f"{source.where}: the source and the target are one record")
            checks = copy_record(source, target, console.status)
        finally:
            target.close()
    finally:
        source.close()
    differ = [c for c in checks if not c.same]
    for c in checks:
        said = "identical" if c.same else f"DIFFERENT ({c.target_rows:,} rows in the target)"
        console.result(f"{c.table}: {c.rows:,} rows, {said}")
    if differ:
        raise ConfigError(f"{target.where}: the copy differs from {source.where} in"
                          f" {', '.join(c.table for c in differ)}")
    console.status(f"copied {source.where} into {target.where}: every table identical")
    return ExitCode.OK


def _doctor(args: argparse.Namespace, console: Console) -> int:
    from dse.record._doctor import examine, salvage
    from dse.report._listings import doctor_json, doctor_lines, salvage_line

    workspace = args.workspace or Path(".dse")
    path = workspace_db(workspace)
    if not path.is_file():
        raise ConfigError(f"{path}: no dse record here")
    checkup = examine(path)
    saved = None if args.salvage is None else salvage(path, args.salvage)
    if args.json:
        console.data(doctor_json(checkup, saved))
    else:
        for line in doctor_lines(checkup, str(workspace)):
            console.result(line)
        if saved is not None:
            console.result(salvage_line(str(path), saved))
    if saved is None and checkup.state == "damaged":
        return ExitCode.DAMAGED_RECORD
    return ExitCode.OK


COMMANDS: dict[str, Callable[[argparse.Namespace, Console], int]] = {
    "init": _init, "run": _run, "status": _status, "plugins": _plugins, "export": _export,
    "report": _report, "show": _show, "invalidate": _invalidate, "doctor": _doctor,
    "enqueue": _enqueue,
    "dashboard": _dashboard,
    "sync": _sync,
    "record": _record,
}
"""Each subcommand's handler: it takes the parsed arguments and the console, and returns the
exit code."""
