"""What the ``dse`` commands print: text lines and JSON documents of a run's outcome, of
``dse report``.

Everything here is a pure function of values already read (nothing here reads the record or
writes to the terminal); the ``dse show`` record has its own module, :mod:`dse.report._show`, and
the HTML page :mod:`dse.report._html`; the listings (status, plugins, export, doctor)
:mod:`dse.report._listings`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dse.model._states import CampaignStatus
from dse.report._stopreport import SAVED_METHOD
from dse.report._summary import tally_text

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from dse.campaign._model import Campaign
    from dse.model._outcome import CampaignResult
    from dse.model._spend import Spend
    from dse.report._front import Front
    from dse.report._report import Interruptions, ObjectiveRollup, RunDetail
    from dse.report._stopreport import StoppingDetail

__all__ = [
    "REPORT_KEYS",
    "WATCH_EVERY",
    "detail_json",
    "detail_lines",
    "duration_text",
    "hours_text",
    "money_text",
    "outcome_json",
    "outcome_lines",
    "pool_share_line",
    "rate_text",
    "report_json",
    "rollup_json",
    "rollup_line",
]

WATCH_EVERY = 10.0
"""Seconds between two pages ``dse report --html OUT --watch`` writes, unless told."""
WATCH_MOST = 86400.0
"""The most seconds ``--watch`` waits between two pages (a day)."""


Table = tuple[tuple[str, ...], list[list[str]]]
"""A table for people: its column names and its rows of cells (printed by
:meth:`dse.report._terminal.Console.table`)."""


REPORT_KEYS = """\
--json prints {"workspace": PATH, "runs": [RUN...], "objectives": [OBJECTIVE...]}.
RUN:
  campaign, run, status, end_reason   the run and how it ended
  budget_reason    why the budget ended it ("money ceiling 1 USD"), or null
  serves           the objective labels it serves
  best             null or {trial, metric, direction, score, params}: the best completed trial
                   about the latest data version
  data_versions    [{version, trials, completed, mismatched, best: {trial, score}}], oldest first
  mismatched       trial numbers that read another data version than expected (flagged)
  invalid          [{trial, reason}]: results or scores flagged by dse invalidate (never ranked)
  scorer           the scorer of the run's scores ("default 0.1.0")
  interruptions    {retried, trials, resumed, by_class: {<failure class>: count}, nodes:
                   {<node>: count}}: attempts an interruption ended (preempted, node
                   failure, killed, vanished...) that were retried, in how many trials, how
                   many resumed from a checkpoint; one that ended its trial is in trials
                   (interrupted) and failures
  overrides        the `dse run --set KEY=VALUE` overrides the run was started with
  trials           {total, <outcome>: count...}: running (an attempt runs now) apart from
                   queued (submitted, not started, or waiting for a retry); failures:
                   {<failure class>: count}; first_failures: {<failure class>: {trial,
                   message}}, the first failed trial of each class and its message
  currency         the currency of every money figure of the run
  spent            {money, cpu_hours, gpu_hours, node_hours, attempt_hours}: every attempt
  budget           one entry per ceiling the campaign has, each {spent, ceiling, unit}:
                   money (currency), compute (<unit>-hours), trials (trials run),
                   wall_clock (seconds since the run was created)
  wall_clock_s     the run's wall clock (creation to end, or to now while it runs)
  finished         trials that reached an outcome, stopped ones included (not cache hits,
                   not cancelled)
  effective        trials with a usable result: completed, or stopped at a rung (low
                   fidelity), and not flagged invalid
  throughput_per_h finished trials per wall-clock hour
  effective_per_h  effective results per wall-clock hour
  cost_per_effective       money per effective result (null before the first)
  compute_per_effective_h  {cpu, gpu, node}: compute-hours per effective result
  cache_hits       [{trial, reuses_run, reuses_trial, cost (always 0), reused_cost}]
  stopping         null (no stopping rule) or {rule, version, metric, direction, max_step,
                   ended_stopped, promotions, to_end, rungs, to_end_spent, stopped_spent,
                   saved_estimate, saved_method}: rungs [{rung, stopped, promoted, ended,
                   spent}] (stop and promote decisions at the rung; trials whose end is a
                   stop there and what they spent); to_end: trials that ran to their end;
                   saved_estimate: SPENT or null, how it is estimated in saved_method
                   (SPENT: the keys of spent)
  pareto           null (one objective) or {objectives: [{metric, direction}], fronts:
                   [{version, trials, hypervolume, reference: {metric: value}, members:
                   [{trial, scores: {metric: score}, params}], hypervolume_by_trial:
                   [[trial, hypervolume]...]}]}: a Pareto run's front per data version
                   (the last: the latest), among its valid scored trials; members by the
                   first objective, best first; trials in the order they ended
