"""Weights & Biases (``[integrations.wandb]``): each trial of a campaign as a W&B run of the
campaign's group, with its params as config, its learning curve as history and its outcome as
summary.

A trial's run has an id made from its key (:func:`run_id`), so writing the trial again reaches
the same run, never a second one. Its files go first to
``<dir>/wandb/.dse-partial/<campaign>/<id>/`` and, once W&B has finished the run, the run's
directory (``offline-run-<time>-<id>`` offline, ``run-<time>-<id>`` online), holding the trial's
key in ``dse-key.txt``, is renamed into ``<dir>/wandb/`` whole
(:func:`~dse.integrations._files.publish`): ``wandb sync <dir>/wandb/offline-run-*`` sees only
whole runs, and :meth:`WandbIntegration.open` reads the keys from them and removes the rest.

Online, W&B holds the run on its server as it is written; a controller killed part way
leaves a server run the next write resumes (same id, ``resume="allow"``: W&B keeps the steps
it has and takes the later ones, and the summary anew). The key is also appended to
``<dir>/wandb/dse-written-<campaign>.txt`` once the run is finished (so removing the local
run directories does not write the campaign again); a kill between the two writes the trial
again, into the same run.

Disabled (``mode = "disabled"`` or ``WANDB_MODE=disabled``), nothing is written and nothing
is held: enabled later, every trial is written.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.integrations._files import place, publish, remove, text_option
from dse.model._durable import sync_directory
from dse.plugins._integration import Integration, numeric

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from dse.plugins._integration import CampaignExport, TrialExport

MODES = ("online", "offline", "disabled")
"""The ``mode`` option's values (unset: W&B's own choice, ``WANDB_MODE`` and its settings)."""
KEY_FILE = "dse-key.txt"
"""The file of a published run directory that holds its trial's key."""
RUN_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-.+$")
"""A run directory as W&B names it."""
SETTINGS = {
    "silent": True, "console": "off", "save_code": False, "disable_code": True,
    "disable_git": True, "disable_job_creation": True, "x_disable_stats": True,
    "x_disable_meta": True, "x_disable_machine_info": True, "x_save_requirements": False,
}
"""W&B settings that keep a trial's run quick and quiet: no console capture, no system
metrics, no code, git or package probing (a trial is written long after it ran, from the
controller: none of that would be the trial's)."""
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def run_id(key: str) -> str:
    """The W&B run id of the trial *key*: its letters, digits, ``-`` and ``_`` (anything else
    as ``_``), its last 64 when longer. Still one per key: a key ends with its run, its
    number and a digest that covers the campaign's name."""
    return _ID_UNSAFE.sub("_", key)[-64:]


def belongs(key: str, campaign: str) -> bool:
    """Whether *key* is a key of a trial of *campaign* (``<campaign>-<run>-<number>-<hex>``)."""
    rest = key.removeprefix(f"{campaign}-")
    return rest != key and re.fullmatch(r"\d+-\d+-[0-9a-f]{8}", rest) is not None


def history(trial: TrialExport) -> list[tuple[int, dict[str, Any]]]:
    """*trial*'s history rows by step: its curve (each row at its time, ``_timestamp``), its
    final metrics in the row of its last step (the value of a metric both give is the final
    one: the result)."""
    rows: dict[int, dict[str, Any]] = {}
    for step, metrics, when in trial.curve:
        rows.setdefault(step, {}).update(numeric(metrics), _timestamp=when)
    final = numeric(trial.metrics)
    if final:
        rows.setdefault(trial.last_step, {"_timestamp": trial.ended_at}).update(final)
    return sorted(rows.items())


def summary(trial: TrialExport) -> dict[str, Any]:
    """*trial*'s summary: its final metrics, score and how it ended (what is known of it)."""
    extra = {"score": trial.score, "status": trial.status, "failure": trial.failure,
             "message": trial.message}
    return {**numeric(trial.metrics), **{k: v for k, v in extra.items() if v is not None}}


