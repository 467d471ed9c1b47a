"""The Python API for notebooks and scripts: :func:`run` a campaign (from a dict or a file,
with a Python function as its objective if wanted) and :func:`load` a run back.

:func:`run` goes through what ``dse run`` does for one campaign: the campaign parsed and
checked, the engine built from the installed plugins (the local backend by default for a
command, which a function objective is), the lock, the workspace's SQLite record, a resume
of an unfinished run or a new run reusing recorded results. Nothing here keeps results of
its own: both functions answer from the record (:mod:`dse._readback`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse._errors import ConfigError
from dse._objective import reference, stop_if_importing

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dse._campaign import Campaign
    from dse._engine import Engine
    from dse._objective import ObjectiveRef
    from dse._outcome import CampaignResult, EngineListener
    from dse._readback import Results
    from dse._store import Store

__all__ = ["load", "run"]

log = logging.getLogger("dse.api")


def run(
    campaign: Mapping[str, Any] | str | os.PathLike[str],
    objective: Callable[[dict[str, Any]], Any] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    fresh: bool = False,
    listener: EngineListener | None = None,
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
    :param listener: told of the run's progress (:class:`dse.EngineListener`).
    :raises ConfigError: the campaign or the objective is refused (nothing is written).
    :raises KeyboardInterrupt: Ctrl+C: running trials were cancelled and recorded; running
        the campaign again continues it.
    """
    # A worker importing a script that calls this at its top level stops here, before the
    # imports below (the rest of the module imports little: every worker pays for it).
    stop_if_importing()
    from dse._build import build_engine
    from dse._campaign import campaign_from_dict
    from dse._campaignfile import read_campaign_file
    from dse._lock import CampaignLock
    from dse._plugins import PluginManager
    from dse._readback import read_results
    from dse._store import Store, workspace_db

    if isinstance(campaign, str | os.PathLike):
        source: Path | None = Path(os.fspath(campaign))
        data = _as_toml(read_campaign_file(Path(os.fspath(campaign))))
    else:
        source, data = None, _as_toml(campaign)
    ref = None
    if objective is not None:
        ref, data = _with_objective(data, objective, source, workspace)
    # The code and dependencies are found for a campaign given as a dict too: what ran is
    # part of every result's identity (docs/record.md).
    built = campaign_from_dict(data, source=source, detect=True,
                               workspace=None if workspace is None else Path(workspace))
    plugins = PluginManager()
    # Everything that can refuse the campaign is built before the workspace is touched.
    store = Store(workspace_db(built.workspace), connect=False)
    engine = build_engine(built, store=store, plugins=plugins, listener=listener)
    engine.reuse = not fresh
    try:
        with CampaignLock(built.workspace, built.name) as lock:
            if lock.notice is not None:
                log.warning("%s", lock.notice)
            if ref is not None:
                ref.write_source()
            store.connect()
            try:
                result = _run_engine(engine, _resumable(store, built, fresh=fresh))
                row = store.campaign(result.campaign_id)
                assert row is not None  # the engine recorded it
                return read_results(store, row, built.workspace)
            finally:
                store.close()
    finally:
        engine.backend.shutdown(wait=not engine.abandoned)


def _run_engine(engine: Engine, resume: int | None) -> CampaignResult:
    """Run *engine* to its end; Ctrl+C as ``dse run`` takes it: the first cancels the
    running trials and records them (then :class:`KeyboardInterrupt` is raised), a second
    abandons them at once. Outside the main thread, or with SIGINT ignored, nothing changes."""
    import signal

    from dse._signals import CancelOnSignal

    with CancelOnSignal([engine], engine.backend, (signal.SIGINT,)) as watch:
        result = engine.run(resume=resume)
    if watch.count:
        raise KeyboardInterrupt
    return result


def load(
    where: str | os.PathLike[str], *, campaign: str | None = None, run: int | None = None,
) -> Results:
    """Read a run back from the record, finished or still running.

    :param where: a workspace (the directory holding ``dse.sqlite``) or a campaign file
        (its workspace, and its campaign's runs).
    :param campaign: the campaign's name, when the workspace holds several.
    :param run: the run's id (``dse status`` lists them); default: the campaign's latest.
    :raises ConfigError: no such campaign or run; the workspace holds several campaigns and
        none is named.
    :raises StoreError: *where* holds no record.
    """
    from dse._campaignfile import campaign_place
    from dse._readback import read_results
    from dse._store import open_existing

    path = Path(os.fspath(where))
    workspace = path
    if path.suffix == ".toml" and not path.is_dir():
        name, workspace = campaign_place(path)
        campaign = campaign or name
    store = open_existing(workspace)
    try:
        row = _chosen_run(store, campaign, run)
        return read_results(store, row, workspace.resolve())
    finally:
        store.close()


def _chosen_run(store: Store, campaign: str | None, run: int | None) -> Any:
    if run is not None:
        row = store.campaign(run)
        if row is None or (campaign is not None and row.name != campaign):
            what = f"run {run}" + (f" of campaign {campaign}" if campaign else "")
            raise ConfigError(f"{store.path}: no {what} in the record")
        return row
    rows = store.campaigns()
    if campaign is None:
        names = sorted({r.name for r in rows})
        if len(names) > 1:
            raise ConfigError(f"{store.path}: the record holds campaigns {', '.join(names)};"
                              " name one (campaign=...)")
        if not names:
            raise ConfigError(f"{store.path}: no campaign run in the record")
        campaign = names[0]
    # By name only (a campaign may be named "7": never read as a run id here).
    named = [r for r in rows if r.name == campaign]
    if not named:
        raise ConfigError(f"{store.path}: no campaign run named {campaign!r}")
    return max(named, key=lambda r: r.id)


def _as_toml(data: Any) -> Any:
    """A campaign given in Python as TOML would parse it: tuples are lists."""
    if isinstance(data, dict):
        return {k: _as_toml(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_as_toml(v) for v in data]
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


def _resumable(store: Store, campaign: Campaign, *, fresh: bool) -> int | None:
    """The run of *campaign* to continue: the latest, if it did not finish and the campaign
    is the same (what ``dse run`` continues)."""
    from dse._spec import resumable_run

    run, line = resumable_run(store, campaign, fresh=fresh)
    if line:
        log.info("%s", line)
    return run
