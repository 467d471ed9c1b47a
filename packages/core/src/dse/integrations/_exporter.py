"""Writing a campaign's trials to its integrations (``[integrations]``) beside the engine.

:class:`Exporting` is the run's listener: it tells the listener it wraps everything, and hands
each trial that reached its outcome, once the pass that recorded it committed, to a
:class:`Copier` — a thread of its own, so the engine never waits on MLflow or W&B. The copier
reads the trial back from the record (the truth), and when it starts it asks each integration
what it holds already and writes whatever trial of the campaign it lacks, from every run of the
record: what a controller killed part way did not write is written by the next one, and
nothing is written twice (:class:`dse.Integration`'s contract).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from dse.engine._engine import EngineListener
from dse.model._errors import ConfigError, PluginError
from dse.model._space import Categorical
from dse.model._types import CampaignStatus, TrialStatus
from dse.plugins._integration import CampaignExport, TrialExport, export_key, numeric

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from dse.campaign._model import Campaign
    from dse.engine._engine import Engine
    from dse.model._outcome import CampaignResult, Retry, TrialEnd
    from dse.plugins._integration import Integration
    from dse.record._base import Storage
    from dse.record._records import CampaignRun, Trial

FINAL = frozenset({TrialStatus.COMPLETED, TrialStatus.FAILED, TrialStatus.STOPPED,
                   TrialStatus.CACHED, TrialStatus.INTERRUPTED, TrialStatus.BUDGET_EXHAUSTED})
"""The outcomes written: a cancelled trial is not one (a later run resumes it), and a trial
stopped early is one only once its run can promote it no more (:func:`written_now`)."""

RESUMABLE = frozenset({CampaignStatus.RUNNING, CampaignStatus.CANCELLED})
"""A run in these may go on (``dse run`` continues it) and promote a trial it stopped."""

RUN_END = 0
"""The number handed over with a run's id when the run ended (no trial has it): its trials
stopped early are then written."""

CATCH_UP = "`dse sync` (or the campaign's next `dse run`)"
"""What writes the trials a controller did not, as its messages say."""

FINISH_WAIT_S = 60.0
"""How long the end of a run waits for the trials not yet written (then says how many)."""


def campaign_export(campaign: Campaign, record: str) -> CampaignExport:
    """What an integration is told of *campaign* (its record named *record*)."""
    params: list[tuple[str, str, tuple[Any, ...]]] = []
    for p in campaign.space:
        if isinstance(p, Categorical):
            params.append((p.name, "choice", tuple(p.choices)))
        else:
            params.append((p.name, p.kind, (p.low, p.high)))
    return CampaignExport(
        name=campaign.name, workspace=campaign.workspace, record=record, params=tuple(params),
        objectives=tuple((o.metric, o.direction.value) for o in campaign.objectives))


def trial_exports(store: Storage, run: CampaignRun, trials: Sequence[Trial]) -> list[TrialExport]:
    """*trials* (of *run*) as the integrations are given them: their curves and the names
    of the trials cache hits reuse read in one query each."""
    rows = [t.id for t in trials]
    curves = store.stops.trial_progress(rows)
    originals = store.reads.trial_refs([t.cache_of for t in trials if t.cache_of is not None])
    out = []
    for t in trials:
        # The record gives a curve by attempt and step: a step a later attempt reported again
        # (a retry from a checkpoint) keeps its latest point.
        latest = {p.step: p for p in curves.get(t.id, [])}
        points = [latest[step] for step in sorted(latest)]
        original = originals.get(t.cache_of) if t.cache_of is not None else None
        out.append(TrialExport(
            key=export_key(run.name, run.id, run.created_at, t.number),
            name=f"{run.name}-{run.id}-{t.number}", campaign=run.name, run=run.id,
            number=t.number, config_hash=t.config_hash, params=t.params, status=t.status.value,
            failure=t.failure.value if t.failure is not None else None, message=t.message,
            metrics=numeric(t.metrics), score=t.score,
            curve=tuple((p.step, numeric(p.metrics), p.at) for p in points),
            created_at=t.created_at, ended_at=t.ended_at or t.created_at,
            data_version=t.data_version_read or t.data_version,
            cache_of=original.trial_id if original is not None else None))
    return out


def written_now(run: CampaignRun, trial: Trial, latest: int) -> bool:
    """Whether *trial* of *run* is to be written now: it reached its outcome, and if it was
    stopped early, its run can promote it no more (ended for good, or not the campaign's
    latest run, *latest*): a trial written stopped and promoted after would be held twice."""
    if trial.status not in FINAL:
        return False
    return (trial.status is not TrialStatus.STOPPED or run.status not in RESUMABLE
            or run.id != latest)


@dataclass(slots=True)
class Target:
    """One integration as the copier drives it: what it holds, and whether it still works."""

    name: str
    integration: Integration
    held: set[str] = field(default_factory=set)
    """The keys of the trials it holds whole."""
    broken: str | None = None
    """Why it was given up on in this controller (its first error), or ``None``."""


class Copier:
    """The thread that writes trials to the integrations (every call on an integration is
    made from it). The engine's thread hands it (run, number) pairs with :meth:`give` and
    reads what it has to say with :meth:`notices`."""

    def __init__(self, campaign: CampaignExport, targets: Sequence[Target],
                 reopen: Callable[[], Storage]) -> None:
        self.campaign = campaign
        self.targets = list(targets)
        self._reopen = reopen
        self._todo: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        self._given = self._settled = 0
        """Trials given; trials written (or left to the next controller's catch-up)."""
        self._notices: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._main, name="dse-integrations", daemon=True)
        self.written = 0
        """Trials written (to at least one integration) by this controller."""
        self.keep_store = False
        """The store :meth:`sync` is given is the caller's to close."""

    def start(self) -> None:
        """Open the integrations and write what they lack, then follow the run."""
        self._thread.start()

    def give(self, trials: Iterable[tuple[int, int]]) -> None:
        """Write these trials (run, number), recorded and committed; (run, :data:`RUN_END`):
        the run ended, write its trials stopped early."""
        for item in trials:
            self._given += item[1] != RUN_END
            self._todo.put(item)

    def sync(self) -> int:
        """Open the integrations, write what they lack and close them, in this thread
        (``dse sync``); the number of trials written."""
        self._todo.put(None)
        self._main()
        return self.written

    def notices(self) -> list[str]:
        """What it has to say since last asked (an integration given up on)."""
        with self._lock:
            said, self._notices = self._notices, []
        return said

    def finish(self, wait: float) -> int:
        """Write what was given, waiting up to *wait* seconds, then close the integrations;
        the number of trials given and not written (the next controller writes them)."""
        self._todo.put(None)
        self._thread.join(wait)
        return self._given - self._settled if self._thread.is_alive() else 0

    # -- the thread ---------------------------------------------------------------------

    def _main(self) -> None:
        store = None
        try:
            store = self._reopen()
            self._open()
            self._catch_up(store)
            while (item := self._todo.get()) is not None:
                self._write_given(store, *item)
                self._settled += item[1] != RUN_END
        except Exception as exc:  # noqa: BLE001 - the run goes on; the next one catches up
            self._say(f"integrations: stopped writing ({type(exc).__name__}: {exc});"
                      f" {CATCH_UP} writes what is missing")
        finally:
            for target in self.targets:
                self._call(target, target.integration.close)
            if store is not None and not self.keep_store:
                store.close()

    def _open(self) -> None:
        for target in self.targets:
            held = self._call(target, target.integration.open, self.campaign)
            if held is not None:
                target.held = set(cast("Iterable[str]", held))

    def _catch_up(self, store: Storage) -> None:
        """Write every trial of the campaign's runs to be written now that an integration
        lacks."""
        runs = [r for r in store.reads.campaigns() if r.name == self.campaign.name]
        latest = max((r.id for r in runs), default=0)
        for run in runs:
            self._write_run(store, run, latest)

    def _write_run(self, store: Storage, run: CampaignRun, latest: int) -> None:
        """Write the trials of *run* to be written now that an integration lacks."""
        if not any(t.broken is None for t in self.targets):
            return
        for page in store.summaries.trial_pages(run.id):
            missing = [t for t in page if written_now(run, t, latest) and any(
                export_key(run.name, run.id, run.created_at, t.number) not in g.held
                for g in self.targets if g.broken is None)]
            if missing:
                self._write(trial_exports(store, run, missing))

    def _write_given(self, store: Storage, run_id: int, number: int) -> None:
        """Write trial *number* of run *run_id* (the controller's own run: its latest), or,
        for :data:`RUN_END`, the run's trials it has not written (its trials stopped early,
        once it can promote them no more)."""
        run = store.reads.campaign(run_id)
        if run is None:
            return
        if number == RUN_END:
            self._write_run(store, run, run.id)
            return
        trial = None
        with contextlib.suppress(ConfigError):  # not in the record: the next catch-up's
            trial = store.reads.find_trial(f"{run.name}-{run.id}-{number}")[1]
        if trial is not None and written_now(run, trial, run.id):
            self._write(trial_exports(store, run, [trial]))

    def _write(self, exports: Iterable[TrialExport]) -> None:
        for export in exports:
            wrote = False
            for target in self.targets:
                if target.broken is None and export.key not in target.held:
                    self._call(target, target.integration.write, export)
                    if target.broken is None:
                        target.held.add(export.key)
                        wrote = True
            self.written += wrote

    def _call(self, target: Target, method: Callable[..., object], *args: object) -> object:
        """Call *method* of *target*; its first failure gives it up for this controller."""
        if target.broken is not None:
            return None
        try:
            return method(*args)
        except Exception as exc:  # noqa: BLE001 - one integration failing stops only itself
            target.broken = f"{type(exc).__name__}: {exc}"
            self._say(f"integrations.{target.name}: {target.broken}; nothing more is written"
                      f" to it by this controller ({CATCH_UP} writes what it lacks)")
            return None

    def _say(self, message: str) -> None:
        with self._lock:
            self._notices.append(message)


