"""``dse export``: a run's trials and records, streamed a page of trials at a time.

Memory holds one page (:meth:`dse.Store.trial_pages`), never the run, whatever its size. The
``json`` document is written piece by piece with the bytes ``json.dumps(doc, indent=2)`` would
give for the whole (it stays one valid JSON object); ``jsonl`` is JSON lines: a first line
about the run, then one line per trial; ``csv`` is one row per trial and one column per
param, metric and fact of the record (:func:`table_rows`, what a data frame wants);
``trajectory`` is the CSV of CloudAI's trajectory columns (``step``, ``action``, ``reward``,
``observation``...).
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dse.model._states import INTERRUPTIONS
from dse.report._front import pareto_objectives, pareto_ranks_by_row
from dse.report._listings import invalidation_json, trajectory
from dse.report._show import EXPORT_SCHEMA, trial_records

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from dse.record._base import Storage
    from dse.record._records import CampaignRun, Trial

__all__ = ["TABLE_HEAD", "TABLE_TAIL", "ColumnNames", "export_text", "table_columns", "table_pages",
           "table_rows"]

TRAJECTORY_COLUMNS = ("step", "action", "reward", "observation", "status", "failure", "config_hash",
               "cache_of", "valid")
PARETO_COLUMNS = ("scores", "pareto_rank")
"""The columns a Pareto run's trajectory CSV adds: each objective's score (a JSON object) and
the trial's Pareto rank among the valid scored trials of its data version (1: on the front)."""

TABLE_HEAD = ("trial", "trial_id", "status", "failure_class", "valid", "score")
"""The first columns of ``dse export --format csv``: the trial's number and id, its outcome,
the failure class of a trial that did not succeed, whether its result stands (``false`` once
invalidated), and its score (empty without one). A Pareto run adds ``score.<metric>`` per
objective and ``pareto_rank``; then come ``param.<name>`` per param (declared order) and
``metric.<name>`` per metric any trial reported (the objectives' first)."""

TABLE_TAIL = ("attempts", "interruptions", "started_at", "ended_at", "duration_s", "wall_s",
              "cpu_s", "gpu_s", "node_s", "money", "node", "data_version", "data_version_read",
              "config_hash", "reuses", "message", "trial_dir")
"""The last columns: how many attempts ran, how many of them an interruption ended (preempted,
node failure, killed, vanished...: retried), when the first started and the trial ended (ISO
8601, UTC), the seconds between, what the attempts spent (seconds of wall clock, CPU, GPU and
node; money in the campaign's currency), where the last attempt ran, the data version the
trial was dispatched against and the one it read, the configuration hash, the trial a cache
hit reuses, the record's message and the trial directory."""


def export_text(store: Storage, run: CampaignRun, fmt: str, page: int = 1000) -> Iterator[str]:
    """The export of *run* in format *fmt* (one of :data:`dse.report._render.FORMATS`), as pieces
    of text to write in order (each piece a page of trials at most)."""
    if fmt == "csv":
        return _table_csv(store, run, page)
    if fmt == "trajectory":
        return _csv(store, run, page)
    if fmt == "jsonl":
        return _jsonl(store, run, page)
    return _json(store, run, page)


def _steps(
    store: Storage, run: CampaignRun, page: int
) -> Iterator[tuple[list[Trial], list[dict[str, Any]]]]:
    """Each page of trials with its trajectory steps."""
    invalid = store.reads.invalid_scores(run.id)
    for trials in store.summaries.trial_pages(run.id, page):
        yield trials, trajectory(run, trials, invalid)