OBJECTIVE (every run of the workspace serving the label, per currency):
  objective, currency, runs, spent, finished, effective, cached, cost_per_effective,
  compute_per_effective_h
"""
"""The keys of ``dse report --json`` (the epilog of ``dse report --help``)."""

_UNITS = ("cpu", "gpu", "node")


# -- numbers as text ----------------------------------------------------------------------------


def money_text(amount: float) -> str:
    """Money to the cent; amounts below a cent keep three significant digits."""
    if amount == 0 or abs(amount) >= 0.01:
        return f"{amount:.2f}"
    return f"{amount:.3g}"


def hours_text(hours: float) -> str:
    return "0" if hours == 0 else f"{hours:.3g}"


def rate_text(per_h: float) -> str:
    return f"{per_h:,.0f}" if per_h >= 100 else f"{per_h:.3g}"


def size_text(size: int) -> str:
    """``"512 B"``, ``"3.0 KiB"``, ``"120.5 MiB"``, ``"2.1 GiB"``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError  # unreachable: the loop returns at GiB


def duration_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


# -- a run's outcome (`dse run`) --------------------------------------------------------------


def outcome_json(result: CampaignResult, detail: RunDetail, campaign: Campaign) -> dict[str, Any]:
    """The ``dse run --json`` document of one campaign."""
    s = result.stats
    best = result.best
    summary = detail.summary
    return {
        "campaign": result.name,
        "run": result.campaign_id,
        "status": result.status,
        "end_reason": result.end_reason,
        "budget_reason": detail.budget_reason,
        "trials": s.steps,
        "completed": s.completed,
        "failed": s.failed,
        "cached": s.cached,
        "rejected": s.rejected,
        "cancelled": s.cancelled,
        "cancelled_unstarted": summary.cancelled_unstarted,
        "interrupted": s.interrupted,
        "budget_exhausted": s.budget_exhausted,
        "stopped": s.stopped,
        "promoted": s.promoted,
        "best": None if best is None else {
            "trial": best.number, "score": best.score, "params": dict(best.params),
            "metric": campaign.objectives[0].metric,
        },
        "pareto": front_json(detail.fronts[-1]) if detail.fronts else None,
        "currency": summary.currency,
        "spent": _spent_json(summary.spent),
        "budget": _ceilings(detail),
        "throughput_per_h": summary.throughput_per_h,
        "effective_per_h": summary.effective_per_h,
        "cost_per_effective": summary.cost_per_effective,
    }


def outcome_lines(result: CampaignResult, detail: RunDetail, campaign: Campaign) -> list[str]:
    """What ``dse run`` prints of one campaign when it ends."""
    s = result.stats
    best = result.best
    summary = detail.summary
    lines = [
        f"campaign {result.name} run {result.campaign_id}: {result.status}"
        f" ({result.end_reason}); {s.steps} trials: "
        + tally_text(s, unstarted=summary.cancelled_unstarted)
    ]
    if detail.fronts:
        front = detail.fronts[-1]
        shown = ", ".join(str(m.number) for m in front.members[:FRONT_SHOWN])
        more = ", ..." if len(front.members) > FRONT_SHOWN else ""
        lines.append(
            f"front: {len(front.members)} of {len(front.trials)} trials (trials {shown}{more});"
            f" hypervolume {front.hypervolume:.6g}; dse report {result.name} lists them"
        )
    elif best is not None:
        metric = campaign.objectives[0].metric
        lines.append(
            f"best: trial {best.number} {metric}={best.score:.6g}"
            f" params {json.dumps(dict(best.params))}"
        )
    lines.append(
        f"throughput {rate_text(summary.throughput_per_h)} trials/h, effective"
        f" {rate_text(summary.effective_per_h)} results/h, cost "
        + _per_effective(summary.cost_per_effective,
                         {u: summary.compute_per_effective_h(u)
                          for u in _shown_units(summary.spent, None)}, summary.currency)
    )
    if result.status is CampaignStatus.BUDGET_EXHAUSTED:
        lines.append(_exhausted_line(detail))
    return lines


