"""What ``dse dashboard`` shows, read from the record as JSON-ready values: the runs with their
numbers and budgets, a page of a run's trials, one trial's record, and a run's figures' data.

Each function takes a read-only store and returns dicts and lists of plain values (no NaN: a
number that is not finite is ``None``). The computations are the report's
(:mod:`dse.report`): the dashboard draws them in the browser, ``dse report --html`` with
matplotlib.
"""

from __future__ import annotations

import bisect
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from dse.model._errors import ConfigError
from dse.record._records import TrialQuery
from dse.report._listings import status_entry
from dse.report._summary import primary_objective, run_best, summarize

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dse.record._base import Storage
    from dse.record._records import Trial
    from dse.report._plots import RunData

_T = TypeVar("_T")

PAGE_MAX = 500
"""The most trials one page holds."""


def plain(value: _T) -> _T:
    """*value* with every float that is not finite made ``None`` (JSON has no NaN)."""
    return cast("_T", _plain(value))


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def runs(store: Storage) -> list[dict[str, Any]]:
    """Every run of the record, newest first: ``dse status --json``'s entry, with its
    budget's ceilings and when it started and ended."""
    now = time.time()
    out = []
    for run in sorted(store.reads.campaigns(), key=lambda r: r.id, reverse=True):
        summary = summarize(store, run.id, now=now)
        entry = status_entry(run, summary, store.reads.trial_counts(run.id),
                             run_best(store, run))
        entry.update(budget=dict(summary.budget), created_at=run.created_at,
                     ended_at=run.ended_at, wall_s=summary.wall_s,
                     failures={str(k): v for k, v in summary.failures.items()},
                     objectives=run.spec.get("objectives") or [],
                     space=run.spec.get("space") or [])
        out.append(entry)
    return plain(out)


def _query(args: Mapping[str, str]) -> TrialQuery:
    """A :class:`TrialQuery` from a request's arguments: ``sort``, ``desc``, ``offset``,
    ``limit``, ``status`` and ``failure`` (comma-separated), ``version``, and
    ``range=NAME:LOW:HIGH`` (either bound may be empty; several separated by ``;``)."""
    def split(key: str) -> tuple[str, ...]:
        return tuple(v for v in args.get(key, "").split(",") if v)

    ranges = []
    for item in (r for r in args.get("range", "").split(";") if r):
        name, _, bounds = item.partition(":")
        low, _, high = bounds.partition(":")
        try:
            ranges.append((name, float(low) if low else None, float(high) if high else None))
        except ValueError:
            raise ConfigError(f"dashboard: range {item!r}: expected NAME:LOW:HIGH") from None
    try:
        offset, limit = int(args.get("offset", 0)), int(args.get("limit", 50))
    except ValueError:
        raise ConfigError("dashboard: offset and limit are whole numbers") from None
    return TrialQuery(
        sort=args.get("sort", "number"), descending=args.get("desc", "") in ("1", "true"),
        offset=max(offset, 0), limit=min(max(limit, 1), PAGE_MAX), statuses=split("status"),
        failures=split("failure"), data_version=args.get("version") or None,
        ranges=tuple(ranges))


def trial_row(trial: Trial) -> dict[str, Any]:
    """One row of the trial table."""
    return {
        "number": trial.number, "status": trial.status.value,
        "failure": trial.failure.value if trial.failure is not None else None,
        "score": trial.score, "params": trial.params, "metrics": trial.metrics or {},
        "data_version": trial.data_version, "created_at": trial.created_at,
        "ended_at": trial.ended_at, "cached": trial.cache_of is not None,
        "invalid": trial.invalidation is not None, "message": trial.message,
    }


def trial_page(store: Storage, run_id: int, args: Mapping[str, str]) -> dict[str, Any]:
    """The page of run *run_id*'s trials the request's *args* ask for (:func:`_query`)."""
    query = _query(args)
    page = store.pages.trial_page(run_id, query)
    return plain({"total": page.total, "offset": query.offset, "limit": query.limit,
                  "trials": [trial_row(t) for t in page.trials]})


def trial_record(store: Storage, run_id: int, number: int) -> dict[str, Any]:
    """Trial *number* of run *run_id*: ``dse show --json``'s record (the five answers), its
    learning curve and the stopping rule's decisions about it."""
    from dse.report._show import explain_reuse, trial_records

    run, trial = store.reads.find_trial(f"{run_id}:{number}")
    (record,) = trial_records(store, run, [trial])
    explain_reuse(store, run, trial, record)
    curve = [{"attempt": p.attempt, "step": p.step, "at": p.at, "metrics": dict(p.metrics)}
             for p in store.reads.progress(trial.id)]
    decisions = [{"step": d.step, "verdict": d.verdict, "rule": d.rule, "rung": d.rung,
                  "value": d.value, "cutoff": d.cutoff, "reason": d.reason, "at": d.at}
                 for d in store.stops.decisions(trial.id)]
    return plain({"run": run_id, "number": number, "record": record, "curve": curve,
                  "decisions": decisions, "logs": log_tails(trial)})


LOG_TAIL = 4000
"""How much of the end of each log a trial's page shows (bytes)."""


