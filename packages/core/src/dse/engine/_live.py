"""The live trial table: the trials of a run that are not over, and the results it may reuse.

A :class:`LiveTrial` is the controller's working copy of one trial (the record holds the
durable one). :class:`TrialTable` is the only owner of where each live trial is — queued for
the pool's resources, running under a job id, waiting to be retried — and of the configs a
new proposal may reuse (among them the trials other controllers of the workspace run that
trials of this run wait on); it changes only through its named transitions.

The table holds what the live campaign needs, never every trial it has seen: a trial leaves
it when it ends, and an ended trial's reusable result stays only until the pass that ended it
is committed (:meth:`TrialTable.recorded`); from then on the record answers for it (the
claims look results up by config hash, through an index). The controller's memory does not
grow with the campaign.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.engine._retry import AttemptHistory
from dse.model._budget import Spend
from dse.model._hashing import ConfigHasher
from dse.model._types import TrialStatus
from dse.trial import CHECKPOINT_MARK

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from dse.campaign._data import DataVersioner
    from dse.model._types import FailureClass, JobSpec
    from dse.record._records import Attempt, Trial


@dataclass(slots=True)
class LiveTrial:
    """One trial of a run as the controller works on it."""

    row_id: int
    """Its row in the record."""
    number: int
    """Trial number in its run."""
    proposal: int
    """The agent's proposal it answers (0: a baseline run; -1: a given baseline trial)."""
    batch: int
    """The dispatch batch (wave) it was made in."""
    params: dict[str, Any]
    """Its coerced params."""
    config_hash: str
    """Its identity."""
    trial_id: str = ""
    """``<campaign>-<run>-<number>``: names its jobs (empty for a cache hit)."""
    spec: JobSpec | None = None
    """The current attempt's job."""
    attempt_row: int | None = None
    """The current attempt's row."""
    job_id: str | None = None
    """The current attempt's job id, once submitted."""
    status: TrialStatus = TrialStatus.RUNNING
    metrics: Mapping[str, float] | None = None
    score: float | None = None
    scores: tuple[float, ...] | None = None
    """In a Pareto campaign, its score of each objective (:attr:`score` is the first)."""
    failure: FailureClass | None = None
    message: str | None = None
    waiters: list[LiveTrial] = field(default_factory=list)
    """Cache hits of its config made while it ran: they end with it."""
    job_id_recorded: bool = False
    """The record has the current attempt's job id."""
    adopted: bool = False
    """The current attempt began under an earlier controller (a resumed run reattached it):
    if the backend cannot find it, the controller's death lost it, not the trial."""
    attempt: int = 1
    """The current attempt's number."""
    trial_dir: Path | None = None
    history: AttemptHistory = field(default_factory=AttemptHistory)
    """What the retry policy remembers of its attempts."""
    attempt_started: float | None = None
    """When the current attempt was recorded."""
    original_status: TrialStatus | None = None
    """For a cache hit: the outcome of the trial it reuses (what the agent is told)."""
    reserved: Spend | None = None
    """The worst-case spend reserved for the current attempt (``None``: none yet)."""
    spent: Spend = field(default_factory=Spend)
    """What the trial's ended attempts spent (its per-trial ceilings count it)."""
    data_version: str | None = None
    """The data version the trial was dispatched against (expected)."""
    data_read: str | None = None
    """The data version its result says it read."""
    baseline_row: int | None = None
    """The baseline trial its score was compared against."""
    queued_at: float = 0.0
    """When its current attempt was queued for resources."""
    granted: bool = False
    """The pool has let its current attempt start (it is submitted in this pass)."""
    expected: float | None = None
    """The run time the pool expected when it started the current attempt."""
    granted_at: float = 0.0
    """When the pool let the current attempt start (it holds its resources from then)."""
    step: int | None = None
    """For a trial stopped early (or a cache hit of one): the step its metrics are from."""
    node: str | None = None
    """Where its current (or last) attempt runs, once the backend said."""
    running_since: float | None = None
    """When the backend says its current attempt started (``None``: not yet, or unknown)."""
    seeded: bool = False
    """Its checkpoint directory was given a copy of another trial's checkpoint before it
    started (population-based training): every attempt's spec says so (even an attempt
    started afresh keeps it)."""

    @property
    def log_dir(self) -> Path | None:
        """The current attempt's directory (``attempt-N/`` in the trial directory, where the
        local and Slurm backends write ``stdout.log`` and ``stderr.log``; ``None``: the trial
        has no directory). Not looked at: it may not exist."""
        return None if self.trial_dir is None else self.trial_dir / f"attempt-{self.attempt}"

    @property
    def checkpoint_mark(self) -> Path | None:
        """The file whose presence (and time) says a checkpoint was saved (``None``: the
        trial has no directory)."""
        return None if self.trial_dir is None else checkpoint_mark(self.trial_dir)