def pool_share_line(capacity: Mapping[str, Any], weights: Mapping[str, float],
                    shares: Mapping[str, float]) -> str:
    """Each campaign's share of a pool (*shares*, by name) against its weight's."""
    total = sum(weights.values())
    text = ", ".join(f"{v} {k}" for k, v in capacity.items())
    return f"pool ({text}), while the campaigns competed: " + "; ".join(
        f"{name} used {shares[name]:.0%} (weight {weights[name]:g}, target"
        f" {weights[name] / total:.0%})" for name in weights)


def _exhausted_line(detail: RunDetail) -> str:
    """``budget exhausted: money ceiling 1 USD; spent 0.96 USD``: the ceiling that ended
    the run and what was spent of it (:func:`_spent_line` when the campaign's earlier runs
    spent part of it)."""
    s = detail.summary
    why = detail.budget_reason or "budget"
    if detail.budget_earlier:
        return _spent_line(detail, why, detail.budget_earlier)
    ceilings = _ceilings(detail)
    if why.startswith("compute") and "compute" in ceilings:
        spent = f"spent {hours_text(ceilings['compute']['spent'])} {ceilings['compute']['unit']}"
    elif why.startswith("trials"):
        spent = f"{detail.dispatched} trials run"
    elif "wall-clock" in why:
        spent = f"ran {duration_text(s.wall_s)}, spent {money_text(s.spent.money)} {s.currency}"
    else:
        spent = f"spent {money_text(s.spent.money)} {s.currency}"
    return f"budget exhausted: {why}; {spent}"


def _spent_line(detail: RunDetail, why: str, earlier: Mapping[str, Any]) -> str:
    """``budget spent: trials ceiling 4 reached, 4 of 4 trials (4 by runs 1 of the campaign,
    0 by this one); ...``: a ceiling the campaign's runs spent together (``[budget] scope =
    "campaign"``), the figures, and the ``--set`` that raises it."""
    s, budget = detail.summary, detail.summary.budget
    before = earlier.get("spent") or {}
    runs = ", ".join(str(r) for r in earlier.get("runs") or ())
    ceiling: float
    old: float
    new: float
    if why.startswith("trials") and budget.get("trials") is not None:
        ceiling, unit = budget["trials"], "trials"
        old, new = int(earlier.get("trials") or 0), detail.dispatched
        raise_to = f"budget.trials={2 * ceiling}"
    elif why.startswith("compute") and budget.get("compute"):
        kind, ceiling = budget["compute"]
        unit = f"{kind}-hours"
        old = float(before.get(f"{kind}_s") or 0.0) / 3600.0
        new = s.spent.compute_s(kind) / 3600.0
        raise_to = f"'budget.compute={2 * ceiling:g} {unit}'"
    elif "wall-clock" in why and budget.get("wall_clock_s") is not None:
        ceiling, unit = budget["wall_clock_s"] / 3600.0, "hours"
        old, new = float(earlier.get("run_s") or 0.0) / 3600.0, s.wall_s / 3600.0
        raise_to = f"budget.wall_clock={2 * budget['wall_clock_s']:g}s"
    elif budget.get("money") is not None:
        ceiling, unit = budget["money"], s.currency
        old, new = float(before.get("money") or 0.0), s.spent.money
        raise_to = f"'budget.money={money_text(2 * ceiling)} {s.currency}'"
    else:
        return f"budget exhausted: {why}"

    def shown(value: float) -> str:
        return str(int(value)) if unit == "trials" else f"{value:.3g}"

    return (f"budget spent: {why}, {shown(old + new)} of {shown(ceiling)} {unit} ({shown(old)}"
            f" by earlier runs {runs} of the campaign, {shown(new)} by this one); to spend"
            f" more, raise it (--set {raise_to}) or give each run its own"
            " (--set budget.scope=run)")


