"""What survives the controller: the storage interface (:class:`Storage`, with its reads), the
rows it hands out, the :class:`Batch` of a pass's changes, the campaign locks, who holds a busy
record, and ``dse doctor``'s salvage; :mod:`dse.record.sqlite` is the SQLite workspace. Names
are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.model._lazy import lazy_names

if TYPE_CHECKING:
    from dse.record._base import RecordReads, RecordStops, RecordSummaries, Storage
    from dse.record._batch import Batch

_LAZY: dict[str, str] = {
    "Batch": "dse.record._batch",
    "RecordReads": "dse.record._base",
    "RecordStops": "dse.record._base",
    "RecordSummaries": "dse.record._base",
    "Storage": "dse.record._base",
}

__all__ = ["Batch", "RecordReads", "RecordStops", "RecordSummaries", "Storage"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, __all__)
