"""A run read back from the record as Python values: :class:`Results`, one
:class:`TrialRecord` per trial, and :meth:`Results.to_pandas`.

Everything comes from the record's readers (:func:`dse.report._show.trial_records`, what
``dse show`` and ``dse export`` print; the best trial as ``dse report`` picks it), never
from the controller's memory: a run read back months later, or while it runs, says the same.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._states import (
    RESOLVED_SCORER,
    AttemptState,
    CampaignStatus,
    FailureClass,
    TrialStatus,
)
from dse.report._export import ColumnNames, table_pages
from dse.report._front import pareto_ranks_by_row

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from dse.record._base import Storage
    from dse.record._records import CampaignRun

__all__ = ["AttemptRecord", "Results", "TrialRecord", "read_results"]

PANDAS_HINT = 'to_pandas() needs pandas: pip install "dse-core[pandas]"'
SPEND_KEYS = ("wall_s", "cpu_s", "gpu_s", "node_s", "money")


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt of a trial: one submission to the backend (``dse show``'s "how it
    ended")."""

    attempt: int
    """Its number: 1, then 2 after a retry..."""
    state: AttemptState
    """How it ended (``succeeded``, ``failed``, ``timeout``, ``killed``, ``lost``...), or
    where it is while it runs."""
    exit_code: int | None
    """The workload's exit status, when it exited."""
    signal: int | None
    """The signal that ended it, when one did."""
    node: str | None
    """Where it ran (``localhost`` on the local backend)."""
    reason: str | None
    """What the backend said of its end, if anything."""
    started_at: float | None
    """When it started (seconds since the epoch)."""
    ended_at: float | None
    """When it ended; ``None`` while it runs."""


@dataclass(frozen=True, slots=True)
class TrialRecord:
    """One trial of a run as the record has it."""

    number: int
    """Its number in the run, from 1 (``dse show <campaign>:<number>``)."""
    trial_id: str
    """``<campaign>-<run>-<number>``: its ``DSE_TRIAL_ID``."""
    params: Mapping[str, Any]
    """The params, coerced to the space's types."""
    metrics: Mapping[str, float]
    """The metrics of its result that are finite numbers (empty without a result)."""
    score: float | None
    """Its score; ``None`` unless it completed (or reuses a completed trial)."""
    status: TrialStatus
    """Its outcome (``completed``, ``failed``, ``interrupted``, ``budget_exhausted``,
    ``cancelled``, ``cached``, ``stopped``), or ``running``/``pending``."""
    failure: FailureClass | None
    """Why it did not complete (``nonzero_exit``, ``invalid_metric``, ``time_limit``...)."""
    message: str | None
    """A line saying why, in the record's words."""
    attempts: tuple[AttemptRecord, ...]
    """Its attempts, in order (none for a cache hit)."""
    started_at: float | None
    """When its first attempt started (seconds since the epoch)."""
    ended_at: float | None
    """When it reached its outcome."""
    duration_s: float | None
    """From its first attempt's start to its end (retries and the waits between them
    included); ``None`` until both are known."""
    spend: Mapping[str, float]
    """What its attempts cost: ``wall_s``, ``cpu_s``, ``gpu_s``, ``node_s`` and ``money``
    (in the campaign's currency)."""
    node: str | None
    """Where its last attempt ran."""
    data_version: str | None
    """The data version its result is about (the one it read, else the one expected)."""
    valid: bool
    """``False`` once ``dse invalidate`` flagged it or its score."""
    reuses: str | None
    """For a cache hit, the trial id whose result it reuses."""
    pareto_rank: int | None
    """In a Pareto run, its rank among the valid scored trials of its data version (1: on
    the front); ``None`` otherwise."""
    trial_dir: str | None
    """Its directory: ``result.json``, ``attempt-N/stdout.log`` and ``stderr.log``."""


