"""MLflow (``[integrations.mlflow]``): each trial a run, nested under a run of its campaign in
an experiment named after the campaign.

A trial's run is whole once it carries :data:`WRITTEN`, the last thing written to it (after its
status and end time). ``open`` keeps the marked runs of the campaign and record, one per key,
and deletes the rest: what a writer killed part way left. They are found by their tags, not
only under the campaign's run: should that run be lost (deleted in the UI, or its file broken
by a kill), a new one is made and the trials are moved under it, not written again. The file
store is not crash-safe on its own — a kill inside its writes can leave a run with hardly a
tag, or a file MLflow fails every search of the experiment on — so ``open`` mends those too.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import os
import posixpath
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Self, TypeVar
from urllib.parse import urlparse
from urllib.request import url2pathname

from dse.model._errors import ConfigError
from dse.plugins._integration import Integration, numeric

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from dse.plugins._integration import CampaignExport, TrialExport

WRITTEN = "dse.written"
"""The tag that marks a trial's run whole (value ``"1"``): written last."""
PARENT = "mlflow.parentRunId"
"""MLflow's tag nesting a run under another (the UI shows it so)."""

STATUS = {"completed": "FINISHED", "cached": "FINISHED", "failed": "FAILED",
          "interrupted": "FAILED", "budget_exhausted": "FAILED", "stopped": "KILLED"}
"""A trial's outcome as the status of its run."""

PARAM_MAX = 6000
"""Characters of a param value MLflow keeps (a longer one is cut)."""
TAG_MAX = 5000
"""Characters of a tag value: MLflow takes 8000 now, older servers 5000."""
KEY_MAX = 250
"""Characters of a param, metric or tag name."""
PER_CALL = 100
ENTITIES_PER_CALL = 1000
"""``log_batch`` takes at most 100 params, 100 tags and 1000 of them and metrics together per
call."""

_RESERVED = ("dse.", PARENT, "mlflow.runName")
_FIRST = ("dse.key", "dse.campaign")
_BAD_CHAR = re.compile(r"[^\w./ :-]")
_RUN_ID = re.compile(r"[0-9a-f]{32}")
"""A run's folder in a file store."""
_T = TypeVar("_T")


class _Seen(NamedTuple):
    """What ``open`` reads of one run (not the run: 100k of them stay small)."""

    run_id: str
    name: str
    running: bool
    start_time: int
    campaign: str
    record: str
    parent: str
    key: str
    written: bool
    bare: bool
    """No tag with a value but ``dse.key`` and ``dse.campaign`` (the first written): what a
    kill inside the file store's ``create_run`` leaves."""

    @classmethod
    def of(cls, run: Any) -> _Seen:
        info, tags = run.info, run.data.tags
        return cls(str(info.run_id), str(info.run_name or ""), info.status == "RUNNING",
                   int(info.start_time or 0), tags.get("dse.campaign", ""),
                   tags.get("dse.record", ""), tags.get(PARENT, ""), tags.get("dse.key", ""),
                   tags.get(WRITTEN) == "1", all(k in _FIRST for k, v in tags.items() if v))


