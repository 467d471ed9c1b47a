"""Ask and tell: a Python loop that evaluates its trials itself (:func:`ask_tell`).

``loop.ask()`` hands the loop a trial the agent proposed — claimed, its budget reserved, the
attempt recorded — and ``loop.tell(trial, metrics)`` records how it went. Nothing here is a
second engine: the loop's trials run on the ``ask`` backend (:mod:`dse.api._asked`), whose
jobs wait on disk for an asker, and every ``ask``/``tell`` drives the campaign's ordinary
engine through its per-pass API (poll, apply, dispatch, commit; the pool's grant, submit)
under the campaign's lock (:class:`~dse.record._lock.CampaignLock`), released between calls.
Several processes, each with a loop of its own, thus take turns being the campaign's
controller. A process keeps its engine between its calls while nobody else drove the run
since (the run's latest ``controller`` event is the one its own engine wrote when it opened
the run); otherwise it builds the engine again and resumes the run from the record, as
``dse run`` resumes an unfinished run. Deduplication, claims, budgets, retries, stopping rules
and the record are the engine's, as for any trial.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import random
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.api._api import as_toml, load, warner
from dse.api._asked import AskBackend, renew, stop_reason
from dse.api._listeners import Warnings
from dse.model._errors import ConfigError, LockedError
from dse.model._types import CampaignStatus, TrialStatus
from dse.record._lock import CampaignLock, LockHolder
from dse.trial import append_progress

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import FrameType, TracebackType

    from dse.api._asked import Ticket
    from dse.campaign._model import Campaign
    from dse.engine._engine import Engine
    from dse.pool._pool import Pool
    from dse.record._base import Storage
    from dse.report._readback import Results

__all__ = ["AskTell", "AskedTrial", "ask_tell"]

log = logging.getLogger("dse.ask")

LONGEST_WAIT = 1.0
"""The longest wait, in seconds, of an ``ask`` between two looks for a ready trial."""
LOCK_PATIENCE = 10.0
"""Seconds an ``ask`` or ``tell`` waits for the campaign's lock before it says so (once)."""

_MUTEXES: dict[tuple[str, str], threading.RLock] = {}
_MUTEXES_LOCK = threading.Lock()


def _mutex(campaign: Campaign) -> threading.RLock:
    """The lock of this process's loops of *campaign* (their turns, one at a time: the
    campaign's lease knows no thread)."""
    key = (str(campaign.workspace), campaign.name)
    with _MUTEXES_LOCK:
        return _MUTEXES.setdefault(key, threading.RLock())


class AskedTrial:
    """A trial handed to a loop by :meth:`AskTell.ask`: evaluate its :attr:`params`, then
    :meth:`AskTell.tell` how it went. While it runs, :meth:`report` adds points to its
    learning curve (and is a word from its asker: its expiry starts again), and
    :attr:`should_stop` says whether it must end without its tell (a stopping rule stopped
    it, it ran past its time limit, its run was stopped)."""

    __slots__ = ("_check", "_checked", "_reported", "ticket")

    def __init__(self, ticket: Ticket, check: Callable[[], None]) -> None:
        self.ticket = ticket
        """What the backend handed out (job id, token...): what :meth:`AskTell.tell` names."""
        self._check = check
        self._reported = False
        self._checked = time.monotonic()

    @property
    def params(self) -> dict[str, Any]:
        """The params to evaluate (coerced to the space's types; a copy, the caller's)."""
        return dict(self.ticket.params)

    @property
    def number(self) -> int:
        """The trial's number in its run (``dse show <campaign>:<number>``)."""
        return self.ticket.number

    @property
    def trial_id(self) -> str:
        """``<campaign>-<run>-<number>``, the same for every attempt."""
        return self.ticket.trial_id

    @property
    def attempt(self) -> int:
        """The attempt, from 1: a trial whose earlier asker died is asked again as the next."""
        return self.ticket.attempt

    @property
    def dir(self) -> Path:
        """The trial's directory (its ``result.json``, ``progress.jsonl``...)."""
        return self.ticket.trial_dir

    @property
    def checkpoint_dir(self) -> Path:
        """The directory kept across the trial's attempts: an attempt asked after another
        asker died finds there what that one saved."""
        return self.ticket.trial_dir / "checkpoint"

    @property
    def data_version(self) -> str | None:
        """The data version the trial is dispatched against (``None``: no ``[data]``)."""
        return self.ticket.data_version

    def report(self, step: int, /, **metrics: float) -> None:
        """Add a point to the trial's learning curve: *metrics* after *step* (a whole number
        that grows), as ``dse.trial.report_progress`` adds it; the campaign's stopping rule
        judges the curve. It is a word from the asker too: its expiry starts again.

        :raises ValueError: *step* is not a whole number from 0 to 2**63 - 1.
        """
        append_progress(self.dir, step, metrics, attempt=self.attempt)
        renew(self.dir, self.attempt, self.ticket.token)
        self._reported = True

    @property
    def should_stop(self) -> bool:
        """Whether the trial must end without its tell: stopped by the campaign's stopping
        rule, past its time limit, its run stopped or given to another asker. After a
        :meth:`report`, or a second after the last look, the campaign looks first (a pass of
        the campaign, under its lock: its rule judges the new points); otherwise it is one
        read of the trial's files."""
        if stop_reason(self.dir, self.attempt) is None and (
                self._reported or time.monotonic() - self._checked >= LONGEST_WAIT):
            self._check()
            self._reported, self._checked = False, time.monotonic()
        return self.stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        """Why the trial must end without its tell, in words; ``None`` while it may go on."""
        return stop_reason(self.dir, self.attempt)

    def __repr__(self) -> str:
        return f"<AskedTrial {self.trial_id} attempt {self.attempt}: {self.params}>"