@dataclass(frozen=True, slots=True, repr=False)
class Results:
    """A run of a campaign as the record has it: what :func:`dse.run` returns and
    :func:`dse.load` reads back."""

    campaign: str
    """The campaign's name."""
    run_id: int
    """The run's id in the workspace (``dse status`` lists it)."""
    status: CampaignStatus
    """How the run stands: ``running``, or how it ended (``completed``, ``cancelled``,
    ``budget_exhausted``...)."""
    end_reason: str | None
    """Why it ended, in the record's words."""
    workspace: Path
    """The record's directory (``dse.sqlite``, the trials' directories)."""
    params: tuple[str, ...]
    """The space's parameter names, in its order."""
    objectives: tuple[str, ...]
    """The objective metrics, the first one ranking the trials."""
    direction: str
    """``minimize`` or ``maximize``: which way the score is better."""
    trials: tuple[TrialRecord, ...]
    """Every trial of the run, by number."""
    best: TrialRecord | None
    """The best valid scored trial (completed, or a cache hit of one) about the latest data
    version — what ``dse report`` calls best — or ``None``."""
    columns: tuple[str, ...] = ()
    """The columns of :attr:`rows`: ``trial``, ``trial_id``, ``status``, ``failure_class``,
    ``valid``, ``score``, ``param.<name>`` per param, ``metric.<name>`` per metric,
    ``attempts``, ``interruptions``, ``started_at``... (docs/record.md, ``dse export``)."""
    rows: tuple[Mapping[str, Any], ...] = ()
    """Each trial as one flat row (a column it has no value for is absent): what ``dse
    export --format csv`` writes, for a data frame library (:meth:`to_pandas`, or
    ``polars.DataFrame(results.rows)``)."""

    def __repr__(self) -> str:
        best = "none" if self.best is None else (
            f"trial {self.best.number} (score {self.best.score:g})")
        return (f"<Results {self.campaign} run {self.run_id}: {self.status.value},"
                f" {len(self.trials)} trials, best {best}>")

    @property
    def ok(self) -> bool:
        """Whether the run has a result about the design: a trial with a score (completed, or
        a cache hit of a completed trial) or one stopped early at a rung (what ``dse run``
        exits 0 for). :func:`dse.run` raises :class:`dse.NoResultError` for a run that has
        none."""
        return any(t.score is not None or t.status is TrialStatus.STOPPED for t in self.trials)

    @property
    def counts(self) -> dict[str, int]:
        """How many trials of the run are in each state: ``{"completed": 8, "failed": 2}``
        (``dse report``'s outcomes), the most common first."""
        tally: dict[str, int] = {}
        for t in self.trials:
            tally[t.status.value] = tally.get(t.status.value, 0) + 1
        return dict(sorted(tally.items(), key=lambda kv: -kv[1]))

    def to_pandas(self) -> Any:
        """The trials as a ``pandas.DataFrame``: :attr:`rows` under :attr:`columns`, the
        table ``dse export --format csv`` writes (docs/record.md), with ``started_at`` and
        ``ended_at`` as UTC timestamps.

        :raises ImportError: pandas is not installed (``pip install "dse-core[pandas]"``).
        """
        try:
            pandas = importlib.import_module("pandas")
        except ImportError:
            raise ImportError(PANDAS_HINT) from None
        frame = pandas.DataFrame([dict(row) for row in self.rows], columns=list(self.columns))
        for column in ("started_at", "ended_at"):
            frame[column] = pandas.to_datetime(frame[column], utc=True, format="ISO8601")
        return frame