class MlflowIntegration(Integration):
    """Writes each trial as an MLflow run: its params, its learning curve and final metrics
    (steps and times as recorded), its outcome as the run's status and ``dse.*`` tags, nested
    under one run of the campaign (per record) in the experiment *experiment*.

    Options (all optional): ``tracking_uri`` — where MLflow keeps runs, MLflow's own default
    otherwise (``MLFLOW_TRACKING_URI``, else ``./mlruns`` if it holds runs, else
    ``sqlite:///mlflow.db``, both in the controller's directory); ``experiment`` — its name,
    the campaign's by default, made if missing; ``tags`` — added to every run.

    Tracking URIs that work with ``mlflow-skinny`` (what ``dse-core[mlflow]`` installs): a
    tracking server (``http://host:5000``, ``https://…``) and Databricks (``databricks``,
    ``databricks://profile``). A database (``sqlite:///…``, ``postgresql://…``) needs the full
    ``mlflow`` (or SQLAlchemy and Alembic) beside it. The file store (``file:///…`` or a path)
    needs ``MLFLOW_ALLOW_FILE_STORE=true`` in MLflow 3 (3.18 refuses it otherwise), and reads
    every run of the experiment on each search: fine for thousands of trials, slow for 100k.
    """

    name = "mlflow"
    version = "1"
    needs = ("mlflow",)
    install = "pip install 'dse-core[mlflow]'"

    local_page: ClassVar[int] = 50_000
    """Runs per search page on the file store (its most: it reads every run per page)."""
    server_page: ClassVar[int] = 1_000
    """Runs per search page elsewhere."""

    def __init__(self, *, tracking_uri: str | None = None, experiment: str | None = None,
                 tags: Mapping[str, str] | None = None) -> None:
        for option, value in (("tracking_uri", tracking_uri), ("experiment", experiment)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{option} must be a string, not {type(value).__name__}")
        tags = dict(tags or {})
        for key, value in tags.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"tags must map strings to strings (tag {key!r}: {value!r})")
            if key.startswith(_RESERVED):
                raise TypeError(f"tags: {key!r} is the integration's own")
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.tags = tags
        self._client: Any = None
        self._experiment_id = self._campaign = self._record = self._parent = ""
        self._local: Path | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, where: str) -> Self:
        """As :meth:`Integration.from_options`; and a database store (MLflow's default,
        ``sqlite:///mlflow.db``, when neither the option nor ``MLFLOW_TRACKING_URI`` says
        another) refused at once when SQLAlchemy or Alembic is missing, as with
        ``mlflow-skinny`` alone: not one warning after the campaign started."""
        built = super().from_options(options, where=where)
        uri = built.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        default = uri is None and not Path("mlruns").is_dir()
        database = default or (uri is not None and uri.split(":", 1)[0].split("+", 1)[0] in (
            "sqlite", "postgresql", "mysql", "mssql"))
        missing = [m for m in ("sqlalchemy", "alembic") if importlib.util.find_spec(m) is None]
        if database and missing:
            said = "MLflow's default store, sqlite:///mlflow.db," if default else repr(uri)
            msg = (f"{where}: {said} needs the full mlflow package (pip install mlflow: it"
                   f" brings {' and '.join(missing)}); or set tracking_uri to a tracking server"
                   " (http://host:5000)")
            raise ConfigError(msg)
        return built

    def open(self, campaign: CampaignExport) -> list[str]:
        """Find (or make) the experiment and the campaign's run, delete the half-written runs
        and return the keys of the trials whose runs are whole."""
        tracking: Any = importlib.import_module("mlflow.tracking")
        uri = self.tracking_uri or str(tracking.get_tracking_uri())
        self._client = tracking.MlflowClient(tracking_uri=uri)
        self._local = local = _file_store(uri)
        self._experiment_id = self._find_experiment(self.experiment or campaign.name)
        if local is not None:  # the file store reads every run whatever the filter: one pass
            runs = _mended(lambda: self._scan(""), local / self._experiment_id)
        else:
            runs = self._scan(f"tags.`dse.campaign` = '{campaign.name}'")
        self._campaign, self._record = campaign.name, campaign.record[:TAG_MAX]
        parents = self._parents(runs)
        self._parent = parents[0]
        self._client.update_run(self._parent, status="RUNNING")
        held, doomed, moved = _sort(runs, parents, campaign.name, self._record)
        for run_id in moved:
            self._client.set_tag(run_id, PARENT, self._parent, synchronous=True)
        for run_id in doomed + parents[1:]:
            self._client.delete_run(run_id)
        return held

    def write(self, trial: TrialExport) -> None:
        """Write *trial* as a run; the mark last. A failure deletes what was written."""
        if self._client is None:
            raise RuntimeError("MlflowIntegration.write before open")
        client = self._client
        first, rest = self._trial_tags(trial)
        run = client.create_run(self._experiment_id, start_time=_ms(trial.created_at),
                                tags=first, run_name=trial.name)
        run_id = run.info.run_id
        try:
            for params, tags, metrics in _batches(_params(trial), rest, _metrics(trial)):
                client.log_batch(run_id, metrics=metrics, params=params, tags=tags,
                                 synchronous=True)
            client.set_terminated(run_id, STATUS.get(trial.status, "FAILED"),
                                  end_time=_ms(trial.ended_at))
            client.set_tag(run_id, WRITTEN, "1", synchronous=True)
        except Exception:
            with contextlib.suppress(Exception):  # or the next open deletes it
                client.delete_run(run_id)
            raise

    def close(self) -> None:
        """End the campaign's run (FINISHED, now)."""
        client, self._client = self._client, None
        if client is not None and self._parent:
            client.set_terminated(self._parent, "FINISHED", end_time=_ms(time.time()))

    def _find_experiment(self, name: str) -> str:
        """The id of experiment *name*, made if missing."""
        client = self._client
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            try:
                return str(client.create_experiment(name))
            except Exception:
                experiment = client.get_experiment_by_name(name)  # made meanwhile?
                if experiment is None:
                    raise
        if experiment.lifecycle_stage != "active":
            raise ConfigError(
                f"MLflow experiment {name!r} is deleted: restore it (`mlflow experiments"
                f" restore --experiment-id {experiment.experiment_id}`) or name another")
        return str(experiment.experiment_id)

    def _parents(self, runs: list[_Seen]) -> list[str]:
        """The campaign's runs for its record, oldest first (one, made if there is none)."""
        mine = sorted((r for r in runs if r.campaign == self._campaign
                       and r.record == self._record and not r.key and not r.parent),
                      key=lambda r: (r.start_time, r.run_id))
        if mine:
            return [r.run_id for r in mine]
        tags = {"dse.campaign": self._campaign, "dse.record": self._record, **self.tags}
        run = self._client.create_run(self._experiment_id, start_time=_ms(time.time()),
                                      tags=tags, run_name=self._campaign)
        return [str(run.info.run_id)]

    def _trial_tags(self, trial: TrialExport) -> tuple[dict[str, str], list[Any]]:
        """The tags *trial*'s run is made with, what identifies it (the file store writes them
        one at a time, in this order, and ``open`` knows by them a run cut short); the rest,
        logged with its params (the file store reads the run's ``meta.yaml`` per call)."""
        entities: Any = importlib.import_module("mlflow.entities")
        first = {"dse.key": trial.key, "dse.campaign": self._campaign,
                 "dse.record": self._record, PARENT: self._parent}
        rest = {**self.tags, "dse.trial": trial.name, "dse.config_hash": trial.config_hash,
                "dse.status": trial.status}
        for key, value in (("dse.failure", trial.failure), ("dse.message", trial.message),
                           ("dse.data_version", trial.data_version),
                           ("dse.cache_of", trial.cache_of)):
            if value:
                rest[key] = str(value)
        return ({key: value[:TAG_MAX] for key, value in first.items()},
                [entities.RunTag(key, value[:TAG_MAX]) for key, value in rest.items()])

    def _scan(self, where: str) -> list[_Seen]:
        """Every active run of the experiment that *where* selects, page by page."""
        entities: Any = importlib.import_module("mlflow.entities")
        seen: list[_Seen] = []
        token = None
        while True:
            page = self._client.search_runs(
                [self._experiment_id], where, run_view_type=entities.ViewType.ACTIVE_ONLY,
                max_results=self.local_page if self._local is not None else self.server_page,
                page_token=token)
            seen.extend(_Seen.of(run) for run in page)
            token = page.token
            if not token:
                return seen


