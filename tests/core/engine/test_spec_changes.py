"""What a run not resumed says changed: the ``--set`` keys with both values (the file's
value on the side that did not set it), else the keys of the edited file."""

from __future__ import annotations

from dse.engine._spec import spec_changes


def test_the_sets_that_changed_are_named_with_both_values() -> None:
    before = {"max_parallelism": 2, "max_trials": 5, "overrides": ["max_trials=5"]}
    now = {"max_parallelism": 4, "max_trials": 6,
           "overrides": ["max_parallelism=4", "max_trials=6"]}
    assert spec_changes(before, now) == (
        "--set max_parallelism: 2 (the file) before, 4 now; --set max_trials: 5 before, 6 now")


def test_an_edited_file_names_its_keys_and_counts_past_three() -> None:
    before = {"max_trials": 20, "environment": {"time_limit": 60.0, "cpus": 1},
              "seed": 0, "mode": "rolling"}
    now = {"max_trials": 30, "environment": {"time_limit": 120.0, "cpus": 2},
           "seed": 1, "mode": "waves"}
    assert spec_changes(before, now) == (
        "environment.cpus: 1 before, 2 now; environment.time_limit: 60.0 before, 120.0 now;"
        ' max_trials: 20 before, 30 now; and 2 more')