def _csv(store: Storage, run: CampaignRun, page: int) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    objectives = pareto_objectives(run.spec)
    ranks = pareto_ranks_by_row(store, run.id, run.spec)
    writer.writerow(TRAJECTORY_COLUMNS + (PARETO_COLUMNS if objectives else ()))
    yield buffer.getvalue()
    for trials, steps in _steps(store, run, page):
        buffer.seek(0)
        buffer.truncate()
        for t, r in zip(trials, steps, strict=True):
            extra: list[Any] = []
            if objectives:
                vector = r["scores"]
                extra = ["" if vector is None else json.dumps(dict(zip(
                    [m for m, _ in objectives], vector, strict=True))),
                    ranks.get(t.id, "")]
            writer.writerow([
                r["step"], json.dumps(r["action"]), "" if r["reward"] is None else r["reward"],
                json.dumps(r["observation"]), r["status"], r["failure"] or "",
                r["config_hash"], r["cache_of"] or "", "true" if r["valid"] else "false",
                *extra,
            ])
        yield buffer.getvalue()


def _head(run: CampaignRun) -> dict[str, Any]:
    return {"schema": EXPORT_SCHEMA, "campaign": run.name, "run": run.id,
            "status": run.status.value}


def _jsonl(store: Storage, run: CampaignRun, page: int) -> Iterator[str]:
    head = _head(run)
    head["invalidations"] = [invalidation_json(i) for i in store.reads.invalidations()]
    yield json.dumps(head) + "\n"
    invalid = store.reads.invalid_scores(run.id)
    ranks = pareto_ranks_by_row(store, run.id, run.spec)
    for trials in store.summaries.trial_pages(run.id, page):
        steps = trajectory(run, trials, invalid)
        records = trial_records(store, run, trials, ranks)
        yield "".join(json.dumps({"trajectory": step, "record": record}) + "\n"
                      for step, record in zip(steps, records, strict=True))


def _json(store: Storage, run: CampaignRun, page: int) -> Iterator[str]:
    yield "{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n"
                          for k, v in _head(run).items())
    yield from _array("trajectory", (steps for _, steps in _steps(store, run, page)),
                      last=False)
    ranks = pareto_ranks_by_row(store, run.id, run.spec)
    records = (trial_records(store, run, trials, ranks)
               for trials in store.summaries.trial_pages(run.id, page))
    yield from _array("trials", records, last=False)
    marks = [invalidation_json(i) for i in store.reads.invalidations()]
    yield from _array("invalidations", iter([marks]), last=True)
    yield "}\n"


def _array(key: str, pages: Iterator[list[dict[str, Any]]], *, last: bool) -> Iterator[str]:
    """``"key": [...]`` at the first level of an ``indent=2`` document, a page at a time."""
    end = "\n" if last else ",\n"
    first = True
    for items in pages:
        if not items:
            continue
        text = ",\n".join(_indented(item) for item in items)
        yield (f"  {json.dumps(key)}: [\n" if first else ",\n") + text
        first = False
    yield f"  {json.dumps(key)}: []{end}" if first else f"\n  ]{end}"


def _indented(item: dict[str, Any]) -> str:
    """*item* as an element of a first-level array of an ``indent=2`` document."""
    return "\n".join("    " + line for line in json.dumps(item, indent=2).split("\n"))


def table_columns(store: Storage, run: CampaignRun, page: int = 1000) -> list[str]:
    """The columns of *run*'s trial table (:data:`TABLE_HEAD`, the scores and Pareto rank of a
    Pareto run, ``param.<name>``, ``metric.<name>``, :data:`TABLE_TAIL`): the param and metric
    names are read from the record first, a page at a time."""
    names = ColumnNames()
    for trials in store.summaries.trial_pages(run.id, page):
        names.add(trials)
    return names.columns(run)


class ColumnNames:
    """The param and metric names trials have, gathered page by page (nothing else of the
    trials kept), and the table's columns they make (:func:`table_columns`)."""

    def __init__(self) -> None:
        self.params: set[str] = set()
        self.metrics: set[str] = set()

    def add(self, trials: Iterable[Trial]) -> None:
        """Take in the names of *trials*."""
        for t in trials:
            self.params.update(t.params)
            self.metrics.update(t.metrics or {})

    def columns(self, run: CampaignRun) -> list[str]:
        """*run*'s columns: its space's params and objectives' metrics in their order, then
        the other names seen, sorted."""
        params = [p["name"] for p in run.spec.get("space", [])]
        objectives = [metric for metric, _ in pareto_objectives(run.spec) or ()]
        metrics = [o["metric"] for o in run.spec.get("objectives", []) if "metric" in o]
        params += sorted(self.params - set(params))
        metrics += sorted(self.metrics - set(metrics))
        pareto = [f"score.{m}" for m in objectives] + (["pareto_rank"] if objectives else [])
        return [*TABLE_HEAD, *pareto, *(f"param.{p}" for p in params),
                *(f"metric.{m}" for m in metrics), *TABLE_TAIL]


