"""What ``dse invalidate`` flags, as SQL on a record's connection: the rows an invalidation
matches (a trial and its cache hits, a data version's trials, a scorer version's scores, a
selection of trials), and the flagging itself — the trials, their scores and every score
compared against them — counted in the invalidation's row. Nothing is deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dse.model._numbers import is_int64
from dse.record.sql._rows import chunks

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dse.record._records import TrialSelection
    from dse.record.sql._rows import Connection


class DryRun(Exception):
    """A dry-run invalidation's counts, raised to roll its transaction back."""

    def __init__(self, result: tuple[int, int, int]) -> None:
        super().__init__()
        self.result = result


def flag_rows(db: Connection, inserted_id: Callable[[str, Sequence[Any]], int],
              trial_ids: list[int], score_ids: list[int],
              why: tuple[str, str, str, float]) -> tuple[int, int, int]:
    """Flag *trial_ids* (their scores, and the scores compared against them) and
    *score_ids* invalid under a new invalidation of *why* (kind, target, reason, time);
    (its id, trials newly flagged, scores newly flagged)."""
    kind, target, reason, now = why
    mark = inserted_id(
        "INSERT INTO invalidations(at, kind, target, reason, trials, scores)"
        " VALUES (?, ?, ?, ?, 0, 0)", (now, kind, target, reason))
    flagged_trials = 0
    for chunk in chunks(trial_ids):
        marks = ",".join("?" * len(chunk))
        flagged_trials += db.execute(
            f"UPDATE trials SET invalidation = ? WHERE id IN ({marks})"
            " AND invalidation IS NULL", (mark, *chunk),
        ).rowcount
        # Their own scores, and every comparison that used one of them as baseline.
        db.execute(
            f"UPDATE scores SET invalidation = ? WHERE invalidation IS NULL AND"
            f" (trial_id IN ({marks}) OR baseline_trial IN ({marks}))",
            (mark, *chunk, *chunk),
        )
    for chunk in chunks(score_ids):
        marks = ",".join("?" * len(chunk))
        db.execute(
            f"UPDATE scores SET invalidation = ? WHERE id IN ({marks})"
            " AND invalidation IS NULL", (mark, *chunk),
        )
    (flagged_scores,) = db.execute(
        "SELECT COUNT(*) FROM scores WHERE invalidation = ?", (mark,)).fetchone()
    db.execute("UPDATE invalidations SET trials = ?, scores = ? WHERE id = ?",
               (flagged_trials, flagged_scores, mark))
    return mark, flagged_trials, int(flagged_scores)

def matching_rows(
    db: Connection, kind: str, target: str, trial_row: int | None
) -> tuple[list[int], list[int]]:
    """The trial rows and the score rows an invalidation of *kind* flags directly."""
    if kind == "trial":
        rows = db.execute(
            "SELECT id FROM trials WHERE id = ? OR cache_of = ?", (trial_row, trial_row)
        ).fetchall()
        return [int(r[0]) for r in rows], []
    if kind == "data_version":
        # The trials of that version, and the cache hits that reuse one of them.
        rows = db.execute(
            "WITH v AS (SELECT id FROM trials WHERE data_version = ?1"
            " OR data_version_read = ?1)"
            " SELECT id FROM v UNION SELECT id FROM trials WHERE cache_of IN"
            " (SELECT id FROM v)", (target,),
        ).fetchall()
        return sorted(int(r[0]) for r in rows), []
    if kind == "scorer_version":
        rows = db.execute(
            "SELECT id FROM scores WHERE scorer_version = ?"
            " OR scorer || '==' || scorer_version = ?", (target, target),
        ).fetchall()
        return [], [int(r[0]) for r in rows]
    raise ValueError(f"unknown invalidation kind {kind!r}")

def selected_rows(db: Connection, select: TrialSelection) -> list[int]:
    """The trial rows *select* picks, and the cache hits that reuse one of them."""
    where: list[str] = ["1 = 1"]
    args: list[str | int] = []
    if select.failed is not None:
        where.append("status = 'failed'")
        if select.failed:
            where.append("failure = ?")
            args.append(select.failed)
    if select.run is not None:
        where.append("campaign_id = ?")
        args.append(select.run if is_int64(select.run) else -1)  # past 64 bits: no run
    if select.campaign is not None:
        where.append("campaign_id IN (SELECT id FROM campaigns WHERE name = ?)")
        args.append(select.campaign)
    rows = db.execute(
        f"WITH v AS (SELECT id FROM trials WHERE {' AND '.join(where)})"
        " SELECT id FROM v UNION SELECT id FROM trials WHERE cache_of IN"
        " (SELECT id FROM v)", args,
    ).fetchall()
    return sorted(int(r[0]) for r in rows)