class Exporting(EngineListener):
    """The run's listener when its campaign has integrations: *inner* is told everything;
    each ended trial is written to the integrations by a :class:`Copier`.

    :param targets: the integrations, built (:func:`dse.integrations.build_targets`).
    :param reopen: a reader of the run's record, for the copier's thread.
    :param wait: how long the end of the run waits for trials not yet written.
    """

    def __init__(self, inner: EngineListener, campaign: Campaign, targets: Sequence[Target],
                 reopen: Callable[[], Storage], *, wait: float = FINISH_WAIT_S) -> None:
        self.inner = inner
        self.campaign = campaign
        self.targets = targets
        self.reopen = reopen
        self.wait = wait
        self.copier: Copier | None = None
        self._ended: list[tuple[int, int]] = []

    def on_start(self, engine: Engine) -> None:
        self.inner.on_start(engine)
        self.copier = Copier(campaign_export(self.campaign, engine.store.where), self.targets,
                             self.reopen)
        self.copier.start()

    def on_trial_ended(self, engine: Engine, end: TrialEnd) -> None:
        self.inner.on_trial_ended(engine, end)
        if end.status in FINAL:
            self._ended.append((engine.campaign_id, end.number))

    def on_retry(self, engine: Engine, retry: Retry) -> None:
        self.inner.on_retry(engine, retry)

    def on_pass(self, engine: Engine) -> None:
        self.inner.on_pass(engine)
        self._hand_over(engine)

    def on_alert(self, engine: Engine, message: str) -> None:
        self.inner.on_alert(engine, message)

    def on_finish(self, engine: Engine, result: CampaignResult) -> None:
        if self.copier is not None:
            self._ended.append((engine.campaign_id, RUN_END))
            self._hand_over(engine)
            started = time.monotonic()
            left = self.copier.finish(self.wait)
            self._hand_over(engine)
            if left:
                waited = time.monotonic() - started
                self.inner.on_alert(engine, (
                    f"integrations: {left} trial(s) not written after waiting {waited:.0f} s;"
                    f" {CATCH_UP} writes them"))
        self.inner.on_finish(engine, result)

    def _hand_over(self, engine: Engine) -> None:
        """Give the copier the trials ended by the committed passes; say what it said."""
        assert self.copier is not None
        if self._ended:
            self.copier.give(self._ended)
            self._ended = []
        for message in self.copier.notices():
            self.inner.on_alert(engine, message)


def build_targets(campaign: Campaign, lookup: Callable[[str], type]) -> list[Target]:
    """The integrations *campaign* names, built (*lookup*: the plugin manager's
    ``integration_class``); a bad name or option is a :class:`~dse.ConfigError` naming it."""
    where = str(campaign.source or "<campaign>")
    targets = []
    for name, opts in campaign.integrations.items():
        try:
            cls = lookup(name)
        except PluginError as exc:
            raise PluginError(f"{where}: integrations.{name}: {exc}") from None
        built = cast("type[Integration]", cls).from_options(
            dict(opts), where=f"{where}: integrations.{name}")
        targets.append(Target(name, built))
    return targets


def sync_integrations(campaign: Campaign, store: Storage,
                      lookup: Callable[[str], type]) -> tuple[int, list[str]]:
    """Write to *campaign*'s integrations every ended trial of its runs in *store* that they
    lack (``dse sync``): the number written, and what went wrong (one line each)."""
    copier = Copier(campaign_export(campaign, store.where), build_targets(campaign, lookup),
                    lambda: store)
    copier.keep_store = True
    written = copier.sync()
    return written, copier.notices()
