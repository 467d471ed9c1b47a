"""Early stopping at work: the campaign's stopping rule told each running trial's new progress
points, a trial it stops cancelled and ended ``stopped`` at its rung, a stopped trial it
promotes resumed from its checkpoint as a new attempt, every decision recorded.

:class:`EarlyStopping` owns the rule, the last point of each running trial, the stops asked
of the runner and not yet confirmed, and the trials stopped at a rung that may be promoted
(by number). The engine wires it (and the progress reader) into a run it opens.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.engine._exploit import Exploits
from dse.engine._live import LiveTrial, checkpoint_mark, recorded_trial
from dse.model._errors import ConfigError, PluginError, did_you_mean
from dse.model._spend import Spend
from dse.model._types import Decision, Direction, JobState, TrialStatus, Verdict, finite_float
from dse.plugins._protocols import PopulationRule, TrialInfo

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse.campaign._model import Campaign, StoppingSpec
    from dse.engine._journal import Journal
    from dse.engine._parts import Spawner, Starter
    from dse.engine._progress import ProgressPoint
    from dse.model._types import JobStatus
    from dse.plugins._plugins import PluginManager
    from dse.plugins._protocols import Runner, StoppingRule
    from dse.record._base import Storage
    from dse.record._records import Trial

__all__ = ["EarlyStopping", "as_stopped", "stopping_for"]


def as_stopped(store: Storage, trial: LiveTrial, step: int) -> LiveTrial:
    """*trial* as the agent was told of it when it was stopped at *step*: itself when it
    still stands so, else (promoted since) a copy with the point it reported at that step."""
    if trial.step == step and TrialStatus.STOPPED in (trial.status, trial.original_status):
        return trial
    points = [pt for pt in store.reads.progress(trial.row_id) if pt.step == step]
    metrics = dict(points[-1].metrics) if points else {}
    return dataclasses.replace(trial, status=TrialStatus.STOPPED, original_status=None,
                               step=step, metrics=metrics, score=None, failure=None,
                               waiters=[])


_STOPS = (Verdict.STOP.value, Verdict.EXPLOIT.value)
"""The verdicts that stop a trial."""


def _finite(value: float) -> float | None:
    """*value*, or ``None`` for the worst loss a NaN or an infinity was taken as."""
    return value if math.isfinite(value) else None


def stopping_for(campaign: Campaign, backend: Runner, plugins: PluginManager
                 ) -> EarlyStopping | None:
    """The campaign's early stopping (``None`` without a ``[stopping]`` table), its rule
    built and checked when the engine is, before anything is recorded: a bad rule or option
    is one line naming it."""
    spec = campaign.stopping
    if spec is None:
        return None
    source = campaign.source or "<campaign>"
    where = f"{source}: stopping"
    if not getattr(backend, "trial_dirs", True):
        raise ConfigError(
            f"{where}: the {backend.name} backend gives trials no directory, so no"
            " progress can be reported; use a backend that runs commands (local, slurm)")
    registered = plugins.stopping_rules.get(spec.rule)
    try:
        cls = plugins.stopping_rule_class(spec.rule)
    except PluginError as exc:
        raise PluginError(f"{where}.rule: {exc}") from None
    takes = _options_of(cls)
    unknown = sorted(set(spec.options) - takes) if takes is not None else []
    if unknown:
        raise ConfigError(
            f"{where}.{spec.rule}: unknown option(s) {', '.join(map(repr, unknown))}; the"
            f" {spec.rule} rule takes {', '.join(sorted(takes or ())) or 'none'}"
            + did_you_mean(unknown, takes or ()))
    # The sign the rule prints its reasons' values with: the metric's own, as reported.
    signed = {"sign": -1.0 if spec.direction is Direction.MAXIMIZE else 1.0} if _takes_sign(
        cls) else {}
    try:
        rule = cls(min_step=spec.min_step, max_step=spec.max_step, **signed, **spec.options)
    except ConfigError as exc:  # the rule names its option (stopping.<rule>.<key>)
        raise ConfigError(f"{source}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}.{spec.rule}: {exc}") from None
    version = registered.class_version if registered is not None else "?"
    objectives = {o.metric for o in campaign.objectives}
    return EarlyStopping(rule, spec, version=version, where=f"{where}.metric",
                         checked=spec.metric in objectives, source=where)


def _options_of(cls: type) -> set[str] | None:
    """The options a rule class takes besides ``min_step``, ``max_step`` and ``sign`` (the
    engine's to give, never the campaign file's), or ``None``: any."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (
        inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)} - {
        "min_step", "max_step", "sign"}