class WandbIntegration(Integration):
    """Writes each trial as a W&B run (module docstring).

    ``project`` (default: the campaign's name), ``entity`` (default: W&B's), ``mode``
    (``online``, ``offline``, ``disabled``; default: W&B's, ``WANDB_MODE``...), ``dir`` (where
    the runs' files go, under ``wandb/``; default: the workspace; a relative path is taken
    from the workspace's parent) and ``tags`` (added to ``dse`` and the trial's status).
    """

    name = "wandb"
    version = "1"
    needs = ("wandb",)
    install = "pip install 'dse-core[wandb]'"

    def __init__(self, *, project: str | None = None, entity: str | None = None,
                 mode: str | None = None, dir: str | None = None,
                 tags: Sequence[str] = ()) -> None:
        self._project = text_option("project", project)
        self._entity = text_option("entity", entity)
        self._mode = text_option("mode", mode)
        if self._mode is not None and self._mode not in MODES:
            msg = f"mode must be one of {', '.join(MODES)}, not {mode!r}"
            raise TypeError(msg)
        self._dir = text_option("dir", dir)
        if isinstance(tags, str) or not all(
                isinstance(t, str) and 0 < len(t) <= 64 for t in tags):
            msg = "tags must be a list of strings of 1 to 64 characters"
            raise TypeError(msg)
        self._tags = list(tags)
        self._wandb: Any = None
        self._campaign: CampaignExport | None = None
        self._runs = Path()
        self._started = False

    @property
    def _partial(self) -> Path:
        """Where the campaign's runs are written before they are published."""
        assert self._campaign is not None, "open() first"
        return self._runs / ".dse-partial" / self._campaign.name

    @property
    def _ledger(self) -> Path:
        """The keys of the campaign's trials written online, a line each."""
        assert self._campaign is not None, "open() first"
        return self._runs / f"dse-written-{self._campaign.name}.txt"

    def open(self, campaign: CampaignExport) -> Iterable[str]:
        """Remove the campaign's runs a killed writer left unpublished; return the keys of its
        published run directories and of its ledger."""
        self._wandb = importlib.import_module("wandb")
        self._campaign = campaign
        self._runs = place(self._dir, campaign.workspace, ".") / "wandb"
        remove(self._partial)
        self._runs.mkdir(parents=True, exist_ok=True)
        held = set(self._read_ledger())
        for entry in self._runs.iterdir():
            if RUN_DIR.match(entry.name) and (entry / KEY_FILE).is_file():
                held.add((entry / KEY_FILE).read_text(encoding="utf-8").strip())
        return {key for key in held if belongs(key, campaign.name)}

    def write(self, trial: TrialExport) -> None:
        """Write *trial* as a W&B run, then publish its directory (and, online, its key)."""
        assert self._campaign is not None, "open() first"
        wandb, ident = self._wandb, run_id(trial.key)
        partial = self._partial / ident
        remove(partial)
        partial.mkdir(parents=True)
        dse = {"key": trial.key, "config_hash": trial.config_hash, "run": trial.run,
               "number": trial.number, "data_version": trial.data_version,
               "cache_of": trial.cache_of, "record": self._campaign.record}
        self._started = True
        run = wandb.init(
            project=self._project or self._campaign.name, entity=self._entity, mode=self._mode,
            dir=str(partial), group=self._campaign.name, job_type="trial", name=trial.name,
            id=ident, config={**trial.params, "dse": dse},
            tags=["dse", trial.status, *self._tags], reinit="create_new", resume="allow",
            settings=wandb.Settings(**{k: v for k, v in SETTINGS.items()
                                       if k in wandb.Settings.model_fields}))
        mode, directory = run.settings.mode, Path(run.dir).parent
        try:
            for step, row in history(trial):
                run.log(row, step=step, commit=True)
            run.summary.update(summary(trial))
        except BaseException:
            with contextlib.suppress(Exception):
                run.finish(exit_code=1)
            raise
        run.finish(exit_code=0 if trial.status in ("completed", "cached") else 1)
        if mode != "disabled":
            (directory / KEY_FILE).write_text(trial.key + "\n", encoding="utf-8")
            publish(directory, self._runs / directory.name)
            if mode == "online":
                self._append_ledger(trial.key)
        remove(partial)

    def close(self) -> None:
        """End W&B's service process (it would otherwise outlive the runs, until exit),
        unless the program has a W&B run of its own going (``dse.run`` in a notebook that
        logs to W&B itself): that one keeps it."""
        if self._started:
            self._started = False
            if getattr(self._wandb, "run", None) is None:
                self._wandb.teardown()

    def _read_ledger(self) -> list[str]:
        """The keys in the ledger; a last line a kill cut short is cut off."""
        try:
            text = self._ledger.read_bytes()
        except FileNotFoundError:
            return []
        whole = text[: text.rfind(b"\n") + 1]
        if len(whole) != len(text):
            with self._ledger.open("r+b") as handle:
                handle.truncate(len(whole))
        return whole.decode("utf-8").split()

    def _append_ledger(self, key: str) -> None:
        """Add *key* to the ledger, durably."""
        with self._ledger.open("a", encoding="utf-8") as handle:
            handle.write(key + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        sync_directory(self._runs)
