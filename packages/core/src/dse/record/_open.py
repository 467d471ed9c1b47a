"""Which record a command writes or reads: the workspace's SQLite file by default, or the
PostgreSQL database a URL names — ``--record URL``, else ``DSE_RECORD``, else the campaign
file's ``[campaign] record``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dse.campaign._campaignfile import RECORD_SCHEMES
from dse.model._errors import ConfigError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable

    from dse.record._base import Storage
    from dse.record.sql._store import SqlStore

RECORD_ENV = "DSE_RECORD"


"""The record every command uses when ``--record`` is not given: a ``postgresql://`` URL."""


def record_url(given: str | None = None, campaign: str | None = None) -> str | None:
    """The record URL a command uses: *given* (``--record``), else ``DSE_RECORD``, else the
    campaign file's *campaign*; ``None`` for the workspace's SQLite file. One that names no
    record dse knows is a :class:`ConfigError` naming where it came from."""
    for value, where in ((given, "--record"), (os.environ.get(RECORD_ENV), RECORD_ENV),
                         (campaign, "[campaign] record")):
        if value:
            if not value.startswith(RECORD_SCHEMES):
                raise ConfigError(f"{where}: {value!r} is not a record URL (postgresql://"
                                  "[user@]host[:port]/database; without it, the workspace's"
                                  " SQLite file is the record)")
            return value
    return None


def writer(workspace: str | Path, url: str | None, *, connect: bool = True,
           say: Callable[[str], None] | None = None) -> Storage:
    """The record a run writes: the PostgreSQL database *url* names (its trial directories in
    *workspace*), or the SQLite file of *workspace*."""
    if url is not None:
        from dse.record.postgres import PostgresStore

        return PostgresStore(url, workspace, connect=connect, say=say)
    from dse.record.sqlite import Store, workspace_db

    return Store(workspace_db(workspace), connect=connect, say=say)


def named(where: str, *, write: bool, say: Callable[[str], None] | None = None) -> SqlStore:
    """The record *where* names: a ``postgresql://`` URL, a ``.sqlite`` file or a workspace
    (its ``dse.sqlite``); an existing one read only, or with *write* opened (made if new)."""
    if where.startswith(RECORD_SCHEMES):
        from dse.record.postgres import PostgresStore

        return PostgresStore(where, Path(".dse"), read_only=not write, say=say)
    from dse.record.sqlite import Store, open_existing, workspace_db

    path = Path(where)
    if path.suffix == ".sqlite":
        if not write and not path.is_file():
            raise StoreError(f"{path}: no dse record here")
        return Store(path, read_only=not write, say=say)
    return Store(workspace_db(path), say=say) if write else open_existing(path, say=say)


def lease_state(workspace: str | Path, url: str | None, campaign: str) -> bool | None:
    """*campaign*'s lease in the record (:meth:`Storage.lease_state`), read without making a
    record: ``None`` when there is none yet. What a campaign lock asks of a holder that lives
    or is on another host."""
    try:
        store = reader(workspace, url)
    except StoreError:
        return None
    try:
        return store.lease_state(campaign)
    finally:
        store.close()


def reader(workspace: str | Path | None, url: str | None, *, write: bool = False,
           say: Callable[[str], None] | None = None) -> Storage:
    """The existing record a command reads (read only; with *write*, ``dse invalidate``)."""
    where = Path(workspace) if workspace is not None else Path(".dse")
    if url is not None:
        from dse.record.postgres import PostgresStore

        return PostgresStore(url, where, read_only=not write, say=say)
    from dse.record.sqlite import open_existing

    return open_existing(where, write=write, say=say)


def read_twin(store: Storage) -> Storage:
    """A reader of the record *store* writes, for another thread (a connection of its own)."""
    return reader(store.workspace, getattr(store, "url", None), say=None)