class AskTell:
    """The loop of a campaign whose trials the caller evaluates itself: :meth:`ask` a trial,
    evaluate it, :meth:`tell` how it went (see :func:`ask_tell`). A context manager:
    leaving it closes the loop (:meth:`close`)."""

    def __init__(
        self, campaign: Mapping[str, Any] | str | os.PathLike[str], *,
        workspace: str | os.PathLike[str] | None = None, record: str | None = None,
        expire: float | None = None, fresh: bool = False,
    ) -> None:
        from dse.plugins._plugins import PluginManager
        from dse.record._open import record_url

        if expire is not None and not (isinstance(expire, int | float) and expire > 0
                                       and math.isfinite(expire)):
            raise ConfigError(f"dse.ask_tell: expire: expected a positive number of seconds,"
                              f" got {expire!r}")
        self.campaign: Campaign = ask_campaign(campaign, workspace)
        """The campaign, as read and checked."""
        self.expire = None if expire is None else float(expire)
        """Seconds an asked trial may go without a word from its asker (``ask``, a
        ``report``, its ``tell``) before another may be asked it; ``None``: only a dead
        asker on this host, or the trial's time limit, ends it."""
        self._url = record_url(record, self.campaign.record)
        self._fresh = fresh
        self._plugins = PluginManager()
        self._warn = warner(_caller())
        self._store: Storage | None = None
        self._engine: Engine | None = None
        self._pool: Pool | None = None
        self._run: int | None = None
        self._mine = 0
        """The id of the ``controller`` event this process's engine wrote when it opened."""
        self._over = False
        self._closed = False
        self._asked: dict[str, AskedTrial] = {}
        self._mutex = _mutex(self.campaign)

    # -- the loop ---------------------------------------------------------------------------

    def ask(self, timeout: float | None = None) -> AskedTrial | None:
        """The next trial to evaluate: proposed by the agent, claimed, its budget reserved,
        its attempt recorded. Waits (looking again at most every second) while every slot of
        ``max_parallelism`` is asked or the agent waits for results; ``None`` once the
        campaign is over (its budget spent, the agent exhausted, ``max_trials`` reached, the
        run stopped).

        :param timeout: seconds to wait at most; ``None``: as long as it takes.
        :raises TimeoutError: no trial became ready within *timeout*.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._turn() as engine:
                if engine is None:
                    return None
                self._advance(engine)
                if engine.finished is not None:
                    return None
                backend = _ask_backend(engine)
                ticket = backend.take(LockHolder.current(), self.expire)
                if ticket is not None:
                    trial = AskedTrial(ticket, self._check)
                    self._asked[ticket.job_id] = trial
                    return trial
                pause = min(max(engine.wait_plan()[0], 0.01), LONGEST_WAIT)
            if deadline is not None and time.monotonic() + pause > deadline:
                raise TimeoutError(f"campaign {self.campaign.name!r}: no trial to ask within"
                                   f" {timeout:g} s")
            time.sleep(pause * random.uniform(0.8, 1.2))  # spreads the askers

    def tell(self, trial: AskedTrial, value: float | Mapping[str, float] | None = None, *,
             failure: str | BaseException | None = None) -> TrialStatus:
        """Record how *trial* went, before returning: *value* (a number: the first objective's
        metric; a dict: the metrics), or *failure* (words, or the exception it raised) for a
        trial that failed — a result about its configuration, never retried. Scored as a
        command's ``result.json`` is: a missing objective metric, a NaN or an infinity
        records it failed (``missing_metric``, ``invalid_metric``).

        :returns: how the trial stands in the record: ``completed``, ``failed``; or, when it
            ended before this tell (nothing of the tell is then written), ``stopped`` (the
            stopping rule), ``budget_exhausted`` (its time limit), ``cancelled`` (its run
            stopped), ``interrupted`` (given to another asker: its expiry passed).
        :raises ValueError: both or neither of *value* and *failure*; no objective metric
            to name a number.
        """
        metrics, words = self._told(value, failure)
        with self._turn() as engine:
            if engine is not None:
                self._advance(engine)  # what ended since first: a stop, an expiry
                if engine.finished is None and _ask_backend(engine).tell(trial.ticket, metrics,
                                                                         words):
                    self._advance(engine)
            status = self._standing(trial)
        self._asked.pop(trial.ticket.job_id, None)
        return status

    def close(self) -> None:
        """Close the loop: the trials it asked and did not tell are given back (their attempts
        recorded ``preempted``: each trial is asked again, by another loop, as its next
        attempt); the record is closed. The run goes on for the other loops; it ends when the
        campaign does."""
        with self._mutex:
            if self._closed:
                return
            untold = [t.ticket for t in self._asked.values()]
            if untold and not self._over:
                with self._turn() as engine:
                    if engine is not None and engine.finished is None:
                        backend = _ask_backend(engine)
                        for ticket in untold:
                            backend.give_back(ticket)
                        self._advance(engine)
            self._asked.clear()
            self._closed = True
            if self._store is not None:
                self._store.close()

    def results(self) -> Results:
        """The loop's run as the record has it now (:func:`dse.load`)."""
        return load(self.campaign.workspace, campaign=self.campaign.name, run=self._run,
                    record=self._url)

    @property
    def run_id(self) -> int | None:
        """The id of the run the loop asks trials of (``None`` before its first call)."""
        return self._run

    @property
    def done(self) -> bool:
        """Whether the loop knows the campaign is over (:meth:`ask` returned ``None``)."""
        return self._over

    def __enter__(self) -> AskTell:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<AskTell {self.campaign.name} run {self._run}>"

    # -- a turn: this process drives the campaign --------------------------------------------

    @contextlib.contextmanager
    def _turn(self) -> Iterator[Engine | None]:
        """The campaign's lock held and its engine current (``None`` once the run is over);
        released on leaving."""
        with self._mutex:
            if self._closed:
                raise ValueError(f"{self!r} is closed")
            lock, engine = self._enter()
            try:
                yield engine
            finally:
                self._leave(lock)

    def _enter(self) -> tuple[CampaignLock, Engine | None]:
        """Take the campaign's lock (waiting for another process's turn to end) and bring
        the engine up to date."""
        from dse.record._open import lease_state

        built, url = self.campaign, self._url
        since, said = time.monotonic(), False
        while True:
            lock = CampaignLock(built.workspace, built.name, lease=lambda: lease_state(
                built.workspace, url, built.name))
            try:
                lock.acquire()
                if lock.notice is not None:
                    log.info("%s", lock.notice)
                try:
                    return lock, self._current()
                except LockedError:
                    self._leave(lock)
                    raise
            except LockedError as exc:
                if not said and time.monotonic() - since > LOCK_PATIENCE:
                    said = True
                    log.warning("waiting for campaign %r: %s", built.name, exc)
            time.sleep(random.uniform(0.005, 0.03))

    def _leave(self, lock: CampaignLock) -> None:
        try:
            if self._store is not None:
                self._store.release_lease(self.campaign.name)
        finally:
            lock.release()

    def _current(self) -> Engine | None:
        """This process's engine, kept while nobody else drove the run, else built again and
        the run resumed; ``None`` once the run is over."""
        from dse.engine._spec import hold_campaign

        store = self._record()
        if self._over:
            return None
        engine = self._engine
        if self._run is not None:
            row = store.reads.campaign(self._run)
            if row is None or row.status is not CampaignStatus.RUNNING:
                self._over, self._engine = True, None
                return None
            if (engine is not None and engine.finished is None
                    and _latest_controller(store, self._run) == self._mine):
                hold_campaign(store, self.campaign, engine.backend.default_poll_interval)
                return engine
        return self._build(store)

    def _record(self) -> Storage:
        if self._store is None:
            from dse.record._open import writer

            store = writer(self.campaign.workspace, self._url, connect=False, say=self._warn)
            store.connect()
            self._store = store
        return self._store

    def _build(self, store: Storage) -> Engine:
        """A new engine of the campaign on a new ask backend, the run opened (resumed, or new
        on the loop's first call) and its opening committed."""
        from dse.launch._build import build_engine
        from dse.pool._pool import Pool
        from dse.pool._poolfile import PoolConfig

        self._engine = None
        engine = build_engine(self.campaign, store=store, plugins=self._plugins,
                              listener=Warnings(self._warn), backend=AskBackend())
        engine.reuse = not self._fresh
        resume = self._run if self._run is not None else self._choose(store)
        pool = Pool(PoolConfig({"slots": self.campaign.max_parallelism}))
        pool.join(engine)
        pool.start()
        engine.open(resume=resume)
        if resume is not None:
            pool.recall([engine])
        engine.commit()
        self._engine, self._pool, self._run = engine, pool, engine.campaign_id
        self._mine = _latest_controller(store, engine.campaign_id)
        return engine

    def _choose(self, store: Storage) -> int | None:
        """The run a loop's first call continues, as ``dse run`` chooses it: the campaign's
        latest unfinished run when the campaign is the same (and not *fresh*); ``None``: a new
        run, once a run left running is closed."""
        from dse.engine._spec import resumable_run

        choice = resumable_run(store, self.campaign, fresh=self._fresh)
        if choice.line:
            log.info("%s", choice.line)
        if choice.supersede is not None:
            self._supersede(store, choice.supersede)
        return choice.resume

    def _supersede(self, store: Storage, run: int) -> None:
        """Close *run* (left running, not continued): its asked trials are cancelled (their
        loops' tells are not written, their next ``ask`` returns ``None``)."""
        from dse.launch._build import closing_engine

        closer = closing_engine(self.campaign, store=store, plugins=self._plugins,
                                listener=Warnings(self._warn), backend=AskBackend())
        closer.open(resume=run)
        closer.cancel_all()
        closer.close()

    def _advance(self, engine: Engine) -> None:
        """One pass of the engine (and another while cancels it asked are unconfirmed), as the
        pool's loop runs it; the run ended when the engine ends it. A failure of the engine
        ends the run as it ends ``dse run``'s; a ``KeyboardInterrupt`` leaves the record as it
        is (the next turn, of any loop, resumes the run)."""
        try:
            for _ in range(3):
                if not self._pass(engine):
                    return
        except KeyboardInterrupt:
            self._engine = None
            raise
        except BaseException as exc:
            self._engine = None
            if engine.finished is None:
                engine.crash(exc)
            raise

    def _pass(self, engine: Engine) -> bool:
        """One pass; whether another is due (cancels to confirm)."""
        if engine.finished is not None:
            self._over = True
            return False
        if not engine.poll_pass():
            engine.close()
            self._over = True
            return False
        pool, backend = self._pool, _ask_backend(engine)
        assert pool is not None
        pool.grant([engine], engine.clock.time())
        if not pool.trivial:
            engine.commit()
        before = len(backend.outstanding)
        engine.submit_granted()
        if len(backend.outstanding) != before:
            engine.commit()  # their job ids: another process may take the next turn
        engine.listener.on_pass(engine)
        if engine.stop_requested() or not engine.is_live():
            if engine.stop_requested():
                engine.cancel_all()
            engine.close()
            self._over = True
            return False
        return backend.cancelling()

    def _check(self) -> None:
        """A pass, for a trial that reported points: the stopping rule judges them."""
        with self._turn() as engine:
            if engine is not None:
                self._advance(engine)

    # -- what a tell says ----------------------------------------------------------------------

    def _told(self, value: float | Mapping[str, float] | None,
              failure: str | BaseException | None) -> tuple[dict[str, Any] | None, str | None]:
        """The metrics of a tell (or ``None``) and its failure's words (or ``None``)."""
        if (value is None) == (failure is None):
            raise ValueError("tell(trial, value) or tell(trial, failure=...): one of them")
        if failure is not None:
            words = (f"{type(failure).__name__}: {failure}" if isinstance(failure, BaseException)
                     else str(failure))
            return None, words or "failed"
        if isinstance(value, Mapping):
            return {str(k): v for k, v in value.items()}, None
        metric = next((o.metric for o in self.campaign.objectives
                       if not o.metric.startswith("spend.")), None)
        if metric is None:
            raise ValueError(f"campaign {self.campaign.name!r} has no objective metric to name"
                             f" {value!r}; tell a dict of metrics")
        return {metric: value}, None

    def _standing(self, trial: AskedTrial) -> TrialStatus:
        """How *trial* stands in the record after its tell: a trial asked again (as a later
        attempt) after this one ended is ``interrupted`` for this asker."""
        store = self._record()
        _, row = store.reads.find_trial(trial.trial_id)
        if row.status is TrialStatus.RUNNING:
            return TrialStatus.INTERRUPTED
        return row.status


