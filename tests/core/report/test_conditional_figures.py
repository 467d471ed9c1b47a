"""The figures of a conditional space (issue 42): a param inactive in a trial has no value
there, so its slice, a contour with it and its importance read the trials where it is active
only, and the record gives the figures the tree (`dse report --html` draws it:
tests/backend_local/test_local_conditional.py)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import dse
from dse.report import Importances, Observed, contour, landscape, ped_anova, slices, top_pair
from dse.report._plots import load_run
from dse.testing import FakeClock, ProbeBackend, ProbeScript, ScriptedAgent
from support.conditional import SPACE, loss

if TYPE_CHECKING:
    from pathlib import Path

TREE = dse.Space.from_dict(SPACE)


def observed(count: int = 240, seed: int = 0) -> list[Observed]:
    rng = random.Random(seed)
    return [Observed(i, p, loss(p)) for i, p in
            enumerate((TREE.sample(rng) for _ in range(count)), 1)]


def test_a_slice_holds_the_trials_where_its_param_is_active() -> None:
    trials = observed()
    cut = {s.param: s for s in slices(TREE, trials)}
    sgd = [o.number for o in trials if o.params["optimizer"] == "sgd"]
    assert list(cut["momentum"].trials) == sgd
    assert list(cut["momentum"].values) == [o.params["momentum"] for o in trials
                                            if o.params["optimizer"] == "sgd"]
    assert list(cut["beta2"].trials) == [o.number for o in trials
                                         if o.params["optimizer"] == "adam"]
    assert list(cut["width_3"].trials) == [o.number for o in trials if o.params["layers"] == 3]
    assert len(cut["optimizer"].trials) == len(cut["width_1"].trials) == len(trials)


def test_a_contour_reads_the_trials_where_both_params_are_active() -> None:
    trials = observed()
    data = contour(TREE, trials, ("width_1", "width_2"))
    assert data is not None
    assert list(data.trials) == [o.number for o in trials if o.params["layers"] >= 2]
    assert sum(sum(row) for row in data.counts) == len(data.trials)


def test_the_contour_pair_is_two_params_a_point_can_hold() -> None:
    ranked = {"beta2": 0.4, "momentum": 0.3, "width_3": 0.2, "layers": 0.1}
    importances = Importances(ranked, ranked, 100, 10, 100, 0, 0.1, 1.0)
    # beta2 (Adam) and momentum (SGD) are never active together: the next pair is.
    assert top_pair(TREE, importances) == ("beta2", "width_3")
    nested = dse.Space.from_dict({
        "a": ["x", "y"],
        "b": {"type": "int", "low": 1, "high": 3, "when": {"a": "x"}},
        "c": {"type": "int", "low": 1, "high": 3, "when": {"b": [1, 2]}},
        "d": {"type": "int", "low": 1, "high": 3, "when": {"a": "y"}},
    })
    assert top_pair(nested, Importances({"c": 0.5, "d": 0.3, "b": 0.2}, {}, 9, 2, 9, 0, 0.1,
                                        1.0)) == ("c", "b")


def test_importance_judges_a_conditional_param_over_the_trials_where_it_is_active() -> None:
    # The best tenth are Adam's (beta2 near 0.95, SGD's floor is 0.3): beta2 is what they
    # had to get right; momentum is active in none of them, so it has no importance.
    trials = observed(400)
    found = ped_anova(TREE, [(o.params, o.value) for o in trials])
    assert found.reason == ""
    assert found.trials == 400
    assert found.excluded == 0
    assert set(found.importance) == set(TREE.names)
    assert found.importance["momentum"] == 0.0
    assert found.ranked()[0] in ("beta2", "optimizer")
    assert found.importance["beta2"] > found.importance["width_3"]


def test_a_trial_without_an_active_param_is_left_out_and_an_inactive_one_is_not() -> None:
    point = {"optimizer": "adam", "beta2": 0.95, "layers": 1, "width_1": 64}
    lacking = {"optimizer": "sgd", "layers": 1, "width_1": 64}  # no momentum: not a point
    found = ped_anova(TREE, [(point, 1.0), (lacking, 0.5), ({**point, "momentum": 9.0}, 2.0)])
    assert (found.trials, found.excluded) == (2, 1)


def test_the_record_gives_the_figures_the_tree(tmp_path: Path) -> None:
    campaign = dse.campaign_from_dict(
        {"campaign": {"name": "tree", "max_trials": 30}, "space": SPACE,
         "objectives": [{"metric": "loss"}]},
        workspace=tmp_path / ".dse",
    )
    rng = random.Random(2)
    points = [TREE.sample(rng) for _ in range(30)]
    store = dse.Store(tmp_path / ".dse" / "dse.sqlite")
    clock = FakeClock()
    try:
        result = dse.Engine(
            campaign, agent=ScriptedAgent(points), store=store, clock=clock,
            backend=ProbeBackend(lambda p: ProbeScript(seconds=1.0, metrics={"loss": loss(p)}),
                                 clock=clock)).run()
        run = load_run(store, result.campaign_id)
    finally:
        store.close()
    view = landscape(run)
    assert view.space == TREE
    assert [o.params for o in view.observed] == [_sorted(p) for p in points]


def _sorted(params: dict[str, Any]) -> dict[str, Any]:
    return dict(sorted(params.items()))
