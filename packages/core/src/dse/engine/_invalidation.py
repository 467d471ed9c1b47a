"""The invalidation view: which results of the workspace are flagged (``dse invalidate``),
as one campaign run sees them (README, "When things go wrong").

A flagged result is never reused, never fed to an agent and never ranked; a result whose
score only is flagged may be reused (and scored afresh). Flags are added by other processes
too, so the engine asks the record every pass whether anything is new and hands the view the
flagged trials as plain :class:`Flag` values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(frozen=True, slots=True)
class Flag:
    """One flagged trial of the workspace, as the record lists it."""

    row: int
    """The trial's row id."""
    campaign: int
    """The campaign run it belongs to."""
    number: int
    """Its number within that run."""
    config_hash: str
    """Its configuration hash (what a later identical proposal is matched by)."""
    result_flagged: bool
    """``True`` when its result is flagged; ``False`` when only a score of it is."""
    cache_of: int | None
    """The row of the trial whose result it reuses, when it is a cache hit."""


@dataclass(frozen=True, slots=True)
class Refreshed:
    """What a :meth:`InvalidationView.refresh` newly took in."""

    numbers: tuple[int, ...] = ()
    """Numbers of this campaign's newly flagged trials, in the order listed."""
    results: tuple[tuple[str, int], ...] = ()
    """(config hash, row) of every newly flagged result: never reused from now on (the
    engine drops each from its cache when the cache holds that row)."""


class InvalidationView:
    """The flagged trials one campaign run knows of.

    :param campaign_id: the run whose trials are *its own* (:meth:`number_flagged`).
    """

    def __init__(self, campaign_id: int) -> None:
        self.campaign_id = campaign_id
        self._last = -1
        self._rows: set[int] = set()
        self._results: set[int] = set()
        """Rows whose result (not only a score) is flagged: never reused, even while running."""
        self._numbers: set[int] = set()
        self._replaced: dict[str, int] = {}

    def seen(self, last: int) -> bool:
        """Whether *last* (the id of the record's latest invalidation) was taken in already:
        nothing is new since."""
        return last == self._last

    def refresh(self, last: int, flags: Iterable[Flag]) -> Refreshed:
        """Take in the flagged trials *flags* as of invalidation *last*; return what is new."""
        self._last = last
        numbers: list[int] = []
        results: list[tuple[str, int]] = []
        for flag in flags:
            if flag.row in self._rows:
                continue
            self._rows.add(flag.row)
            if flag.result_flagged:
                # A flagged result is never reused; a flagged score only is (scored afresh).
                self._results.add(flag.row)
                if flag.cache_of is None:  # what a re-run replaces: the trial that ran
                    self._replaced[flag.config_hash] = flag.row
                results.append((flag.config_hash, flag.row))
            if flag.campaign == self.campaign_id:
                self._numbers.add(flag.number)
                numbers.append(flag.number)
        return Refreshed(tuple(numbers), tuple(results))

    def row_flagged(self, row: int) -> bool:
        """Whether trial *row* is flagged (its result or a score of it): never ranked, never
        fed to the agent."""
        return row in self._rows

    def result_flagged(self, row: int) -> bool:
        """Whether trial *row*'s result is flagged: never reused."""
        return row in self._results

    def number_flagged(self, number: int) -> bool:
        """Whether trial *number* of this campaign run is flagged."""
        return number in self._numbers

    def replaced(self, config_hash: str) -> int | None:
        """The row of the flagged trial that ran *config_hash* (a new trial of it replaces
        that one), or ``None``."""
        return self._replaced.get(config_hash)

    @property
    def any_in_campaign(self) -> bool:
        """Whether any trial of this campaign run is flagged."""
        return bool(self._numbers)