def log_tails(trial: Trial, most: int = 6) -> list[dict[str, str]]:
    """The ends of the logs in *trial*'s directory (its attempts' ``*.log``; at most
    *most*, latest attempt first): what the command last printed."""
    if not trial.trial_dir:
        return []
    root = Path(trial.trial_dir)
    try:
        logs = sorted(root.glob("**/*.log"), key=lambda p: str(p), reverse=True)[:most]
    except OSError:
        return []
    out = []
    for path in logs:
        try:
            with path.open("rb") as f:
                f.seek(max(path.stat().st_size - LOG_TAIL, 0))
                tail = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        out.append({"name": str(path.relative_to(root)), "tail": tail})
    return out


FIGURE_TRIALS = 20_000
"""The most trials a run's figures read: a larger run's are drawn from a sample (its best
hundred by score and every k-th trial), so the page and the server's memory stay small."""

SLICES = 8
"""The most slices drawn: the most important params'."""


def _landscape(run: RunData) -> dict[str, Any]:
    """The importance of the params (PED-ANOVA), the slices of the most important and the
    contour of the top two, as ``dse report --html`` computes them."""
    from dse.report._landscape import contour, landscape, slices, top_pair

    land = landscape(run)
    if land.space is None:
        return {"importance": None, "slices": [], "contour": None}
    pair = top_pair(land.space, land.importances)
    found = None if pair is None else contour(land.space, land.observed, pair,
                                              direction=land.direction)
    return {
        "importance": None if land.importances is None else land.importances.as_dict(),
        "slices": [s.as_dict() for s in slices(land.space, land.observed,
                                               land.ranked()[:SLICES])],
        "contour": None if found is None else found.as_dict(),
    }


def _front(store: Storage, run_id: int, spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Pareto run's front about its latest data version: its objectives, every valid
    scored trial (number, scores, rank: 1 on the front) and the hypervolume (``None``: a run
    of one objective, or none scored yet)."""
    from dse.report._front import pareto_fronts

    fronts = pareto_fronts(store, run_id, spec)
    if not fronts:
        return None
    front = fronts[-1]
    return {"version": front.version, "hypervolume": front.hypervolume,
            "objectives": [list(o) for o in front.objectives],
            "trials": [{"number": t.number, "scores": list(t.scores), "rank": t.rank}
                       for t in front.trials]}


def _curves(store: Storage, run: RunData) -> dict[str, Any] | None:
    """The run's learning curves as ``dse report --html`` samples them (at most 200 trials:
    the promoted, the best, a seeded sample of the rest), with the stopping rule's marks;
    ``None``: no trial reported a point and no rule ran."""
    from dse.report._curves import learning_curves

    found = learning_curves(store, run.run, run.spec, run.trials)
    if found is None:
        return None
    return {"metric": found.metric, "direction": found.direction, "rungs": found.rungs,
            "ran": found.ran, "chosen": found.chosen,
            "curves": [{"number": c.number, "status": c.status, "points": c.points,
                        "stops": c.stops, "promotions": c.promotions}
                       for c in found.curves],
            "links": [[list(a), list(b)] for a, b in found.links]}


def figures(store: Storage, run_id: int) -> dict[str, Any]:
    """The data of run *run_id*'s figures: its scored trials (number, when each ended after
    the run's start, the spend so far, the score, the best so far: convergence), their
    params (parallel coordinates: one axis per param of the space), its attempts (the
    timeline), and the params' importance, slices and contour (:func:`_landscape`)."""
    from dse.report._plots import load_run, scored

    total = sum(store.reads.trial_counts(run_id).values())
    sampled = None
    if total > FIGURE_TRIALS:
        found = store.reads.campaign(run_id)
        maximize = found is not None and primary_objective(found.spec)[1] == "maximize"
        sampled = store.pages.sample(run_id, FIGURE_TRIALS, best=min(100, FIGURE_TRIALS // 10),
                                     maximize=maximize)
    run = load_run(store, run_id, sampled)
    land = _landscape(run)
    front = _front(store, run_id, run.spec)
    curves = _curves(store, run)
    maximize = run.direction == "maximize"
    # The spend so far at each attempt's end, in end order: a trial's is read by bisection.
    spent, ends, spent_at = 0.0, [], []
    for attempt in sorted(run.attempts, key=lambda a: a["end"] or math.inf):
        spent += run.spent(attempt, 1.0)
        ends.append(attempt["end"] or math.inf)
        spent_at.append(spent)
    points, best = [], None
    for trial in sorted(scored(run), key=lambda t: t["ended"] or math.inf):
        score = float(trial["score"])
        best = score if best is None else (max(best, score) if maximize else min(best, score))
        ended = trial["ended"] or run.now
        before = bisect.bisect_right(ends, ended)
        # A sample's attempts are not the run's: the spend so far is the run's, or none.
        cost = None if sampled is not None else spent_at[before - 1] if before else 0.0
        points.append({"number": trial["number"], "at": ended - run.created, "spent": cost,
                       "score": score, "best": best, "params": trial["params"],
                       "cached": trial["cached"]})
    return plain({
        "run": run_id, "name": run.name, "metric": run.metric, "direction": run.direction,
        "status": run.status, "spend_unit": run.currency if run.priced else "CPU s",
        "space": run.space, "points": points, **land, "front": front, "curves": curves,
        "trials": total, "sampled": None if sampled is None else len(sampled),
        "attempts": [{"number": a["number"], "state": a["state"], "node": a["node"],
                      "start": None if a["start"] is None else a["start"] - run.created,
                      "end": None if a["end"] is None else a["end"] - run.created}
                     for a in run.attempts],
    })
