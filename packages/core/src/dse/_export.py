"""``dse export``: a run's trajectory and records, streamed a page of trials at a time.

Memory holds one page (:meth:`dse.Store.trial_pages`), never the run, whatever its size. The
``json`` document is written piece by piece with the bytes ``json.dumps(doc, indent=2)`` would
give for the whole (it stays one valid JSON object); ``jsonl`` is JSON lines: a first line
about the run, then one line per trial; ``csv`` is the trajectory columns.
"""

from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING, Any

from dse._front import pareto_objectives, pareto_ranks_by_row
from dse._render import invalidation_json, trajectory
from dse._show import EXPORT_SCHEMA, trial_records

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dse._records import CampaignRun, Trial
    from dse._store import Store

__all__ = ["export_text"]

CSV_COLUMNS = ("step", "action", "reward", "observation", "status", "failure", "config_hash",
               "cache_of", "valid")
PARETO_COLUMNS = ("scores", "pareto_rank")
"""The columns a Pareto run's CSV adds: each objective's score (a JSON object) and the trial's
Pareto rank among the valid scored trials of its data version (1: on the front)."""


def export_text(store: Store, run: CampaignRun, fmt: str, page: int = 1000) -> Iterator[str]:
    """The export of *run* in format *fmt* (one of :data:`dse._render.FORMATS`), as pieces
    of text to write in order (each piece a page of trials at most)."""
    if fmt == "csv":
        return _csv(store, run, page)
    if fmt == "jsonl":
        return _jsonl(store, run, page)
    return _json(store, run, page)


def _steps(
    store: Store, run: CampaignRun, page: int
) -> Iterator[tuple[list[Trial], list[dict[str, Any]]]]:
    """Each page of trials with its trajectory steps."""
    invalid = store.invalid_scores(run.id)
    for trials in store.trial_pages(run.id, page):
        yield trials, trajectory(run, trials, invalid)


def _csv(store: Store, run: CampaignRun, page: int) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    objectives = pareto_objectives(run.spec)
    ranks = pareto_ranks_by_row(store, run.id, run.spec)
    writer.writerow(CSV_COLUMNS + (PARETO_COLUMNS if objectives else ()))
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


def _jsonl(store: Store, run: CampaignRun, page: int) -> Iterator[str]:
    head = _head(run)
    head["invalidations"] = [invalidation_json(i) for i in store.invalidations()]
    yield json.dumps(head) + "\n"
    invalid = store.invalid_scores(run.id)
    ranks = pareto_ranks_by_row(store, run.id, run.spec)
    for trials in store.trial_pages(run.id, page):
        steps = trajectory(run, trials, invalid)
        records = trial_records(store, run, trials, ranks)
        yield "".join(json.dumps({"trajectory": step, "record": record}) + "\n"
                      for step, record in zip(steps, records, strict=True))


def _json(store: Store, run: CampaignRun, page: int) -> Iterator[str]:
    yield "{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n"
                          for k, v in _head(run).items())
    yield from _array("trajectory", (steps for _, steps in _steps(store, run, page)),
                      last=False)
    ranks = pareto_ranks_by_row(store, run.id, run.spec)
    records = (trial_records(store, run, trials, ranks)
               for trials in store.trial_pages(run.id, page))
    yield from _array("trials", records, last=False)
    marks = [invalidation_json(i) for i in store.invalidations()]
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