def table_rows(
    store: Storage, run: CampaignRun, page: int = 1000
) -> Iterator[list[dict[str, Any]]]:
    """Each page of *run*'s trials as flat rows (a dict per trial: :func:`table_columns`'
    keys that apply to it; a key it lacks is an empty cell), in trial order."""
    for _, _, rows in table_pages(store, run, page):
        yield rows


def table_pages(
    store: Storage, run: CampaignRun, page: int = 1000, ranks: dict[int, int] | None = None,
) -> Iterator[tuple[list[Trial], list[dict[str, Any]], list[dict[str, Any]]]]:
    """Each page of *run*'s trials, with their records (:func:`dse.report._show.
    trial_records`) and their flat rows (:func:`table_rows`), read once for both; *ranks*:
    the run's Pareto ranks when the caller has them."""
    invalid = store.reads.invalid_scores(run.id)
    if ranks is None:
        ranks = pareto_ranks_by_row(store, run.id, run.spec)
    objectives = [metric for metric, _ in pareto_objectives(run.spec) or ()]
    for trials in store.summaries.trial_pages(run.id, page):
        steps = trajectory(run, trials, invalid)
        records = trial_records(store, run, trials, ranks)
        yield trials, records, [_flat(t, step, record, objectives, ranks)
                                for t, step, record in zip(trials, steps, records, strict=True)]


def _flat(trial: Trial, step: dict[str, Any], record: dict[str, Any], objectives: list[str],
          ranks: dict[int, int]) -> dict[str, Any]:
    ended = record["ended"]
    attempts = ended["attempts"]
    started = min((a["started_at"] for a in attempts if a["started_at"] is not None),
                  default=None)
    finished = ended["ended_at"]
    total = record["cost"]["total"]
    row: dict[str, Any] = {
        "trial": trial.number, "trial_id": record["trial"]["id"], "status": step["status"],
        "failure_class": step["failure"], "valid": step["valid"], "score": trial.score,
    }
    if objectives:
        vector = step["scores"] or [None] * len(objectives)
        row.update({f"score.{m}": v for m, v in zip(objectives, vector, strict=True)})
        row["pareto_rank"] = ranks.get(trial.id)
    row.update({f"param.{k}": v for k, v in step["action"].items()})
    row.update({f"metric.{k}": v for k, v in step["observation"].items()})
    reuses = ended["reuses"]
    row.update({
        "attempts": len(attempts),
        "interruptions": sum(1 for a in attempts if a["state"] in _INTERRUPTED),
        "started_at": _iso(started), "ended_at": _iso(finished),
        "duration_s": None if started is None or finished is None else finished - started,
        **{k: total[k] for k in ("wall_s", "cpu_s", "gpu_s", "node_s", "money")},
        "node": attempts[-1]["node"] if attempts else None,
        "data_version": record["data"]["expected"], "data_version_read": record["data"]["read"],
        "config_hash": trial.config_hash, "reuses": reuses["trial"] if reuses else None,
        "message": ended["message"], "trial_dir": trial.trial_dir,
    })
    return row


_INTERRUPTED = frozenset(state.value for state in INTERRUPTIONS)


def _iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat(
        timespec="milliseconds")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return value


def _table_csv(store: Storage, run: CampaignRun, page: int) -> Iterator[str]:
    columns = table_columns(store, run, page)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    yield buffer.getvalue()
    for rows in table_rows(store, run, page):
        buffer.seek(0)
        buffer.truncate()
        for row in rows:
            writer.writerow([_cell(row.get(c)) for c in columns])
        yield buffer.getvalue()