def _sort(runs: list[_Seen], parents: list[str], campaign: str,
          record: str) -> tuple[list[str], list[str], list[str]]:
    """The keys held whole; the runs to delete: the campaign's half-written ones (for this
    record), and all but the lowest id of two whole runs of one key (a write retried after
    its mark landed unseen leaves them); the whole runs to move under ``parents[0]``."""
    held: dict[str, str] = {}
    doomed, moved = [], []
    ours = re.compile(rf"{re.escape(campaign)}(-\d+-\d+)?")
    for run in sorted(runs, key=lambda r: r.run_id):
        if run.key and (run.parent in parents
                        or (run.campaign == campaign and run.record == record)):
            if not run.written or run.key in held:
                doomed.append(run.run_id)
                continue
            held[run.key] = run.run_id
            if run.parent != parents[0]:
                moved.append(run.run_id)
        elif run.running and run.bare and ours.fullmatch(run.name):
            doomed.append(run.run_id)  # killed inside create_run (file store)
    return list(held), doomed, moved


def _params(trial: TrialExport) -> list[Any]:
    """*trial*'s params as MLflow logs them (``str`` of the value, cut to its limit)."""
    entities: Any = importlib.import_module("mlflow.entities")
    values = {_name(k): str(v)[:PARAM_MAX] for k, v in trial.params.items()}
    return [entities.Param(k, v) for k, v in values.items()]


