"""The PostgreSQL record (``pip install 'dse-core[postgres]'``): one database that controllers
on many hosts share, named by a URL. The same rows, summaries and reads as the SQLite
workspace (:mod:`dse.record.sql`), translated (:mod:`dse.record.postgres._dialect`)."""

from dse.record.postgres._store import PostgresStore, shown

__all__ = ["PostgresStore", "shown"]