def no_result_message(results: Results) -> str:
    """``campaign quad run 1 ended completed (agent_exhausted) with no completed trial:
    10 failed (nonzero_exit); quad:1: ZeroDivisionError: division by zero; log
    .dse/quad/run-1/000001``: what :class:`dse.NoResultError` says."""
    head = (f"campaign {results.campaign} run {results.run_id} ended {results.status.value}"
            + (f" ({results.end_reason})" if results.end_reason else ""))
    if not results.trials:
        return f"{head} with no trial run"
    failures: dict[str, int] = {}
    for t in results.trials:
        if t.failure is not None:
            failures[t.failure.value] = failures.get(t.failure.value, 0) + 1
    counts = ", ".join(f"{n} {status}" for status, n in results.counts.items())
    classes = ", ".join(f"{n} {name}" if len(failures) > 1 else name
                        for name, n in failures.items())
    line = f"{head} with no completed trial: {counts}" + (f" ({classes})" if classes else "")
    first = next((t for t in results.trials if t.failure is not None), None)
    if first is not None:
        line += f"; {results.campaign}:{first.number}" + (f": {first.message}" if first.message
                                                         else "")
        if first.trial_dir:
            line += f"; log {first.trial_dir}"
    return line


def read_results(store: Storage, run: CampaignRun, workspace: Path) -> Results:
    """The :class:`Results` of *run* as *store* holds it now."""
    ranks = pareto_ranks_by_row(store, run.id, run.spec)
    spec = run.spec
    names = tuple(str(p.get("name")) for p in spec.get("space") or [])
    columns = ColumnNames()
    found: list[TrialRecord] = []
    flat: list[dict[str, Any]] = []
    for page, records, rows in table_pages(store, run, ranks=ranks):  # each read once
        columns.add(page)
        found.extend(_trial(doc, names) for doc in records)
        flat.extend(rows)
    trials = tuple(found)
    objectives = tuple(str(o.get("metric")) for o in spec.get("objectives") or [])
    resolved = spec.get(RESOLVED_SCORER) or {}
    first = (spec.get("objectives") or [{}])[0]
    direction = str(resolved.get("direction") or first.get("direction") or "minimize")
    best = None
    tallies = store.summaries.version_tallies(run.id)
    if tallies:
        row = store.summaries.best_of_version(run.id, tallies[-1].version,
                                    maximize=direction == "maximize")
        best = next((t for t in trials if row is not None and t.number == row.number), None)
    return Results(run.name, run.id, run.status, run.end_reason, workspace, names, objectives,
                   direction, trials, best, tuple(columns.columns(run)), tuple(flat))


def _trial(doc: Mapping[str, Any], names: tuple[str, ...]) -> TrialRecord:
    """A :class:`TrialRecord` of one trial's ``dse show`` JSON (its params in the order of
    the space's *names*)."""
    what, data, ended, cost, concluded = (
        doc[k] for k in ("run", "data", "ended", "cost", "concluded"))
    attempts = tuple(
        AttemptRecord(a["attempt"], AttemptState(a["state"]), a["exit_code"], a["signal"],
                      a["node"], a["reason"], a["started_at"], a["ended_at"])
        for a in ended["attempts"])
    # As export's table reads them (dse.report._export): the first start, the seconds to the end.
    started = min((a.started_at for a in attempts if a.started_at is not None), default=None)
    end = ended["ended_at"]
    pareto = concluded.get("pareto")
    params = what["params"]
    params = {**{n: params[n] for n in names if n in params}, **params}
    return TrialRecord(
        number=doc["trial"]["number"], trial_id=doc["trial"]["id"], params=params,
        metrics=concluded["metrics"], score=concluded["score"],
        status=TrialStatus(ended["outcome"]),
        failure=FailureClass(ended["failure"]) if ended["failure"] else None,
        message=ended["message"], attempts=attempts, started_at=started, ended_at=end,
        duration_s=None if started is None or end is None else end - started,
        spend={k: float(cost["total"][k]) for k in SPEND_KEYS},
        node=attempts[-1].node if attempts else None,
        data_version=data["read"] or data["expected"], valid=bool(concluded["valid"]),
        reuses=ended["reuses"]["trial"] if ended["reuses"] else None,
        pareto_rank=pareto["rank"] if pareto else None,
        trial_dir=what["trial_dir"],
    )