# -- `dse report` ------------------------------------------------------------------------------


def report_json(workspace: str, details: Iterable[RunDetail],
                rollups: Iterable[ObjectiveRollup]) -> dict[str, Any]:
    """The ``dse report --json`` document (keys: :data:`REPORT_KEYS`)."""
    return {
        "workspace": workspace,
        "runs": [detail_json(d) for d in details],
        "objectives": [rollup_json(r) for r in rollups],
    }


def _spent_json(spent: Spend) -> dict[str, float]:
    return {"money": spent.money, "cpu_hours": spent.cpu_s / 3600.0,
            "gpu_hours": spent.gpu_s / 3600.0, "node_hours": spent.node_s / 3600.0,
            "attempt_hours": spent.wall_s / 3600.0}


def _ceilings(detail: RunDetail) -> dict[str, dict[str, Any]]:
    """Spent against each ceiling the run's budget has."""
    s = detail.summary
    budget = s.budget
    out: dict[str, dict[str, Any]] = {}
    if budget.get("money") is not None:
        out["money"] = {"spent": s.spent.money, "ceiling": budget["money"], "unit": s.currency}
    if budget.get("compute"):
        unit, hours = budget["compute"]
        out["compute"] = {"spent": s.spent.compute_s(unit) / 3600.0, "ceiling": hours,
                          "unit": f"{unit}-hours"}
    if budget.get("trials") is not None:
        out["trials"] = {"spent": detail.dispatched, "ceiling": budget["trials"],
                         "unit": "trials"}
    if budget.get("wall_clock_s") is not None:
        out["wall_clock"] = {"spent": s.wall_s, "ceiling": budget["wall_clock_s"], "unit": "s"}
    return out


def detail_json(detail: RunDetail) -> dict[str, Any]:
    """One run of ``dse report --json``."""
    s = detail.summary
    best = detail.best
    return {
        "campaign": s.name, "run": s.campaign_id, "status": s.status,
        "end_reason": detail.end_reason, "budget_reason": detail.budget_reason,
        "serves": list(s.serves),
        "best": None if best is None else {
            "trial": best.trial, "metric": best.metric, "direction": best.direction,
            "score": best.score, "params": best.params,
        },
        "trials": {"total": sum(detail.outcomes.values()), **detail.outcomes},
        "data_versions": [
            {"version": g.version, "trials": g.trials, "completed": g.completed,
             "mismatched": g.mismatched,
             "best": None if g.best is None else {"trial": g.best.trial, "score": g.best.score}}
            for g in detail.data_versions
        ],
        "mismatched": list(detail.mismatched),
        "invalid": [{"trial": n, "reason": why} for n, why in detail.invalid],
        "scorer": detail.scorer,
        "failures": dict(s.failures),
        "first_failures": {cls: {"trial": n, "message": message}
                           for cls, n, message in detail.first_failures},
        "currency": s.currency,
        "spent": _spent_json(s.spent),
        "budget": _ceilings(detail),
        "wall_clock_s": s.wall_s,
        "finished": s.finished,
        "effective": s.effective,
        "throughput_per_h": s.throughput_per_h,
        "effective_per_h": s.effective_per_h,
        "cost_per_effective": s.cost_per_effective,
        "compute_per_effective_h": {u: s.compute_per_effective_h(u) for u in _UNITS},
        "cache_hits": [
            {"trial": h.trial, "reuses_run": h.reuses_run, "reuses_trial": h.reuses_trial,
             "cost": 0.0, "reused_cost": h.reuses_spend.money}
            for h in detail.cache_hits
        ],
        "interruptions": _interruptions_json(detail.interruptions),
        "overrides": list(detail.overrides),
        "stopping": None if detail.stopping is None else _stopping_json(detail.stopping),
        "pareto": None if not detail.fronts else {
            "objectives": [{"metric": m, "direction": d} for m, d in detail.fronts[0].objectives],
            "fronts": [front_json(f) for f in detail.fronts],
        },
    }


