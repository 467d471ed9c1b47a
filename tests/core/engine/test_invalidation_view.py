"""The invalidation view on its own: flags from plain values, no engine, no store."""

from __future__ import annotations

import dataclasses

import pytest

from dse.engine._invalidation import Flag, InvalidationView, Refreshed

MINE, OTHER = 7, 3


def result(row: int, number: int, config_hash: str, *, campaign: int = MINE,
           cache_of: int | None = None) -> Flag:
    """A trial whose result is flagged."""
    return Flag(row, campaign, number, config_hash, True, cache_of)


def score(row: int, number: int, config_hash: str, *, campaign: int = MINE) -> Flag:
    """A trial only a score of which is flagged."""
    return Flag(row, campaign, number, config_hash, False, None)


def test_a_fresh_view_has_seen_nothing_and_flags_nothing() -> None:
    view = InvalidationView(MINE)
    assert not view.seen(0)  # the first look always reads the record
    assert not view.any_in_campaign
    assert not view.row_flagged(1)
    assert not view.result_flagged(1)
    assert not view.number_flagged(1)
    assert view.replaced("h1") is None


def test_nothing_is_new_until_the_latest_invalidation_changes() -> None:
    view = InvalidationView(MINE)
    assert view.refresh(0, []) == Refreshed()
    assert view.seen(0)
    assert not view.seen(1)
    view.refresh(1, [result(10, 1, "h1")])
    assert view.seen(1)
    assert not view.seen(2)


def test_a_flagged_result_of_this_campaign_is_never_reused_fed_or_ranked() -> None:
    view = InvalidationView(MINE)
    refreshed = view.refresh(1, [result(10, 1, "h1")])
    assert refreshed == Refreshed(numbers=(1,), results=(("h1", 10),))
    assert view.row_flagged(10)
    assert view.result_flagged(10)
    assert view.number_flagged(1)
    assert view.replaced("h1") == 10
    assert view.any_in_campaign


def test_a_flagged_score_only_is_not_ranked_but_its_result_may_be_reused() -> None:
    view = InvalidationView(MINE)
    assert view.refresh(1, [score(10, 1, "h1")]) == Refreshed(numbers=(1,))
    assert view.row_flagged(10)
    assert view.number_flagged(1)
    assert not view.result_flagged(10)
    assert view.replaced("h1") is None


def test_another_campaigns_flags_are_not_this_ones_numbers() -> None:
    view = InvalidationView(MINE)
    refreshed = view.refresh(1, [result(20, 1, "h2", campaign=OTHER)])
    # Its result is never reused here either, but trial 1 of this run is not flagged.
    assert refreshed == Refreshed(numbers=(), results=(("h2", 20),))
    assert view.result_flagged(20)
    assert view.replaced("h2") == 20
    assert not view.number_flagged(1)
    assert not view.any_in_campaign


def test_a_flagged_cache_hit_is_not_what_a_rerun_replaces() -> None:
    view = InvalidationView(MINE)
    view.refresh(1, [result(11, 2, "h1", cache_of=10)])
    assert view.result_flagged(11)
    assert view.replaced("h1") is None
    view.refresh(2, [result(11, 2, "h1", cache_of=10), result(10, 1, "h1")])
    assert view.replaced("h1") == 10


def test_each_flag_is_new_once_in_the_order_listed() -> None:
    view = InvalidationView(MINE)
    first = [result(12, 3, "h3"), score(10, 1, "h1")]
    assert view.refresh(1, first) == Refreshed(numbers=(3, 1), results=(("h3", 12),))
    again = view.refresh(2, [*first, result(11, 2, "h2")])
    assert again == Refreshed(numbers=(2,), results=(("h2", 11),))


def test_a_row_seen_with_its_score_flagged_is_not_taken_in_again() -> None:
    # As the engine did: a row is taken in the first time it is listed.
    view = InvalidationView(MINE)
    view.refresh(1, [score(10, 1, "h1")])
    assert view.refresh(2, [result(10, 1, "h1")]) == Refreshed()
    assert not view.result_flagged(10)


def test_flags_may_be_any_iterable() -> None:
    view = InvalidationView(MINE)
    refreshed = view.refresh(1, (result(r, r, f"h{r}") for r in (1, 2)))
    assert refreshed.numbers == (1, 2)


def test_flags_and_refreshes_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        result(1, 1, "h").row = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Refreshed().numbers = (1,)  # type: ignore[misc]
