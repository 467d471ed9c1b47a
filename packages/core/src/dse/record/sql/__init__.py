"""The SQL both records share: the rows as values, the reads, the statements of a pass's
writes, and :class:`SqlStore`, the writes and claims of a record on a SQL database.

The SQL is SQLite's (``?`` marks, its functions); :mod:`dse.record.sqlite` runs it as it is and
:mod:`dse.record.postgres` translates it once per statement
(:mod:`dse.record.postgres._dialect`).
"""

from dse.record.sql._rows import Connection, Queries
from dse.record.sql._store import SqlStore

__all__ = ["Connection", "Queries", "SqlStore"]
