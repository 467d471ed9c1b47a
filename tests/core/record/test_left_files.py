"""Where an attempt's files that its backend did not bring back are (``JobStatus.left_files``):
kept with the attempt on both records, read back, and said by ``dse show``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dse
from dse.model._states import TrialStatus
from dse.record._batch import Batch
from dse.report._showtext import _left_text

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from dse.record import Storage

LEFT = {"node": "w2", "dir": "/scratch/dse/w2/ab12-000001",
        "files": {"model.pt": 3 << 30, "optimizer.pt": 1 << 20, "a": 10, "b": 20}}


def test_the_record_keeps_where_an_attempts_files_were_left(
    tmp_path: Path, opener: Callable[[Path], Storage]
) -> None:
    store = opener(tmp_path)
    try:
        run = store.create_campaign(name="left", source=None, spec={}, agent="none",
                                    backend="ray", mode="waves", max_parallelism=1, now=0.0)
        batch = Batch()
        rows = [store.new_trial_id(), store.new_trial_id()]
        for number, row in enumerate(rows, 1):
            batch.add_trial(row=row, campaign=run, number=number, proposal=number, wave=1,
                            config_hash=f"h{number}", params_json="{}",
                            status=TrialStatus.RUNNING, created_at=0.0)
            attempt = store.new_attempt_id()
            batch.add_attempt(row=attempt, trial=row, attempt=1, backend="ray",
                              state=dse.AttemptState.SUBMITTING, submitted_at=0.0)
            batch.end_attempt(row=attempt, state=dse.AttemptState.SUCCEEDED, ended_at=1.0)
            if number == 1:
                batch.set_attempt_left_files(row=attempt, left=LEFT)
        store.commit(batch)
        first, second = store.reads.attempts(run)
        assert first.left_files == LEFT
        assert second.left_files is None
    finally:
        store.close()


def test_dse_show_names_the_node_the_directory_and_the_largest_files() -> None:
    assert _left_text(LEFT) == ("left on node w2 in /scratch/dse/w2/ab12-000001: model.pt"
                                " (3.0 GiB), optimizer.pt (1.0 MiB), b (20 B) and 1 more")