def ask_tell(
    campaign: Mapping[str, Any] | str | os.PathLike[str], *,
    workspace: str | os.PathLike[str] | None = None, record: str | None = None,
    expire: float | None = None, fresh: bool = False,
) -> AskTell:
    """A loop that asks trials of *campaign* and tells their results (:class:`AskTell`).

    :param campaign: a dict shaped as a campaign file, or a campaign file's path; it has no
        ``[environment] command`` (the loop evaluates each trial) and its ``backend``, if
        named, is ``"ask"``.
    :param workspace: the record's directory (default: the campaign's).
    :param record: a ``postgresql://`` URL, the record (else ``DSE_RECORD``, else the
        workspace's ``dse.sqlite``).
    :param expire: seconds an asked trial may go without a word from its asker before it is
        taken for lost and asked again (``None``: only a dead asker on this host, or the
        trial's time limit, ends it).
    :param fresh: start a new run that reuses no recorded result (``dse run --fresh``),
        closing the latest run if it did not finish; for one loop (the loops started beside
        it leave it out, or each would close the run of the one before).
    :raises ConfigError: the campaign is refused (nothing is written).
    """
    return AskTell(campaign, workspace=workspace, record=record, expire=expire, fresh=fresh)


def ask_campaign(campaign: Mapping[str, Any] | str | os.PathLike[str],
                 workspace: str | os.PathLike[str] | None) -> Campaign:
    """The campaign of an ask/tell loop, checked: no command, the ``ask`` backend, and (unless
    it declares them) the dependencies of the Python that runs the loop."""
    from dse.campaign._campaign import campaign_from_dict
    from dse.campaign._campaignfile import read_campaign_file

    source = None
    if isinstance(campaign, str | os.PathLike):
        source = Path(os.fspath(campaign))
        data = read_campaign_file(source)
    else:
        data = as_toml(campaign)
    where = str(source) if source is not None else "<campaign>"
    top = dict(data.get("campaign") or {})
    env = data.get("environment")
    if isinstance(env, dict) and env.get("command"):
        raise ConfigError(f"{where}: environment.command: the loop that asks the trials"
                          " evaluates them; an ask/tell campaign runs no command")
    if top.get("backend", "ask") != "ask":
        raise ConfigError(f"{where}: campaign.backend: {top['backend']!r}: the trials of an"
                          " ask/tell loop wait for the loops that ask them (backend \"ask\");"
                          " leave it out")
    top["backend"] = "ask"
    built = campaign_from_dict({**data, "campaign": top}, source=source, detect=True,
                               workspace=None if workspace is None else Path(workspace))
    if built.backend_options:
        raise ConfigError(f"{where}: backend.ask: takes no options (give expire= to"
                          " dse.ask_tell)")
    if built.integrations:
        raise ConfigError(f"{where}: integrations: not written by an ask/tell loop yet; copy"
                          " its run afterwards with dse sync")
    if built.environment.dependencies is None:
        built = dataclasses.replace(built, environment=dataclasses.replace(
            built.environment, dependencies=this_python()))
    return built


def this_python() -> Any:
    """The dependencies of the Python running this process, as a trial of it stamps them
    (``dse.trial.environment``): the loop's, which evaluates the trials."""
    from dse.campaign._deps import Dependencies, environment_digest
    from dse.trial import environment

    found = environment()
    python, dists = found.get("python"), dict(found.get("distributions", {}))
    return Dependencies(digest=environment_digest({"python": python, "distributions": dists}),
                        program=sys.executable, python=python, distributions=dists)


def _latest_controller(store: Storage, run: int) -> int:
    """The id of run *run*'s latest ``controller`` event (0: none)."""
    events = store.reads.events(run, "controller")
    return events[-1].id if events else 0


def _ask_backend(engine: Engine) -> AskBackend:
    backend = engine.backend
    assert isinstance(backend, AskBackend)
    return backend


def _caller() -> FrameType:
    """The frame of the user's code that made the loop (out of this module)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame
