"""Claims: the configurations a run is about to run, claimed in the workspace's record first.

Several controllers (one per campaign) may share a workspace. Before proposals become trials,
the configs that are not reusable from the run's own table are claimed in one short
transaction (:meth:`dse.Store.claim`): a config whose result another controller has recorded
since is reused; one another live controller runs is waited on (a stand-in for that trial
joins the table's remote trials, its :attr:`LiveTrial.waiters` the cache hits of this run);
any other is this run's to run. :class:`Claims` owns the verdicts of the current pull; the
waiting is resolved each pass by :class:`dse.engine._waits.Waits`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.engine._live import LiveTrial
from dse.plugins._backend import Backend

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dse.engine._live import TrialTable
    from dse.plugins._protocols import Runner
    from dse.record._base import Orphan, Storage
    from dse.record._batch import Batch
    from dse.record._records import Claim, Trial


def of_record(row: Trial) -> LiveTrial:
    """A finished trial of the record as a trial new proposals may reuse."""
    return LiveTrial(
        row_id=row.id, number=row.number, proposal=0, batch=0, params={},
        config_hash=row.config_hash, status=row.status, metrics=row.metrics,
        score=row.score, failure=row.failure, message=row.message, step=row.step,
    )


class Claims:
    """The claims of one run (its *campaign*'s name is the claimant) in *store*; *table* gets
    the results and the remote trials the record names."""

    def __init__(self, store: Storage, table: TrialTable, campaign: str) -> None:
        self._store = store
        self._table = table
        self._campaign = campaign
        self._pending: dict[str, tuple[int, Claim]] = {}
        self.reuse = True
        """Whether results the record holds are reused (``dse run --fresh``: only those this
        run makes; configs other controllers run are still waited on)."""
        self.run = 0
        """The run's id: its own results are reused even when :attr:`reuse` is off (the
        table forgets ended trials once the record holds them)."""
        self.orphan: Orphan | None = None
        """Whether an attempt a gone controller started still runs (the backend's
        :meth:`dse.Backend.still_running`): its claim is then still waited on."""

    def use_runner(self, runner: Runner) -> None:
        """Ask *runner* whether a gone controller's attempts still run (a :class:`Backend`
        can tell; another runner cannot, and such claims are taken over at once)."""
        self.orphan = runner.still_running if isinstance(runner, Backend) else None

    def claim(self, digests: Iterable[str], now: float) -> None:
        """Claim the configs *digests* (proposals about to become trials) in one transaction,
        each for a new trial row; :meth:`settle` hands out the verdicts."""
        wanted = {d: self._store.new_trial_id() for d in digests if d not in self._pending}
        if wanted:
            for digest, claim in self._store.claim(wanted, self._campaign, now,
                                                   reuse=self.reuse, run=self.run,
                                                   orphan=self.orphan).items():
                self._pending[digest] = (wanted[digest], claim)

    def settle(self, digest: str, now: float) -> tuple[int, LiveTrial | None]:
        """The row of a new trial of config *digest* (which the run's table cannot reuse),
        and what it reuses: ``None`` (the config is this run's to run), a finished trial of
        the record, or a trial another controller runs (to wait on)."""
        if digest not in self._pending:
            self.claim((digest,), now)
        row, claim = self._pending.pop(digest)
        return row, None if claim.mine else self._original(digest, claim)

    def look(self, digest: str, now: float) -> LiveTrial | None:
        """What a trial of config *digest* about to start would reuse (as :meth:`settle`);
        when nothing, the claim stays for the trial :meth:`settle` makes next."""
        self.claim((digest,), now)
        claim = self._pending[digest][1]
        if claim.mine:
            return None
        del self._pending[digest]
        return self._original(digest, claim)

    def release_unused(self, batch: Batch) -> None:
        """Release the claims taken for proposals that did not become trials."""
        for row, claim in self._pending.values():
            if claim.mine:
                batch.release_claim(row=row)
        self._pending.clear()

    def _original(self, digest: str, claim: Claim) -> LiveTrial:
        if claim.result is not None:
            original = of_record(claim.result)
            self._table.cache(original)
            return original
        return self._remote(digest, claim.row)

    def _remote(self, digest: str, row: int) -> LiveTrial:
        other = self._table.remote.get(digest)
        if other is None:
            other = LiveTrial(row_id=row, number=0, proposal=0, batch=0, params={},
                              config_hash=digest)
            self._table.wait_remote(other)
        return other

    def wait(self, trial: LiveTrial, row: int) -> None:
        """*trial*, a cache hit of this run, waits on trial *row* of another controller (a
        resumed run's cache hit whose original is not this run's)."""
        self._remote(trial.config_hash, row).waiters.append(trial)

    # -- each pass --------------------------------------------------------------------------

    def check(self, now: float) -> dict[str, Claim]:
        """What the record says now of each config the run waits on another controller for,
        claimed for the first trial waiting on it (one transaction)."""
        wanted = {
            digest: other.waiters[0].row_id if other.waiters else self._store.new_trial_id()
            for digest, other in self._table.remote.items()
        }
        return self._store.claim(wanted, self._campaign, now, reuse=self.reuse, run=self.run,
                                 orphan=self.orphan)

    def reset(self, now: float, run: int) -> None:
        """Run *run* (re)starts: the claims its campaign left are dropped, and its live
        trials claim their configs again."""
        self.run = run
        table = self._table
        live = [*table.running.values(), *table.queued, *table.retries]
        self._store.reset_claims(self._campaign, {t.config_hash: t.row_id for t in live}, now)
