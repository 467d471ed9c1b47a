"""SQLite's SQL, as the shared reads and writes of :mod:`dse.record.sql` say it, run on
PostgreSQL: each statement is translated once (and cached) by a few fixed rules.

The rules: ``?`` and ``?N`` marks become psycopg's ``%s`` (a literal ``%`` is doubled);
``IFNULL`` is ``COALESCE``; ``TOTAL(x)`` is ``COALESCE(SUM(x), 0)``; the scalar ``MAX(a, b)``
and ``MIN(a, b)`` are ``GREATEST`` and ``LEAST``; ``json_extract(doc, '$.key')`` reads a number
of a JSON text; ``INSERT OR IGNORE`` is ``ON CONFLICT DO NOTHING``, and an upsert's
``DO UPDATE SET n = n + 1`` names the existing row by its table; ``a IS NOT b`` (``b`` not
``NULL``) is ``IS DISTINCT FROM``; SQLite's planner hints (a unary ``+`` on a column,
``INDEXED BY``) are dropped. Anything else must be SQL both databases read alike: the tests
run every read on both.
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import TYPE_CHECKING, Any

from dse.model._errors import StorageError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    import psycopg

_MARK = re.compile(r"'(?:[^']|'')*'|\?(\d*)|%")


_FUNCTION = re.compile(r"\b(TOTAL|MAX|MIN|json_extract)\(", re.IGNORECASE)


_HINT = re.compile(r"(?<=[\s(=])\+(?=[A-Za-z_][\w]*\.)|\s+INDEXED BY \w+")


_IS_NOT = re.compile(r"\bIS NOT (?!NULL\b)")


_UPSERT = re.compile(r"^\s*INSERT INTO (\w+).*? DO UPDATE SET ", re.DOTALL)


_BARE = re.compile(r"(?<![\w.'])([a-z_][a-z_0-9]*)(?![\w.(]|\s*=[^=])")


_OR_IGNORE = re.compile(r"^\s*INSERT OR IGNORE INTO\b", re.IGNORECASE)


def _arguments(sql: str, start: int) -> tuple[list[str], int]:
    """The top-level arguments of the call whose ``(`` is at *start*, and the index just past
    its ``)``."""
    depth, args, begin, i = 0, [], start + 1, start
    while i < len(sql):
        ch = sql[i]
        if ch == "'":
            i = sql.index("'", i + 1)
            while sql.startswith("''", i):
                i = sql.index("'", i + 2)
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(sql[begin:i])
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(sql[begin:i])
            begin = i + 1
        i += 1
    raise ValueError(f"unbalanced parentheses in {sql!r}")


def _functions(sql: str) -> str:
    """SQLite's functions of *sql* as PostgreSQL's (arguments translated first)."""
    out, at = [], 0
    while (found := _FUNCTION.search(sql, at)) is not None:
        args, end = _arguments(sql, found.end() - 1)
        args = [_functions(a) for a in args]
        name = found[1].upper()
        if name == "TOTAL":
            call = f"COALESCE(SUM({args[0]}), 0)"
        elif name in ("MAX", "MIN") and len(args) == 2:
            call = f"{'GREATEST' if name == 'MAX' else 'LEAST'}({args[0]}, {args[1]})"
        elif name == "JSON_EXTRACT":
            key = args[1].strip()
            if not (key.startswith("'$.") and key.endswith("'")):
                raise ValueError(f"json_extract path {key!r} is not '$.<key>'")
            call = f"CAST(CAST({args[0]} AS jsonb) ->> '{key[3:-1]}' AS double precision)"
        else:
            call = f"{found[1]}({', '.join(args)})"
        out.append(sql[at:found.start()] + call)
        at = end
    out.append(sql[at:])
    return "".join(out)


def rewrite(sql: str) -> str:
    """*sql* (SQLite's) with PostgreSQL's functions, conflicts and comparisons (its marks
    as they are)."""
    sql = _HINT.sub("", sql).replace("IFNULL(", "COALESCE(")
    sql = _IS_NOT.sub("IS DISTINCT FROM ", sql)
    if _OR_IGNORE.match(sql):
        sql = _OR_IGNORE.sub("INSERT INTO", sql).rstrip() + " ON CONFLICT DO NOTHING"
    upsert = _UPSERT.match(sql)
    if upsert is not None:
        # The existing row's columns named by its table (PostgreSQL's rule; SQLite's too).
        table, head = upsert[1], sql[:upsert.end()]
        sql = head + _BARE.sub(lambda m: f"{table}.{m[1]}", sql[upsert.end():])
    return _functions(sql)


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> tuple[str, tuple[int, ...] | None]:
    """*sql* (SQLite's) as PostgreSQL's, and the order its parameters are bound in: the index
    of the given parameter each ``%s`` takes, or ``None`` when they are bound as given."""
    sql = rewrite(sql)
    order: list[int] = []
    numbered = False

    def mark(found: re.Match[str]) -> str:
        nonlocal numbered
        text = found[0]
        if text == "%":
            return "%%"
        if not text.startswith("?"):
            return text  # a literal
        if found[1]:
            numbered = True
            order.append(int(found[1]) - 1)
        else:
            order.append(len(order))
        return "%s"

    sql = _MARK.sub(mark, sql)
    return sql, tuple(order) if numbered else None


def bound(order: tuple[int, ...] | None, params: Sequence[Any]) -> Sequence[Any]:
    """*params* in the order :func:`translate` said."""
    return params if order is None else [params[i] for i in order]


class Translating:
    """A psycopg connection that takes SQLite's SQL (see the module): what
    :class:`dse.record.sql.Queries` and :class:`dse.record.sql.SqlStore` run their statements
    on. Outside a transaction each statement commits on its own (autocommit): a read is its
    own short snapshot and never holds back a writer."""

    def __init__(self, connection: psycopg.Connection[Any], where: str) -> None:
        self.connection = connection
        self.where = where
        """The record, as messages name it."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> psycopg.Cursor[Any]:
        text, order = translate(sql)
        with self._reached():
            return self.connection.execute(text, bound(order, parameters))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> psycopg.Cursor[Any]:
        text, order = translate(sql)
        cursor = self.connection.cursor()
        with self._reached():
            cursor.executemany(text, [bound(order, r) for r in rows])
        return cursor

    @contextlib.contextmanager
    def _reached(self) -> Iterator[None]:
        """A server gone (restarted, shut down, unreachable: no SQLSTATE, or class 08 or 57P)
        as one :class:`StorageError` naming the record; any other error as it is (an aborted
        transaction, 40001 or 40P01, is retried)."""
        from psycopg import OperationalError

        try:
            yield
        except OperationalError as exc:
            state = exc.sqlstate
            if state is not None and not state.startswith(("08", "57P")):
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise StorageError(f"{self.where}: the record is unreachable ({first}); nothing"
                               " already recorded is lost") from None

    def returning(self, sql: str, rows: Iterable[Sequence[Any]]) -> Iterator[Any]:
        """Run the ``INSERT … RETURNING`` *sql* once per row of *rows*; each row returned."""
        text, order = translate(sql)
        rows = list(rows)
        if not rows:
            return
        cursor = self.connection.cursor()
        with self._reached():
            cursor.executemany(text, [bound(order, r) for r in rows], returning=True)
        while True:
            yield cursor.fetchone()
            if not cursor.nextset():
                return

    def close(self) -> None:
        self.connection.close()
