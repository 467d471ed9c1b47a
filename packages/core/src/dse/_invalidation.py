"""TEMPORARY shim of the invalidation view (replaced by the tested module on merge)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(frozen=True, slots=True)
class Flag:
    row: int
    campaign: int
    number: int
    config_hash: str
    result_flagged: bool
    cache_of: int | None


@dataclass(frozen=True, slots=True)
class Refreshed:
    numbers: list[int]
    results: list[tuple[str, int]]


class InvalidationView:
    def __init__(self, campaign_id: int = 0) -> None:
        self.campaign_id = campaign_id
        self._rows: set[int] = set()
        self._results: set[int] = set()
        self._numbers: set[int] = set()
        self._hashes: dict[str, int] = {}
        self._seen = -1

    def seen(self, last: int) -> bool:
        return last == self._seen

    def refresh(self, last: int, flags: Iterable[Flag]) -> Refreshed:
        self._seen = last
        numbers: list[int] = []
        results: list[tuple[str, int]] = []
        for flag in flags:
            if flag.row in self._rows:
                continue
            self._rows.add(flag.row)
            if flag.result_flagged:
                self._results.add(flag.row)
                if flag.cache_of is None:
                    self._hashes[flag.config_hash] = flag.row
                results.append((flag.config_hash, flag.row))
            if flag.campaign == self.campaign_id:
                self._numbers.add(flag.number)
                numbers.append(flag.number)
        return Refreshed(numbers, results)

    def row_flagged(self, row: int) -> bool:
        return row in self._rows

    def result_flagged(self, row: int) -> bool:
        return row in self._results

    def number_flagged(self, number: int) -> bool:
        return number in self._numbers

    def replaced(self, config_hash: str) -> int | None:
        return self._hashes.get(config_hash)

    @property
    def any_in_campaign(self) -> bool:
        return bool(self._numbers)