def _interruptions_json(d: Interruptions | None) -> dict[str, Any]:
    if d is None:
        return {"retried": 0, "trials": 0, "resumed": 0, "by_class": {}, "nodes": {}}
    return {"retried": d.retried, "trials": d.trials, "resumed": d.resumed,
            "by_class": dict(d.by_class), "nodes": dict(d.nodes)}


def _interruption_text(d: Interruptions) -> str:
    classes = ", ".join(f"{cls} {n}" for cls, n in d.by_class.items())
    where = ""
    if d.nodes:
        worst = sorted(d.nodes.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        where = "; on " + ", ".join(f"{node} {n}" for node, n in worst)
    return (f"{d.retried} after an interruption ({classes}) in {d.trials} trial(s),"
            f" {d.resumed} resumed from a checkpoint{where}")


def _stopping_json(d: StoppingDetail) -> dict[str, Any]:
    return {
        "rule": d.rule, "version": d.version, "metric": d.metric, "direction": d.direction,
        "max_step": d.max_step, "ended_stopped": d.ended_stopped, "promotions": d.promotions,
        "to_end": d.to_end,
        "rungs": [{"rung": r.rung, "stopped": r.stopped, "promoted": r.promoted,
                   "ended": r.ended, "spent": _spent_json(r.spent)} for r in d.rungs],
        "to_end_spent": _spent_json(d.to_end_spent),
        "stopped_spent": _spent_json(d.stopped_spent),
        "saved_estimate": None if d.saved is None else _spent_json(d.saved),
        "saved_method": SAVED_METHOD if d.saved is not None else d.no_estimate,
    }


def rollup_json(rollup: ObjectiveRollup) -> dict[str, Any]:
    """One objective label of ``dse report --json``."""
    return {
        "objective": rollup.label, "currency": rollup.currency, "runs": list(rollup.runs),
        "spent": _spent_json(rollup.spent), "finished": rollup.finished,
        "effective": rollup.effective, "cached": rollup.cached,
        "cost_per_effective": rollup.cost_per_effective,
        "compute_per_effective_h": {u: rollup.compute_per_effective_h(u) for u in _UNITS},
    }


def _shown_units(spent: Spend, ceiling_unit: str | None) -> list[str]:
    """The compute units worth a line: those spent (node-hours only without cpu or gpu
    ones), and the one with a ceiling."""
    units = [u for u in ("cpu", "gpu") if spent.compute_s(u) > 0]
    if not units and spent.node_s > 0:
        units = ["node"]
    if ceiling_unit is not None and ceiling_unit not in units:
        units.append(ceiling_unit)
    return units or ["cpu"]


def _per_effective(cost: float | None, compute: dict[str, float | None], currency: str) -> str:
    if cost is None:
        return "- (no effective result yet)"
    parts = [f"{money_text(cost)} {currency}"]
    parts += [f"{hours_text(h)} {u}-hours" for u, h in compute.items() if h is not None]
    return ", ".join(parts) + " per effective result"


def detail_lines(detail: RunDetail) -> list[str]:
    """One run as ``dse report`` prints it."""
    s = detail.summary
    ended = detail.end_reason or "-"
    if detail.budget_reason:
        ended += f": {detail.budget_reason}"
    lines = [f"campaign {s.name} run {s.campaign_id}: {s.status} ({ended})"]

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<13}{text}")

    row("serves", ", ".join(s.serves))
    best = detail.best
    row("best", "-" if best is None else (
        f"trial {best.trial}: {best.metric}={best.score:.6g} ({best.direction}),"
        f" params {json.dumps(best.params)}"))
    outcomes = ", ".join(f"{n} {status}" + (
        f" ({s.cancelled_unstarted} never started)"
        if status == "cancelled" and s.cancelled_unstarted else "")
        for status, n in sorted(detail.outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    row("trials", f"{sum(detail.outcomes.values())}" + (f": {outcomes}" if outcomes else ""))
    _data_rows(detail, row)
    row("scorer", detail.scorer)
    row("failures", ", ".join(f"{cls} {n}" for cls, n in sorted(s.failures.items()))
        or "none")
    for cls, number, message in detail.first_failures:  # why, in the trial's own words
        if message:
            row("", f"first {cls}: trial {number}: {message}")
    row("retries", "none" if detail.interruptions is None
        else _interruption_text(detail.interruptions))
    if detail.overrides:
        row("overrides", " ".join(f"--set {o}" for o in detail.overrides))
    ceiling_unit = _spend_rows(detail, row)
    row("throughput", f"{rate_text(s.throughput_per_h)} trials/h ({s.finished} finished)")
    row("effective", f"{rate_text(s.effective_per_h)} results/h ({s.effective} usable)")
    units = _shown_units(s.spent, ceiling_unit)
    row("cost", _per_effective(s.cost_per_effective,
                               {u: s.compute_per_effective_h(u) for u in units}, s.currency))
    if detail.cache_hits:
        reuses = "; ".join(
            f"trial {h.trial} reuses trial {h.reuses_trial}"
            + ("" if h.reuses_run == s.campaign_id else f" of run {h.reuses_run}")
            + f" ({money_text(h.reuses_spend.money)} {s.currency})"
            for h in detail.cache_hits[:5]
        ) + ("; ..." if len(detail.cache_hits) > 5 else "")
        row("cache hits", f"{len(detail.cache_hits)}, costing nothing: {reuses}")
    if detail.stopping is not None:
        _stopping_rows(detail.stopping, s.currency, row)
    for front in detail.fronts:
        _front_rows(front, row, latest=front is detail.fronts[-1])
    return lines


FRONT_SHOWN = 10
"""Front members ``dse report`` lists per data version (``--json`` and ``dse export`` have
them all)."""


def _front_rows(front: Front, row: Callable[[str, str], None], *, latest: bool) -> None:
    """A Pareto run's front about one data version: its size, hypervolume and members."""
    members = front.members
    names = [metric for metric, _ in front.objectives]
    version = "" if front.version is None else f"data {front.version}: "
    reference = ", ".join(f"{m}={r:.6g}" for m, r in zip(names, front.reference, strict=True))
    row("front", f"{version}{len(members)} of {len(front.trials)} trials on the Pareto front;"
        f" hypervolume {front.hypervolume:.6g} (reference {reference})"
        + ("" if latest else " (an older data version)"))
    for member in members[:FRONT_SHOWN]:
        values = " ".join(f"{m}={v:.6g}" for m, v in zip(names, member.scores, strict=True))
        row("", f"trial {member.number}: {values}, params {json.dumps(member.params)}")
    if len(members) > FRONT_SHOWN:
        row("", f"... and {len(members) - FRONT_SHOWN} more (dse report --json, dse export)")


def front_json(front: Front) -> dict[str, Any]:
    """One front of ``dse report --json`` (``pareto.fronts``)."""
    names = [metric for metric, _ in front.objectives]
    return {
        "version": front.version,
        "trials": len(front.trials),
        "hypervolume": front.hypervolume,
        "reference": dict(zip(names, front.reference, strict=True)),
        "members": [
            {"trial": m.number, "scores": dict(zip(names, m.scores, strict=True)),
             "params": m.params}
            for m in front.members
        ],
        "hypervolume_by_trial": [
            [t.number, hv] for t, hv in zip(front.trials, front.history, strict=True)],
    }


def _stopping_rows(d: StoppingDetail, currency: str, row: Callable[[str, str], None]) -> None:
    """A run's early stopping: what was stopped and promoted at each rung, what the trials
    that ended there and those that ran to the end spent, and what stopping saved."""
    def spent(spend: Spend) -> str:
        units = ", ".join(f"{hours_text(spend.compute_s(u) / 3600.0)} {u}-hours"
                          for u in _shown_units(spend, None))
        return f"{units}, {money_text(spend.money)} {currency}, attempts" \
               f" {duration_text(spend.wall_s)}"

    what = f"{d.rule} {d.version or '(no decision yet)'}"
    if d.metric:
        what += f" on {d.metric}" + (f" ({d.direction})" if d.direction else "")
    if d.max_step is not None:
        what += f", a full run is {d.max_step} steps"
    row("stopping", f"{what}: {d.ended_stopped} trials ended stopped, {d.promotions}"
        f" promoted, {d.to_end} ran to the end")
    for r in d.rungs:
        row(f"rung {r.rung}", f"{r.stopped} stopped, {r.promoted} promoted; {r.ended} ended"
            f" here, spent {spent(r.spent)}")
    row("to the end", f"{d.to_end} trials, spent {spent(d.to_end_spent)}")
    if d.saved is None:
        row("saved", d.no_estimate)
    else:
        row("saved", f"about {spent(d.saved)}")
        row("", f"({SAVED_METHOD})")


def _data_rows(detail: RunDetail, row: Callable[[str, str], None]) -> None:
    """The data versions of a run, and the results flagged."""
    for group in detail.data_versions:
        flagged = f", {group.mismatched} read other data (flagged)" if group.mismatched else ""
        best_text = "-" if group.best is None else (
            f"best trial {group.best.trial} {group.best.metric}={group.best.score:.6g}")
        row("data", f"{group.version}: {group.trials} trials, {group.completed} completed,"
                    f" {best_text}{flagged}")
    if len(detail.data_versions) > 1:
        row("", "(each data version ranked on its own; best above: the latest)")
    if detail.mismatched:
        row("FLAGGED", "read other data than expected: trials "
            + ", ".join(str(n) for n in detail.mismatched))
    reasons: dict[str, list[int]] = {}
    for number, why in detail.invalid:
        reasons.setdefault(why, []).append(number)
    for why, numbers in reasons.items():
        row("INVALID", f"trials {', '.join(str(n) for n in numbers)}: {why} (not ranked)")


def _spend_rows(detail: RunDetail, row: Callable[[str, str], None]) -> str | None:
    """What a run spent against each ceiling; returns the compute unit with a ceiling."""
    s = detail.summary
    ceilings = _ceilings(detail)
    spend = []
    money = ceilings.get("money")
    spend.append(f"money {money_text(s.spent.money)}" + (
        f" / {money_text(money['ceiling'])}" if money else "") + f" {s.currency}")
    compute = ceilings.get("compute")
    ceiling_unit = compute["unit"].removesuffix("-hours") if compute else None
    for unit in _shown_units(s.spent, ceiling_unit):
        text = f"compute {hours_text(s.spent.compute_s(unit) / 3600.0)}"
        if unit == ceiling_unit and compute is not None:
            text += f" / {compute['ceiling']:g}"
        spend.append(f"{text} {unit}-hours")
    trials = ceilings.get("trials")
    if trials:
        spend.append(f"trials run {detail.dispatched} / {trials['ceiling']}")
    wall = ceilings.get("wall_clock")
    spend.append(f"wall clock {duration_text(s.wall_s)}" + (
        f" / {duration_text(wall['ceiling'])}" if wall else ""))
    row("spend", spend[0])
    for text in spend[1:]:
        row("", text)
    return ceiling_unit


def rollup_line(rollup: ObjectiveRollup) -> str:
    """One objective label as ``dse report`` prints it."""
    units = _shown_units(rollup.spent, None)
    runs = ", ".join(str(r) for r in rollup.runs)
    compute = ", ".join(f"{hours_text(rollup.spent.compute_s(u) / 3600.0)} {u}-hours"
                        for u in units)
    return (
        f"objective {rollup.label}: run{'s' if len(rollup.runs) > 1 else ''} {runs};"
        f" spent {money_text(rollup.spent.money)} {rollup.currency}, {compute};"
        f" {rollup.effective} effective results; "
        + _per_effective(rollup.cost_per_effective,
                         {u: rollup.compute_per_effective_h(u) for u in units},
                         rollup.currency)
    )


# -- `dse status` and `dse plugins` -----------------------------------------------------------


# -- `dse export` and `dse invalidate` ---------------------------------------------------------


