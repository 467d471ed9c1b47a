"""``dse dashboard``: a live web view of a record (SQLite workspace or PostgreSQL), read only.

:func:`open_dashboard` makes the server (:mod:`dse.dashboard._server`); the page and its
charting library are in ``static/`` (ECharts, vendored at a pinned version: see
``static/VENDORED.md``).
"""

from __future__ import annotations

from dse.dashboard._server import Dashboard, open_dashboard

__all__ = ["Dashboard", "open_dashboard"]
