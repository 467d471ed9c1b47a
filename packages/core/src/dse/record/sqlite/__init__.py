"""The SQLite record: one file per workspace (``<workspace>/dse.sqlite``), the default storage.

:class:`Store` implements the storage interface of :mod:`dse.record` by composition: its
reads (:class:`~dse.record.sql._reads.Reads`, ``Summaries``, ``Stops``) each take the
connection; the schema, the migrations and the statements of a pass's writes are modules of
their own.
"""

from dse.record._records import TrialSelection
from dse.record.sql._schema import OLDEST_SCHEMA, SCHEMA_VERSION
from dse.record.sqlite._connection import check_writable, header_damage
from dse.record.sqlite._files import (
    DB_NAME,
    JOURNAL_ENV,
    NETWORK_FILESYSTEMS,
    filesystem_type,
    mount_of,
    workspace_db,
)
from dse.record.sqlite._store import Store, open_existing

__all__ = [
    "DB_NAME",
    "JOURNAL_ENV",
    "NETWORK_FILESYSTEMS",
    "OLDEST_SCHEMA",
    "SCHEMA_VERSION",
    "Store",
    "TrialSelection",
    "check_writable",
    "filesystem_type",
    "header_damage",
    "mount_of",
    "open_existing",
    "workspace_db",
]
