"""TensorBoard (``[integrations.tensorboard]``): each trial of a campaign as a run of a log
directory, with its params and outcome in the HPARAMS tab.

Layout (``logdir`` defaults to ``<workspace>/tensorboard``)::

    <logdir>/<campaign>/events.out.tfevents.<time>.dse.experiment
        the campaign: the HPARAMS tab's table (params with their domains, objectives)
    <logdir>/<campaign>/<trial name>/events.out.tfevents.<end>.dse.<key>
        one run per trial: its params and status (hparams), its learning curve and final
        metrics (scalars at their steps)

A run directory is named as ``dse show`` names the trial. The same campaign in a second record
(another key, the same trial names) takes ``<trial name>~<8 hex>`` (the key's digest) for a
name already taken. TensorBoard's HPARAMS tab reads one experiment per log directory: start
it on ``<logdir>/<campaign>`` to see one campaign's table.

Each file is written whole or not at all: under a name TensorBoard ignores (no ``tfevents``),
synced, then renamed (:func:`~dse.integrations._files.publish`); :meth:`open` reads the keys
from the names and removes a killed writer's leftovers. The event file is written with
TensorBoard's own record writer and protos (no TensorFlow).
"""

from __future__ import annotations

import importlib
import os
import re
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from dse.integrations._files import place, publish, remove, text_option
from dse.plugins._integration import Integration, numeric

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

    from dse.plugins._integration import CampaignExport, TrialExport

WHOLE = re.compile(r"^events\.out\.tfevents\.\d+\.dse\.(?P<label>.+)$")
"""An event file put in place whole: its label is the trial's key (``experiment`` for the
campaign's)."""
PARTIAL = "dse-partial."
"""The start of a file being written (TensorBoard reads only names holding ``tfevents``)."""
EXPERIMENT = "experiment"
"""The label of the campaign's experiment file (no key has this form)."""
STATUS = {"completed": "STATUS_SUCCESS", "cached": "STATUS_SUCCESS",
          "failed": "STATUS_FAILURE", "interrupted": "STATUS_FAILURE",
          "budget_exhausted": "STATUS_FAILURE"}
"""A trial's outcome as the hparams plugin's session status. ``stopped`` (early, by the
stopping rule: neither a success nor a failure) and anything else is ``STATUS_UNKNOWN``:
TensorBoard has no status for a run stopped on purpose."""


def modules() -> SimpleNamespace:
    """TensorBoard's modules this integration writes with (imported when a campaign names it,
    typed loosely: the library carries no annotations)."""
    names = {
        "event_pb2": "tensorboard.compat.proto.event_pb2",
        "summary_pb2": "tensorboard.compat.proto.summary_pb2",
        "record_writer": "tensorboard.summary.writer.record_writer",
        "hparams": "tensorboard.plugins.hparams.summary_v2",
        "metadata": "tensorboard.plugins.hparams.metadata",
        "plugin_data_pb2": "tensorboard.plugins.hparams.plugin_data_pb2",
        "api_pb2": "tensorboard.plugins.hparams.api_pb2",
    }
    return SimpleNamespace(**{k: importlib.import_module(v) for k, v in names.items()})


def event_file_name(when: float, label: str) -> str:
    """The name an event file labelled *label* is published under (TensorBoard's pattern,
    so it is read, and :data:`WHOLE`'s, so :meth:`TensorBoardIntegration.open` knows it)."""
    return f"events.out.tfevents.{int(when):010d}.dse.{label}"


def hparam_value(value: Any, text: bool) -> bool | int | float | str:
    """*value* as the hparams plugin takes it: a bool, a number or a string (anything else,
    and any value of a param whose domain is text, as its text)."""
    if not text and isinstance(value, bool | int | float | str):
        return value
    return str(value)


def discrete(values: tuple[Any, ...]) -> tuple[list[Any], bool]:
    """A choice param's values as a discrete domain takes them (one type: bools, numbers or
    strings; mixed ones as their text), and whether they became text."""
    if all(isinstance(v, bool) for v in values):
        return list(values), False
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values], False
    if all(isinstance(v, str) for v in values):
        return list(values), False
    return [str(v) for v in values], True