def _takes_sign(cls: type) -> bool:
    """Whether a rule class names a ``sign`` parameter: -1 for a maximised metric, to print
    the values of its reasons in the metric's own sign (dse's rules do)."""
    try:
        return "sign" in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


class EarlyStopping:
    """The stopping rule of one run and what it has asked for."""

    def __init__(self, rule: StoppingRule, spec: StoppingSpec, *, version: str,
                 where: str = "stopping.metric", checked: bool = True,
                 source: str = "stopping") -> None:
        self.rule = rule
        self.spec = spec
        self.exploits = Exploits(rule, source) if isinstance(rule, PopulationRule) else None
        """The exploits of a population rule (``pbt``) and the trials they made."""
        self.where = where
        """Where the stopping metric is set (``campaign.toml: stopping.metric``)."""
        self.checked = checked
        """The stopping metric is known to exist: an objective's, or seen in a trial's
        progress; until then it is checked (:meth:`_check_metric`)."""
        self._reporting: dict[int, tuple[int, int, set[str]]] = {}
        """While unchecked: trial row -> (number, first step at or past ``min_step``, the
        metric names) of each trial reporting progress without the stopping metric."""
        self._unreported: ConfigError | None = None
        """A trial reported progress to its successful end and never the stopping metric:
        the error the next pass ends the run with."""
        self.name = str(getattr(rule, "name", spec.rule))
        self.version = version
        self._sign = -1.0 if spec.direction is Direction.MAXIMIZE else 1.0
        self._last: dict[int, tuple[int, dict[str, Any]]] = {}
        """Trial row -> the last point of its current attempt (step, metrics)."""
        self.requested: dict[str, Decision] = {}
        """Job id -> the decision that stopped it (the runner was asked to cancel it)."""
        self.stopped: dict[int, int] = {}
        """Trial number -> row of the trials stopped at a rung with a checkpoint to resume
        from (what may be promoted)."""
        self._store: Storage | None = None
        """Set by :meth:`restore` until the first pass has asked again to stop what was."""
        self._deferred: set[int] = set()
        """Trials the rule promoted that the budget could not afford yet (noted once)."""
        self._replayed: dict[int, int] = {}
        """Trial number -> the last step the rule was told when it was rebuilt (those of
        the trials still running, after the first pass)."""

    # -- the rule, guarded ---------------------------------------------------------------

    def _report(self, trial: int, step: int, value: float) -> Decision | None:
        try:
            return self.rule.report(trial, step, value)
        except Exception as exc:  # noqa: BLE001 - name the plugin that broke
            raise PluginError(f"stopping rule {self.name!r}: report raised"
                              f" {type(exc).__name__}: {exc}") from None

    def _promotions(self) -> Sequence[Decision]:
        try:
            return self.rule.promotions(set(self.stopped))
        except Exception as exc:  # noqa: BLE001 - name the plugin that broke
            raise PluginError(f"stopping rule {self.name!r}: promotions raised"
                              f" {type(exc).__name__}: {exc}") from None

    def _loss(self, metrics: dict[str, Any]) -> float | None:
        """The stopping metric of *metrics* as a loss (lower is better); a NaN or an infinity
        is the worst loss (a diverging trial is stopped, not ignored); ``None`` without it."""
        value = metrics.get(self.spec.metric)
        if value is None and self.spec.metric in metrics:
            return math.inf  # the record's null: a value that was not a finite number
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        number = finite_float(value)  # an integer past a float's range is no finite loss
        return math.inf if number is None else self._sign * number

    # -- each pass: new points, stops ----------------------------------------------------

    def review(self, new: Sequence[tuple[LiveTrial, list[ProgressPoint]]],
               journal: Journal, running: Mapping[str, LiveTrial]) -> list[str]:
        """Tell the rule the new points of the running trials; the job ids of those it stops
        (for the caller to cancel)."""
        stops = self._stop_again(running) if self._store is not None else []
        if not self.checked:
            self._check_metric(new)
        now = journal.now()
        # In the order the record gives them back to a resumed run's rule: the same decisions.
        ordered = sorted(((now if pt.at is None else pt.at, trial.number, pt.step, i, trial, pt)
                          for trial, points in new for i, pt in enumerate(points)),
                         key=lambda x: x[:4])
        for *_, trial, point in ordered:
            told = self._replayed.get(trial.number, -1)
            if point.attempt not in (None, trial.attempt) or point.step <= told:
                continue
            last = self._last.get(trial.row_id)
            if last is not None and point.step <= last[0]:
                continue
            self._last[trial.row_id] = (point.step, point.metrics)
            loss = self._loss(point.metrics)
            if loss is None or trial.proposal <= 0:
                continue  # the baseline is the reference, never stopped
            if self.exploits is not None:
                self.exploits.note(trial, point.step)
            decision = self._report(trial.number, point.step, loss)
            if decision is None or trial.job_id in self.requested:
                continue
            self.record(trial, decision, journal)
            if (decision.verdict is Verdict.EXPLOIT and self.exploits is not None
                    and not self.exploits.decided(trial, decision, journal)):
                continue  # its donor finished first: nothing to copy, the member goes on
            if decision.verdict in (Verdict.STOP, Verdict.EXPLOIT) and trial.job_id is not None:
                self.requested[trial.job_id] = decision
                stops.append(trial.job_id)
        if stops:
            journal.event(None, "stop", {"jobs": len(stops)})
        return stops

    def _check_metric(self, new: Sequence[tuple[LiveTrial, list[ProgressPoint]]]) -> None:
        """Whether the stopping metric is one the trials report, from the points at or past
        ``min_step`` (where the rule first compares): a misspelt one is a
        :class:`ConfigError` naming it (the run ends with it), not a rule that silently
        never stops anything. At the first such points when it is close to a name they carry
        (``val_eror`` for ``val_error``); otherwise once a trial reported progress to its
        successful end without it (a workload may report a metric every few steps only)."""
        if self._unreported is not None:
            raise self._unreported
        due = [(t, pt) for t, points in new for pt in points if pt.step >= self.spec.min_step]
        if not due:
            return
        reported = {name for _, pt in due for name in pt.metrics}
        if self.spec.metric in reported:
            self.checked = True
            self._reporting.clear()
            return
        for trial, point in due:
            self._reporting.setdefault(trial.row_id, (trial.number, point.step, set()))[2] \
                .update(point.metrics)
        hint = did_you_mean([self.spec.metric], reported)
        if hint:
            trial, point = due[0]
            raise self._not_reported(trial.number, f"at step {point.step}", reported, hint)

    def _not_reported(self, number: int, when: str, reported: set[str],
                      hint: str) -> ConfigError:
        names = ", ".join(map(repr, sorted(reported))) or "no metric"
        return ConfigError(
            f"{self.where}: {self.spec.metric!r} is neither an objective's metric nor in the"
            f" progress the trials report (trial {number} reported {names} {when})" + hint)

    def record(self, trial: LiveTrial, decision: Decision, journal: Journal) -> None:
        """Record *decision* about *trial* (values back in the metric's own sign)."""
        sign = self._sign
        journal.batch.add_decision(
            campaign=journal.campaign_id, row=trial.row_id,
            attempt=trial.attempt, rule=self.name,
            version=self.version, verdict=decision.verdict.value, rung=decision.rung,
            step=decision.step, value=_finite(sign * decision.value),
            cutoff=None if decision.cutoff is None else _finite(sign * decision.cutoff),
            peers=decision.peers,  # by name only for a stop or a promotion: the record's size
            compared=json.dumps([] if decision.verdict is Verdict.CONTINUE else [
                [n, _finite(sign * v)] for n, v in decision.compared]),
            reason=decision.reason, bracket=decision.bracket, at=journal.now())

    def ended(self, trial: LiveTrial, status: JobStatus, journal: Journal) -> bool:
        """*trial*'s attempt ended with *status*: when the rule had stopped it (and it did
        not succeed first), it ends ``stopped`` with its last point; True then."""
        seen = self._reporting.pop(trial.row_id, None)
        if seen is not None and not self.checked and status.state is JobState.SUCCEEDED:
            number, step, names = seen
            # (No name it carried was close to the metric: that was refused at once.)
            self._unreported = self._not_reported(number, f"from step {step} to its end",
                                                  names, "")
        last = self._last.pop(trial.row_id, None)
        self._replayed.pop(trial.number, None)
        decision = self.requested.pop(status.job_id, None)
        stopped = decision is not None and status.state is not JobState.SUCCEEDED
        if self.exploits is not None and decision is not None:
            self.exploits.ended(trial, status.state.value if not stopped else None, journal)
        if not stopped:
            return False
        assert decision is not None
        step, metrics = last if last is not None else (decision.step, {
            self.spec.metric: self._sign * decision.value})
        trial.status, trial.failure, trial.score = TrialStatus.STOPPED, None, None
        # Its partial result: the finite metrics, as of a trial's result.json.
        trial.step, trial.metrics = step, {
            k: v for k, v in metrics.items() if finite_float(v) is not None}
        trial.message = (f"stopped at step {decision.step} (rung {decision.rung}) by"
                         f" {self.name} {self.version}: {decision.reason}")
        mark = trial.checkpoint_mark
        if self.spec.promote and mark is not None and mark.exists():
            self.stopped[trial.number] = trial.row_id
        return True

    # -- promotions ----------------------------------------------------------------------

    def members_left(self, steps: int) -> int | None:
        """How many more trials the agent may be asked for, *steps* taken (``None``: as many
        as the campaign lets it: only a population rule counts them)."""
        return None if self.exploits is None else self.exploits.members_left(steps)

    def promote(self, dispatcher: Spawner, slots: int, now: float) -> int:
        """Make the trials of the exploits decided (each in the place of the trial it
        replaces), then resume up to *slots* stopped trials the rule promotes (before new
        proposals take the room); how many were resumed."""
        if self.exploits is not None and self.exploits.pending:
            self.exploits.spawn(dispatcher, now)
        if slots <= 0 or not self.stopped:
            return 0
        promoted = 0
        for decision in self._promotions():
            if promoted >= slots:
                break
            row = self.stopped.get(decision.trial)
            if row is None:
                continue
            outcome = self._promote(dispatcher, row, decision, now)
            if outcome is None:
                break  # the budget affords no more now
            promoted += outcome
        return promoted

    def _promote(self, dispatcher: Starter, row: int, decision: Decision,
                 now: float) -> int | None:
        """Resume trial *row*; 1 when it was, 0 when it may never be (its data changed, it
        was invalidated), ``None`` when the budget cannot afford it now."""
        p = dispatcher.parts
        found = p.store.stops.trial_by_row(row)
        trial = self._live(dispatcher, found) if found is not None else None
        if (trial is None or found is None or found.status is not TrialStatus.STOPPED
                or p.invalid.row_flagged(row) or not p.data.current(trial)):
            # Its checkpoint is of other data, or its result may not be used: never resumed.
            del self.stopped[decision.trial]
            return 0
        assert trial.trial_dir is not None
        spec = dispatcher.avoiding(p.environment.prepare(TrialInfo(
            trial.trial_id, trial.number, trial.attempt + 1, trial.params, trial.trial_dir,
            p.data.version)), trial)
        reserved = p.gate.reserve(spec, p.journal.monotonic(), new_trial=False)
        if isinstance(reserved, str):
            if decision.trial not in self._deferred:  # said once per trial, not every pass
                self._deferred.add(decision.trial)
                p.journal.event(row, "promotion_deferred", {
                    "trial": decision.trial, "rung": decision.rung, "reason": reserved})
            return None
        del self.stopped[decision.trial]
        self._deferred.discard(decision.trial)
        batch = p.journal.batch
        self.record(trial, decision, p.journal)
        trial.reserved, trial.spec, trial.attempt = reserved, spec, spec.attempt
        trial.attempt_row = p.store.new_attempt_id()
        trial.attempt_started = now
        batch.end_trial(row=row, status=TrialStatus.RUNNING, ended_at=None)
        batch.add_attempt(row=trial.attempt_row, trial=row, attempt=spec.attempt,
                          backend=p.backend, state=dispatcher.first_state, submitted_at=now,
                          resumed=True)
        p.journal.event(row, "promoted", {"trial": trial.number, "attempt": spec.attempt,
                                          "rung": decision.rung, "step": decision.step})
        p.table.queue(trial, now)
        p.table.dispatched(trial)
        p.feedback.numbered(trial.proposal)
        p.stats.stopped -= 1
        p.stats.promoted += 1
        return 1

    @staticmethod
    def _live(dispatcher: Starter, row: Trial) -> LiveTrial:
        """Stopped trial *row* as a live trial about to run again."""
        p = dispatcher.parts
        trial = recorded_trial(
            row, f"{p.campaign.name}-{p.journal.campaign_id}-{row.number}",
            p.campaign.space.names, p.store.reads.attempts(p.journal.campaign_id, trials=[row.id]))
        trial.status, trial.metrics, trial.step, trial.message = (
            TrialStatus.RUNNING, None, None, None)
        trial.spent = sum((a.spend for a in p.store.reads.trial_spends([row.id])), Spend())
        return trial

    # -- a resumed run -------------------------------------------------------------------

    def restore(self, store: Storage, cid: int) -> None:
        """Rebuild the rule from the run's recorded points, in order, and know again the
        trials stopped at a rung (before a resumed run replays its agent); the running trials
        it had stopped are asked to stop again at the first pass (once they are reattached)."""
        told = self._replayed
        exploited: list[tuple[int, Decision, int]] = []
        for number, proposal, step, text in store.stops.run_progress(cid):
            loss = self._loss(json.loads(text))
            self.checked = self.checked or loss is not None
            if loss is not None and proposal > 0:  # the baseline is never compared
                decision = self._report(number, step, loss)
                told[number] = max(step, told.get(number, -1))
                if self.exploits is not None:
                    latest = self.exploits.latest
                    latest[number] = told[number]
                    if decision is not None and decision.donor is not None:
                        exploited.append((number, decision, latest.get(decision.donor, 0)))
        if self.exploits is not None and exploited:
            rows = {d.number: d.trial_row for d in store.stops.run_decisions(cid, ("exploit",))}
            self.exploits.restore(store, cid, [(rows[n], n, d, at) for n, d, at in exploited
                                               if n in rows])
        elif self.exploits is not None:
            self.exploits.spawned = len(store.stops.lineage(cid))
        for row in store.stops.stopped_trials(cid) if self.spec.promote else ():
            if row.trial_dir and checkpoint_mark(Path(row.trial_dir)).exists():
                self.stopped[row.number] = row.id
        self._store = store

    def _stop_again(self, running: Mapping[str, LiveTrial]) -> list[str]:
        """The running trials of a resumed run whose last decision was to stop them."""
        store, self._store = self._store, None
        again: list[str] = []
        if store is None:
            return again
        # Only the running trials' files are read again from their start: keep what the
        # rule was told of those, so that it is not told twice.
        self._replayed = {t.number: self._replayed[t.number] for t in running.values()
                          if t.number in self._replayed}
        for job_id, trial in running.items():
            made = store.stops.decisions(trial.row_id)
            last = made[-1] if made else None
            if last is not None and last.verdict in _STOPS and last.attempt == trial.attempt:
                self.requested[job_id] = Decision(
                    trial.number, Verdict.STOP, last.rung, last.step,
                    math.inf if last.value is None else self._sign * last.value,
                    reason=last.reason)
                again.append(job_id)
        return again