def checkpoint_mark(trial_dir: Path) -> Path:
    """The file in *trial_dir* whose presence (and time) says a checkpoint was saved."""
    return trial_dir / "checkpoint" / CHECKPOINT_MARK


def recorded_trial(row: Trial, trial_id: str, names: Iterable[str],
                   attempts: Sequence[Attempt] | None) -> LiveTrial:
    """Trial *row* of the record as a live trial named *trial_id* (its params in the order
    of the space's *names*); with its *attempts* (an unfinished trial, or a stopped one about
    to run again), whole: its directory, attempt count and what the retry policy remembers."""
    raw = row.params
    params = {k: raw[k] for k in names if k in raw} | raw
    trial = LiveTrial(
        row.id, row.number, row.proposal, row.wave, params, row.config_hash,
        trial_id=trial_id, status=row.status, metrics=row.metrics, score=row.score,
        failure=row.failure, message=row.message, data_version=row.data_version,
        data_read=row.data_version_read, step=row.step, scores=row.scores,
    )
    if attempts is not None:
        trial.trial_dir = Path(row.trial_dir) if row.trial_dir else None
        trial.attempt = len(attempts) or 1
        trial.history = AttemptHistory.rebuild(
            (a.attempt, a.state, a.node, a.reason) for a in attempts)
    return trial


class TrialTable:
    """Where each live trial of a run is, and the ended trials new proposals may reuse."""

    def __init__(self) -> None:
        self._running: dict[str, LiveTrial] = {}
        self._queued: list[LiveTrial] = []
        self._retries: list[LiveTrial] = []
        self._by_hash: dict[str, LiveTrial] = {}
        self._cache: dict[str, LiveTrial] = {}
        self._remote: dict[str, LiveTrial] = {}

    # -- reading ----------------------------------------------------------------------------

    @property
    def running(self) -> Mapping[str, LiveTrial]:
        """Submitted attempts by job id (do not change it: use the transitions)."""
        return self._running

    @property
    def queued(self) -> list[LiveTrial]:
        """Attempts waiting for the pool's resources, in the order they were queued."""
        return self._queued

    @property
    def retries(self) -> list[LiveTrial]:
        """Attempts recorded and waiting for the budget (retries, resumed queued ones)."""
        return self._retries

    @property
    def remote(self) -> Mapping[str, LiveTrial]:
        """Trials another controller runs that trials of this run wait on (their
        :attr:`LiveTrial.waiters`), by config hash."""
        return self._remote

    def busy(self) -> int:
        """Trials that hold or wait for a slot — running, queued and waiting retries — and
        the trials of other controllers this run waits on."""
        return len(self._running) + len(self._queued) + len(self._retries) + len(self._remote)

    def in_flight(self) -> list[LiveTrial]:
        """What an agent is shown as in flight: running and queued trials, and the cache
        hits waiting on one of them or on another controller's trial."""
        flying = [*self._running.values(), *self._queued]
        for trial in flying[:]:
            flying += trial.waiters
        for other in self._remote.values():
            flying += other.waiters
        return flying

    def takes_slot(self, trial: LiveTrial, *, waves: bool) -> bool:
        """Whether *trial*, just made, takes a slot of the fill: it runs, or it is a cache
        hit, which takes its place in the wave as the trial it reuses did (a wave holds the
        same proposals whichever of them the record answers, so a rerun asks the agent what
        the run asked). In rolling mode a cache hit waiting on a running trial (here, or
        another controller's) takes none: nothing of it runs, its result comes with that
        trial's."""
        if trial.status is not TrialStatus.CACHED:
            return trial.status is TrialStatus.RUNNING
        original = self.reusable(trial.config_hash)
        return waves or original is None or not any(w is trial for w in original.waiters)

    def unfinished(self) -> Iterator[LiveTrial]:
        """Every live trial: running, waiting to be retried, queued; and the trials of
        other controllers this run waits on."""
        yield from self._running.values()
        yield from self._retries
        yield from self._queued
        yield from self._remote.values()

    def reusable(self, digest: str) -> LiveTrial | None:
        """The trial of config *digest* a new one would reuse: an ended one (cached), else
        one still running (here, or by another controller)."""
        return self._cache.get(digest) or self._by_hash.get(digest) or self._remote.get(digest)

    # -- transitions -------------------------------------------------------------------------

    def cache(self, trial: LiveTrial) -> None:
        """*trial* ended with a reusable result (or one of the record was found): reused
        from here until the pass is committed, from the record after."""
        self._cache[trial.config_hash] = trial

    def recorded(self) -> None:
        """The pass is committed: the record holds the ends of the trials cached in it, and
        a new proposal of their configs finds them there (the table forgets them)."""
        self._cache.clear()

    def newly_submitted(self) -> list[LiveTrial]:
        """The running trials whose job id the record does not hold yet, marked as held from
        now on (the caller records them in the pass it is about to commit)."""
        fresh = [trial for trial in self.running.values() if not trial.job_id_recorded]
        for trial in fresh:
            trial.job_id_recorded = True
        return fresh

    def cached(self) -> int:
        """How many ended trials the table holds for reuse (those of the current pass)."""
        return len(self._cache)

    def uncache(self, digest: str, row: int) -> None:
        """The result of trial *row* (config *digest*) may no longer be reused."""
        cached = self._cache.get(digest)
        if cached is not None and cached.row_id == row:
            del self._cache[digest]

    def dispatched(self, trial: LiveTrial) -> None:
        """*trial* runs (or waits to): new proposals of its config wait on it."""
        self._by_hash[trial.config_hash] = trial

    def wait_remote(self, other: LiveTrial) -> None:
        """Trials of this run wait on *other*, a trial another controller runs."""
        self._remote[other.config_hash] = other

    def unwait(self, digest: str) -> LiveTrial | None:
        """Stop waiting on the trial another controller runs of config *digest*: it ended,
        or its config is this run's to run now; return it."""
        return self._remote.pop(digest, None)

    def forget(self, trial: LiveTrial) -> None:
        """*trial* runs no more: new trials of its config stop waiting on it (a re-run of it,
        after it was invalidated, may hold its config by now)."""
        if self._by_hash.get(trial.config_hash) is trial:
            del self._by_hash[trial.config_hash]

    def queue(self, trial: LiveTrial, now: float) -> None:
        """Queue *trial*'s attempt for the pool's resources."""
        trial.queued_at, trial.granted, trial.expected = now, False, None
        self._queued.append(trial)

    def wait_retry(self, trial: LiveTrial) -> None:
        """*trial*'s next attempt waits to be admitted (for the budget)."""
        self._retries.append(trial)

    def take_retries(self) -> list[LiveTrial]:
        """The attempts waiting to be admitted (the table forgets them)."""
        retries, self._retries = self._retries, []
        return retries

    def grant(self, trial: LiveTrial, expected: float, now: float) -> None:
        """The pool lets *trial*'s queued attempt start now."""
        trial.granted, trial.expected, trial.granted_at = True, expected, now

    def take_granted(self) -> list[LiveTrial]:
        """The queued attempts the pool granted, in queue order (they leave the queue)."""
        granted = [t for t in self._queued if t.granted]
        if granted:
            self._queued = [t for t in self._queued if not t.granted]
        return granted

    def submitted(self, trial: LiveTrial, job_id: str) -> None:
        """*trial*'s attempt runs as *job_id* (where and since when, the backend says next)."""
        trial.job_id = job_id
        trial.node, trial.running_since = None, None
        self._running[job_id] = trial

    def ended(self, job_id: str) -> LiveTrial | None:
        """The attempt *job_id* ended: its trial, which runs no more (``None``: not ours)."""
        return self._running.pop(job_id, None)

    def take_unsubmitted(self) -> list[LiveTrial]:
        """Every attempt not submitted (queued and waiting retries); the table forgets them."""
        out = [*self._queued, *self._retries]
        self._queued, self._retries = [], []
        return out

    def take_running(self) -> list[tuple[str, LiveTrial]]:
        """Every submitted attempt (the table forgets them)."""
        out = list(self._running.items())
        self._running.clear()
        return out


