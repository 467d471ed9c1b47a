"""The Python API for notebooks and scripts: :func:`run` a campaign (from a dict or a file,
with a Python function as its objective if wanted) and :func:`load` a run back.

:func:`run` goes through what ``dse run`` does for one campaign: the campaign parsed and
checked, the engine built from the installed plugins (the local backend by default for a
command, which a function objective is), the lock, the workspace's SQLite record, a resume
of an unfinished run or a new run reusing recorded results. Nothing here keeps results of
its own: both functions answer from the record (:mod:`dse.report._readback`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.campaign._objective import reference, stop_if_importing
from dse.model._errors import ConfigError, NoResultError, RunWarning

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import FrameType

    from dse.campaign._model import Campaign
    from dse.campaign._objective import ObjectiveRef
    from dse.engine._engine import Engine, EngineListener
    from dse.engine._spec import RunChoice
    from dse.model._outcome import CampaignResult
    from dse.plugins._plugins import PluginManager
    from dse.record._base import Storage
    from dse.report._readback import Results

__all__ = ["load", "run"]

log = logging.getLogger("dse.api")


def run(
    campaign: Mapping[str, Any] | str | os.PathLike[str],
    objective: Callable[[dict[str, Any]], Any] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    fresh: bool = False,
    quiet: bool = False,
    listener: EngineListener | None = None,
    record: str | None = None,
    warm_start: Sequence[str | int] | None = None,
) -> Results:
    """Run a campaign to its end, as ``dse run`` does, and return its :class:`Results`.

    :param campaign: the campaign: a dict shaped as a campaign file's TOML parses
        (``{"campaign": {...}, "space": {...}, "objectives": [{...}], ...}``; relative paths
        and the workspace are relative to the current directory), or a campaign file's path.
    :param objective: a function ``objective(params) -> float | dict[str, float]`` run as
        each trial's command, in a worker process of its own (``python -m dse._worker``);
        the campaign then has no ``[environment] command``. ``None``: the campaign's command.
    :param workspace: the record's directory (default: the campaign's ``workspace``, else
        ``.dse`` beside the file or in the current directory).
    :param fresh: start a new run even when the latest one did not finish, reusing no
        recorded result (``dse run --fresh``).
    :param quiet: print nothing. Otherwise the run's progress goes to stderr as ``dse run``
        says it: one line rewritten in place in a terminal or a notebook (trials done, the
        counts, the best, the ETA), a line per trial in a log, a line per failure (its error,
        its log) and per retry, and at the end the lines ``dse run`` closes with. Warnings
        (what ``dse run`` prints as ``dse: warning:``) are issued as :class:`dse.RunWarning` either
        way, for the ``warnings`` module's filters.
    :param listener: told of the run's progress too (:class:`dse.EngineListener`).
    :param record: a ``postgresql://`` URL, the record (else ``DSE_RECORD``, else ``dse.sqlite``).
    :param warm_start: runs whose results the agent is told first (``[agent] warm_start``).
    :raises ConfigError: the campaign or the objective is refused (nothing is written).
    :raises NoResultError: the run ended with no completed trial (every trial failed, or the
        campaign stopped after failures in a row): its message says how it ended and what
        the first failure's error was; its ``results`` attribute is the run's
        :class:`Results`, every trial recorded as it is when one completed.
    :raises KeyboardInterrupt: Ctrl+C: running trials cancelled, recorded; a rerun continues.
    """
    stop_if_importing()  # a worker importing a script that calls this: before the imports
    from dse.api._listeners import Both, Warnings
    from dse.launch._build import build_engine
    from dse.launch._console import LineView
    from dse.plugins._plugins import PluginManager
    from dse.record._lock import CampaignLock
    from dse.record._open import lease_state, record_url, writer
    from dse.report._readback import no_result_message, read_results
    from dse.report._render import outcome_lines
    from dse.report._report import run_detail
    from dse.report._terminal import Console

    built, ref = _campaign(campaign, objective, workspace, warm_start)
    plugins, console, warn = PluginManager(), Console(), warner(sys._getframe(1))
    # Everything that can refuse the campaign is built before the workspace is touched.
    url = record_url(record, built.record)
    store = writer(built.workspace, url, connect=False, say=warn)
    view: EngineListener = Warnings(warn) if quiet else LineView(console, warn)
    engine = build_engine(built, store=store, plugins=plugins,
                          listener=view if listener is None else Both(view, listener))
    engine.reuse = not fresh
    try:
        with CampaignLock(built.workspace, built.name, lease=lambda: lease_state(
                built.workspace, url, built.name)) as lock, contextlib.closing(store):
            if lock.notice is not None:
                log.warning("%s", lock.notice)
            if ref is not None:
                ref.write_source()
            store.connect()
            result = _run_choice(engine, _resumable(store, built, fresh=fresh), plugins)
            row = store.reads.campaign(result.campaign_id)
            assert row is not None  # the engine recorded it
            results = read_results(store, row, built.workspace)
            for line in [] if quiet else outcome_lines(  # the lines dse run ends with
                    result, run_detail(store, result.campaign_id), built):
                console.status(line)
    finally:
        engine.backend.shutdown(wait=not engine.abandoned)
    if result.no_result:  # what dse run exits 4 for
        raise NoResultError(no_result_message(results), results)
    return results


def _campaign(
    campaign: Mapping[str, Any] | str | os.PathLike[str],
    objective: Callable[[dict[str, Any]], Any] | None,
    workspace: str | os.PathLike[str] | None,
    warm_start: Sequence[str | int] | None = None,
) -> tuple[Campaign, ObjectiveRef | None]:
    """The campaign :func:`run` is given, checked, with the objective's worker as its command
    (and the objective's reference), warm started from *warm_start* if given."""
    from dse.campaign._campaign import campaign_from_dict
    from dse.campaign._campaignfile import read_campaign_file

    if isinstance(campaign, str | os.PathLike):
        source: Path | None = Path(os.fspath(campaign))
        data = as_toml(read_campaign_file(Path(os.fspath(campaign))))
    else:
        source, data = None, as_toml(campaign)
    ref = None
    if objective is not None:
        ref, data = _with_objective(data, objective, source, workspace)
    # The code and dependencies are found for a campaign given as a dict too: what ran is
    # part of every result's identity (docs/record.md).
    built = campaign_from_dict(data, source=source, detect=True,
                               workspace=None if workspace is None else Path(workspace))
    if warm_start is not None:
        built = _warm_started(built, warm_start)
    return built, ref


def _warm_started(campaign: Campaign, sources: Sequence[str | int]) -> Campaign:
    """*campaign* warm started from *sources* (``dse.run(..., warm_start=)``)."""
    import dataclasses

    from dse.campaign._seeding import parse_warm_start

    table: dict[str, Any] = {"warm_start": list(sources)}
    if campaign.warm_start is not None:
        table.update(warm_start_data=campaign.warm_start.data,
                     warm_start_fill=dict(campaign.warm_start.fill))
    warm = parse_warm_start(table, "dse.run(warm_start=...)", campaign.space)
    return dataclasses.replace(campaign, warm_start=warm)


def warner(caller: FrameType) -> Callable[[str], None]:
    """Issue a :class:`dse.RunWarning` as if from *caller*'s line (the call of :func:`run`,
    or where an ask/tell loop was made): the warnings come from the engine's passes, deep in
    dse, and a filter or a traceback should point at the user's code."""
    where = (caller.f_code.co_filename, caller.f_lineno, caller.f_globals)

    def warn(message: str) -> None:
        filename, lineno, module_globals = where
        registry = module_globals.setdefault("__warningregistry__", {})
        warnings.warn_explicit(message, RunWarning, filename, lineno,
                               module=str(module_globals.get("__name__", "__main__")),
                               registry=registry, module_globals=module_globals)

    return warn


def _run_choice(engine: Engine, choice: RunChoice, plugins: PluginManager) -> CampaignResult:
    """Run *engine* as *choice* says: a run left running closed first, then a new run or
    the one continued."""
    from dse.launch._build import closing_engine

    if choice.supersede is not None:
        closer = closing_engine(engine.campaign, store=engine.store, plugins=plugins,
                                listener=engine.listener, backend=engine.backend)
        _run_engine(closer, choice.supersede)
    return _run_engine(engine, choice.resume)


def _run_engine(engine: Engine, resume: int | None) -> CampaignResult:
    """Run *engine* to its end; Ctrl+C as ``dse run`` takes it: the first cancels the
    running trials and records them (then :class:`KeyboardInterrupt` is raised), a second
    abandons them at once. Outside the main thread, or with SIGINT ignored, nothing changes."""
    import signal

    from dse.launch._signals import CancelOnSignal

    with CancelOnSignal([engine], engine.backend, (signal.SIGINT,)) as watch:
        result = engine.run(resume=resume)
    if watch.count:
        raise KeyboardInterrupt
    return result


def load(
    where: str | os.PathLike[str] = ".dse", *, campaign: str | None = None,
    run: int | None = None, record: str | None = None,
) -> Results:
    """Read a run back from the record, finished or still running.

    :param where: a workspace (the directory holding ``dse.sqlite``) or a campaign file
        (its workspace, and its campaign's runs).
    :param campaign: the campaign's name, when the workspace holds several.
    :param run: the run's id (``dse status`` lists them); default: the campaign's latest.
    :param record: the record, when not the workspace's ``dse.sqlite``: a ``postgresql://``
        URL (default: ``DSE_RECORD``, else the campaign file's ``record``); *where* is then
        where the trial directories are.
    :raises ConfigError: no such campaign or run; the workspace holds several campaigns and
        none is named.
    :raises StoreError: *where* holds no record.
    """
    from dse.campaign._campaignfile import campaign_place
    from dse.record._open import reader, record_url
    from dse.report._readback import read_results

    path = Path(os.fspath(where))
    workspace, url = path, None
    if path.suffix == ".toml" and not path.is_dir():
        name, workspace, url = campaign_place(path)
        campaign = campaign or name
    store = reader(workspace, record_url(record, url), say=_load_warning)  # read only
    try:
        row = _chosen_run(store, campaign, run)
        return read_results(store, row, workspace.resolve())
    finally:
        store.close()


def _load_warning(message: str) -> None:
    """What reading the record says (it is read as a snapshot, it is busy): a RunWarning."""
    warnings.warn(message, RunWarning, stacklevel=2)


def _chosen_run(store: Storage, campaign: str | None, run: int | None) -> Any:
    if run is not None:
        row = store.reads.campaign(run)
        if row is None or (campaign is not None and row.name != campaign):
            what = f"run {run}" + (f" of campaign {campaign}" if campaign else "")
            raise ConfigError(f"{store.where}: no {what} in the record")
        return row
    rows = store.reads.campaigns()
    if campaign is None:
        names = sorted({r.name for r in rows})
        if len(names) > 1:
            raise ConfigError(f"{store.where}: the record holds campaigns {', '.join(names)};"
                              " name one (campaign=...)")
        if not names:
            raise ConfigError(f"{store.where}: no campaign run in the record")
        campaign = names[0]
    # By name only (a campaign may be named "7": never read as a run id here).
    named = [r for r in rows if r.name == campaign]
    if not named:
        raise ConfigError(f"{store.where}: no campaign run named {campaign!r}")
    return max(named, key=lambda r: r.id)


def as_toml(data: Any) -> Any:
    """A campaign given in Python as TOML would parse it: tuples are lists."""
    if isinstance(data, dict):
        return {k: as_toml(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [as_toml(v) for v in data]
    return data


def _with_objective(
    data: dict[str, Any], objective: Callable[..., Any], source: Path | None,
    workspace: str | os.PathLike[str] | None,
) -> tuple[ObjectiveRef, dict[str, Any]]:
    """The campaign with the function's worker as its command (and, unless it declares one,
    the function's code version), and the function's reference."""
    where = str(source) if source is not None else "<campaign>"
    top = data.get("campaign")
    top = dict(top) if isinstance(top, dict) else {}
    env = data.get("environment")
    env = dict(env) if isinstance(env, dict) else {}
    if env.get("command"):
        raise ConfigError(f"{where}: environment.command: give an objective function or a"
                          " command, not both")
    if env.get("shell"):
        raise ConfigError(f"{where}: environment.shell: an objective function runs without a"
                          " shell")
    if source is None:
        top.setdefault("name", getattr(objective, "__name__", None))  # a file names it
    base = source.parent if source is not None else Path.cwd()
    if workspace is not None:
        place = Path(workspace)
    else:
        ws = top.get("workspace", ".dse")
        place = base / ws if isinstance(ws, str) else base / ".dse"
    ref = reference(objective, workspace=place.resolve())
    objectives = data.get("objectives", data.get("objective"))
    env["command"] = ref.command(_metric_of(objectives))
    env.setdefault("code_version", ref.code_version)
    return ref, {**data, "campaign": top, "environment": env}


def _metric_of(objectives: Any) -> str | None:
    """The first objective's metric that a trial reports (what a bare number returned is),
    if the objectives say one (their errors are the campaign parser's to say)."""
    items = [objectives] if isinstance(objectives, dict) else objectives
    for item in items if isinstance(items, list) else []:
        metric = item.get("metric") if isinstance(item, dict) else None
        if isinstance(metric, str) and metric and not metric.startswith("spend."):
            return metric
    return None


def _resumable(store: Storage, campaign: Campaign, *, fresh: bool) -> RunChoice:
    """What to do with *campaign*'s latest run: continue it, if it did not finish and the
    campaign is the same (what ``dse run`` continues), or close it first."""
    from dse.engine._spec import resumable_run

    choice = resumable_run(store, campaign, fresh=fresh)
    if choice.line:
        log.info("%s", choice.line)
    return choice
