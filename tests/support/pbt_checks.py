"""What a population-based training run on real processes must leave (local and Slurm
alike): every lineage intact, no checkpoint overwritten, no step run twice, the budget
charged exactly what the attempts spent."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING

import pytest

import dse
from dse.report._report import summarize
from support.pbt import MAX_STEP, checkpoint_history, steps_run

if TYPE_CHECKING:
    from pathlib import Path


def check_population(workspace: Path, *, population: int,
                     name: str = "pbt") -> dict[int, tuple[int, int, int]]:
    """Check the run of the campaign *name* in *workspace*; its lineage as ``child ->
    (parent, parent's step, member replaced)``."""
    db = sqlite3.connect(workspace / ".dse" / "dse.sqlite")
    run_dir = workspace / ".dse" / name / "run-1"
    ((status, reason),) = db.execute("SELECT status, end_reason FROM campaigns").fetchall()
    assert (status, reason) == ("completed", "population")
    trials = {n: (s, lr) for n, s, lr in db.execute(
        "SELECT number, status, json_extract(params, '$.lr') FROM trials")}
    lineage = {c: (p, s, m) for c, p, s, m in db.execute(
        "SELECT t.number, p.number, l.parent_step, m.number FROM lineage l JOIN trials t ON"
        " t.id = l.trial_id JOIN trials p ON p.id = l.parent_id JOIN trials m ON"
        " m.id = l.member_id")}
    exploited = [n for (n,) in db.execute(
        "SELECT t.number FROM decisions d JOIN trials t ON t.id = d.trial_id"
        " WHERE d.verdict = 'exploit' ORDER BY d.id")]
    assert lineage, "no exploit in the run"
    # The agent gave the population; every other trial is an exploit's, one per exploited
    # member, each member replaced once; every lineage ran to its end.
    assert len(trials) - len(lineage) == population
    assert len(set(exploited)) == len(exploited)
    replaced = sorted(m for _, _, m in lineage.values())
    assert set(replaced) <= set(exploited)
    assert {trials[n][0] for n in replaced} == {"stopped"}
    # A member that completed before its stop reached it has no trial in its place: said.
    void = {n for (n,) in db.execute(
        "SELECT json_extract(data, '$.trial') FROM events WHERE kind = 'exploit_void'")}
    assert set(exploited) - set(replaced) == void
    assert {trials[n][0] for n in void} <= {"completed"}
    # (An exploit drawing params another trial of the same parent and step has is that
    # trial's measurement: a cache hit, ending with it. Draws avoid it while they can.)
    ends = [s for s, _ in trials.values()]
    assert ends.count("completed") + ends.count("cached") == population, trials
    assert ends.count("stopped") == len(lineage), trials
    histories = {n: checkpoint_history(run_dir / f"{n:06d}") for n in trials}
    for number, history in histories.items():
        if trials[number][0] == "cached":
            continue  # nothing ran: its original's directory holds the steps
        trial_id = f"{name}-1-{number}"
        steps = [s for _, s, _ in history]
        assert steps == list(range(1, len(steps) + 1)), (number, history)  # none twice
        own = [h for h in history if h[0] == trial_id]
        assert own == history[len(history) - len(own):]  # its own steps last, at its own lr
        assert {lr for _, _, lr in own} <= {trials[number][1]}
        ran = [s for _, s in steps_run(run_dir / f"{number:06d}")]
        assert ran == sorted(set(ran)), (number, ran)  # no step ran twice in its directory
        assert ran == [s for _, s, _ in own], (number, ran, own)
        if trials[number][0] == "completed":
            assert steps[-1] == MAX_STEP
        if number in lineage:
            parent, parent_step, _ = lineage[number]
            head = history[:len(history) - len(own)]
            # A copy of the parent's checkpoint as it stood then: the parent's own history
            # (which it went on writing, in its own directory) begins with it.
            assert head == histories[parent][:len(head)], (number, parent)
            assert len(head) >= parent_step
        else:
            assert len(own) == len(history)  # a fresh member started from nothing
    # Every copy made as an exploit was decided went to a trial's directory (or was removed).
    staging = run_dir / ".exploits"
    assert not staging.exists() or not any(staging.iterdir()), list(staging.iterdir())
    store = dse.Store(workspace / ".dse" / "dse.sqlite")
    try:
        (run,) = store.reads.campaigns()
        attempts = store.reads.attempts(run.id)
        # Every attempt that ran was charged (one a killed controller never submitted: none).
        assert all(a.spend is not None or a.started_at is None for a in attempts), attempts
        spent = [a.spend for a in attempts]
        summary = summarize(store, run.id)
        # Charged exactly what its attempts spent (each trial from its own start).
        for key in ("wall_s", "cpu_s", "money"):
            assert getattr(summary.spent, key) == pytest.approx(
                sum(getattr(s, key) for s in spent if s)), key
        assert summary.spent.cpu_s > 0
        assert summary.spent.money <= 5000
    finally:
        store.close()
    return lineage


def lineage_rows(workspace: Path) -> int:
    """How many trials exploits have made in *workspace*'s record so far (0 while it is being
    made)."""
    path = workspace / ".dse" / "dse.sqlite"
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
        try:
            return int(db.execute("SELECT COUNT(*) FROM lineage").fetchone()[0])
        except sqlite3.OperationalError:  # the record is being made
            return 0