class CurrentData:
    """The data version new trials are dispatched against (one owner), and the hasher of
    trial identities built on it.

    :param identity: what besides params and data makes a result (the environment's).
    """

    def __init__(self, identity: Mapping[str, Any], version: str | None) -> None:
        self._identity = dict(identity)
        self.version = version
        self.hasher = ConfigHasher(self._identity, version)
        self._versioner: DataVersioner | None = None

    @property
    def following(self) -> bool:
        """Whether the version is read from the data (a campaign's ``[data]``)."""
        return self._versioner is not None

    def follow(self, versioner: DataVersioner) -> None:
        """Read the version from *versioner*, now and at each :meth:`refresh`."""
        self._versioner = versioner
        self.set(versioner.compute())

    def refresh(self) -> tuple[str | None, str] | None:
        """Read the data's version again; (old, new) when it changed."""
        if self._versioner is None:
            return None
        version, old = self._versioner.compute(), self.version
        if version == old:
            return None
        self.set(version)
        return old, version

    def set(self, version: str) -> None:
        """Make *version* the current one."""
        self.version = version
        self.hasher = ConfigHasher(self._identity, version)

    def current(self, trial: LiveTrial) -> bool:
        """Whether *trial*'s result is about the current data (what the agent may learn from
        and rankings may use): the version it read, else the one it was dispatched against."""
        version = trial.data_read or trial.data_version
        return self.version is None or version is None or version == self.version