class TensorBoardIntegration(Integration):
    """Writes each trial as a TensorBoard run of ``<logdir>/<campaign>`` (module docstring).

    ``logdir``: where (default ``<workspace>/tensorboard``; a relative path is taken from
    the workspace's parent, the campaign file's directory when the workspace is the default).
    """

    name = "tensorboard"
    version = "1"
    needs = ("tensorboard",)
    install = "pip install 'dse-core[tensorboard]'"

    def __init__(self, *, logdir: str | None = None) -> None:
        self._logdir = text_option("logdir", logdir)
        self._root: Path | None = None
        self._text: set[str] = set()
        self._tb: Any = None

    def open(self, campaign: CampaignExport) -> Iterable[str]:
        """Make ``<logdir>/<campaign>`` and its experiment; remove what a killed writer left
        (files named ``dse-partial.*``, then emptied run directories) and return the keys of
        the event files in place."""
        self._tb = modules()
        root = place(self._logdir, campaign.workspace, "tensorboard") / campaign.name
        root.mkdir(parents=True, exist_ok=True)
        self._root = root
        self._text = {name for name, kind, values in campaign.params
                      if kind == "choice" and values and discrete(values)[1]}
        held: set[str] = set()
        for entry in root.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                held.update(self._tidy(entry))
        if EXPERIMENT not in self._tidy(root):
            now = time.time()
            self._publish(root, EXPERIMENT, now, [self._event(now, 0, self._experiment(campaign))])
        return held

    def write(self, trial: TrialExport) -> None:
        """Publish *trial*'s event file into its run directory."""
        tb, directory = self._tb, self._run_dir(trial)
        directory.mkdir(exist_ok=True)
        params = {k: hparam_value(v, k in self._text) for k, v in trial.params.items()}
        start = tb.hparams.hparams_pb(params, trial_id=trial.key,
                                      start_time_secs=trial.created_at)
        events = [self._event(trial.created_at, 0, start)]
        events += [self._event(when, step, self._scalars(metrics))
                   for step, metrics, when in trial.curve]
        final = self._final(trial)
        if final:
            events.append(self._event(trial.ended_at, trial.last_step, self._scalars(final)))
        events.append(self._event(trial.ended_at, trial.last_step, self._session_end(trial)))
        self._publish(directory, trial.key, trial.ended_at, events)

    # -- what a file holds -----------------------------------------------------------------

    def _experiment(self, campaign: CampaignExport) -> Any:
        """The campaign's experiment summary: a domain per param (a choice's values, a
        number's interval), a metric per objective (its direction as its description)."""
        hp = self._tb.hparams
        hparams = []
        for name, kind, values in campaign.params:
            domain = None
            if kind == "choice" and values:
                domain = hp.Discrete(discrete(values)[0])
            elif kind in ("int", "float") and all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                domain = hp.RealInterval(float(values[0]), float(values[1]))
            hparams.append(hp.HParam(name, domain))
        metrics = [hp.Metric(metric, description=direction)
                   for metric, direction in campaign.objectives]
        return hp.hparams_config_pb(hparams, metrics, time_created_secs=time.time())

    def _final(self, trial: TrialExport) -> dict[str, float]:
        """*trial*'s final metrics not already on its curve, with that value, at its last
        step (a workload's last report is often its result)."""
        at_last = [metrics for step, metrics, _ in trial.curve if step == trial.last_step]
        return {k: v for k, v in numeric(trial.metrics).items()
                if not any(m.get(k) == v for m in at_last)}

    def _session_end(self, trial: TrialExport) -> Any:
        """The hparams plugin's end of *trial*'s session: its status and end time, wrapped
        as the plugin's own summaries are (a null tensor carrying the plugin data)."""
        tb = self._tb
        status = getattr(tb.api_pb2, STATUS.get(trial.status, "STATUS_UNKNOWN"))
        data = tb.plugin_data_pb2.HParamsPluginData(
            session_end_info=tb.plugin_data_pb2.SessionEndInfo(
                status=status, end_time_secs=trial.ended_at))
        summary = tb.summary_pb2.Summary()
        summary.value.add(tag=tb.metadata.SESSION_END_INFO_TAG,
                          metadata=tb.metadata.create_summary_metadata(data),
                          tensor=tb.metadata.NULL_TENSOR)
        return summary

    def _scalars(self, metrics: Mapping[str, Any]) -> Any:
        """A summary of *metrics*' numbers as scalars, one tag per metric."""
        summary_pb2 = self._tb.summary_pb2
        return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=k, simple_value=v)
                                          for k, v in numeric(metrics).items()])

    def _event(self, when: float, step: int, summary: Any) -> Any:
        """An event of *summary* at *step*, written at *when*."""
        return self._tb.event_pb2.Event(wall_time=when, step=step, summary=summary)

    # -- where files go --------------------------------------------------------------------

    def _tidy(self, directory: Path) -> set[str]:
        """The labels of the event files in place in *directory*, once the leftovers of a
        killed writer are removed (and the directory itself, if that emptied it)."""
        labels: set[str] = set()
        for entry in directory.iterdir():
            if entry.name.startswith(PARTIAL):
                remove(entry)
            elif (match := WHOLE.match(entry.name)) is not None:
                labels.add(match["label"])
        if directory != self._root and not any(directory.iterdir()):
            directory.rmdir()
        return labels

    def _run_dir(self, trial: TrialExport) -> Path:
        """*trial*'s run directory: named as the trial, unless that name holds another
        key's file (the same campaign in another record), then suffixed with the digest."""
        assert self._root is not None, "open() first"
        mine = {PARTIAL + trial.key, trial.key}
        directory = self._root / trial.name
        if directory.is_dir():
            for name in os.listdir(directory):
                match = WHOLE.match(name)
                if (match["label"] if match else name) not in mine:
                    return self._root / f"{trial.name}~{trial.key.rsplit('-', 1)[-1]}"
        return directory

    def _publish(self, directory: Path, label: str, when: float, events: list[Any]) -> None:
        """Write *events* as one event file labelled *label* in *directory*, whole or not
        at all (the file version record first, as TensorBoard's writers do)."""
        header = self._tb.event_pb2.Event(wall_time=events[0].wall_time,
                                          file_version="brain.Event:2")
        partial = directory / (PARTIAL + label)
        with partial.open("wb") as handle:
            writer = self._tb.record_writer.RecordWriter(handle)
            for event in (header, *events):
                writer.write(event.SerializeToString())
        publish(partial, directory / event_file_name(when, label))