def _metrics(trial: TrialExport) -> list[Any]:
    """*trial*'s curve, point by point, then its final metrics and score at its last step
    (a final metric the curve already has there is left out)."""
    entities: Any = importlib.import_module("mlflow.entities")
    out, at_last = [], {}
    for step, values, when in trial.curve:
        for key, value in numeric(values).items():
            out.append(entities.Metric(_name(key), value, _ms(when), step))
            if step == trial.last_step:
                at_last[key] = value
    finals = numeric(trial.metrics)
    if trial.score is not None:
        finals["score"] = float(trial.score)
    for key, value in finals.items():
        if key not in at_last or not _same(at_last[key], value):
            out.append(entities.Metric(_name(key), value, _ms(trial.ended_at), trial.last_step))
    return out


def _batches(params: list[Any], tags: list[Any],
             metrics: list[Any]) -> Iterator[tuple[list[Any], list[Any], list[Any]]]:
    """*params*, *tags* and *metrics* in calls ``log_batch`` takes."""
    p = t = m = 0
    while p < len(params) or t < len(tags) or m < len(metrics):
        some_params, some_tags = params[p:p + PER_CALL], tags[t:t + PER_CALL]
        room = ENTITIES_PER_CALL - len(some_params) - len(some_tags)
        yield some_params, some_tags, metrics[m:m + room]
        p, t, m = p + len(some_params), t + len(some_tags), m + room


def _name(key: str) -> str:
    """*key* as MLflow takes a name: characters it refuses as ``_``, no path tricks."""
    name = _BAD_CHAR.sub("_", str(key))[:KEY_MAX]
    norm = posixpath.normpath(name)
    if norm != name or norm == "." or norm.startswith(("..", "/")):
        name = "_" + name.replace("/", "_")
    return name[:KEY_MAX]


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _file_store(uri: str) -> Path | None:
    """The folder of the file store *uri* names, or ``None`` for another store."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(url2pathname(parsed.path))
    return Path(uri) if not parsed.scheme else None


def _mended(call: Callable[[], _T], folder: Path | None) -> _T:
    """*call*; should it fail on a file store (*folder*), mend *folder* and call again."""
    try:
        return call()
    except Exception:
        if folder is None or not _mend(folder):
            raise
    return call()


def _mend(folder: Path) -> bool:
    """Remove what a kill inside the file store's writes leaves in experiment *folder* that
    MLflow fails every search on: an empty ``meta.yaml`` of a run (MLflow then passes over
    the run's folder, as over a run being made), an empty metric file. Both hold nothing.
    Whether anything was removed."""
    mended = False
    with contextlib.suppress(OSError):
        for run in folder.iterdir():
            if not _RUN_ID.fullmatch(run.name) or not run.is_dir():
                continue
            meta = run / "meta.yaml"
            if meta.is_file() and meta.stat().st_size == 0:
                meta.unlink()
                mended = True
            for file in (run / "metrics").rglob("*"):
                if file.is_file() and file.stat().st_size == 0:
                    file.unlink()
                    mended = True
    return mended
