"""``dse dashboard``: a local web app over the record, served by the standard library.

One process serves the page (``static/``: HTML, CSS, the app's JavaScript and the charting
library vendored with it: nothing is fetched from the network) and a JSON API over the record
it reads, read only: each request thread holds a reader of its own, every read is a short
statement, so a running campaign is never held back. One thread (:class:`Watch`) reads the
record's change stamp twice a second and wakes the pages listening on ``/api/events``
(server-sent events): a trial committed shows within a second.

Bound to a loopback address it asks nothing; bound anywhere else it asks a token (printed
with the address), given once as ``?token=`` and then kept in a cookie.
"""

from __future__ import annotations

import contextlib
import hmac
import http.server
import ipaddress
import json
import mimetypes
import re
import secrets
import threading
import urllib.parse
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar

from dse.dashboard import _data
from dse.model._errors import DseError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from dse.record._base import Storage

POLL_S = 0.5
"""How often :class:`Watch` reads the record's change stamp."""
PRIMED_WAIT_S = 5.0
"""How long an API read waits for the watch's first stamp (the record slow to open)."""
KEEPALIVE_S = 15.0
"""How often a quiet event stream sends a comment (proxies close silent connections)."""
COOKIE = "dse_dashboard_token"

_ROUTES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^/api/runs$"), "runs"),
    (re.compile(r"^/api/runs/(\d+)/trials$"), "trials"),
    (re.compile(r"^/api/runs/(\d+)/trials/(\d+)$"), "trial"),
    (re.compile(r"^/api/runs/(\d+)/figures$"), "figures"),
]


def loopback(host: str) -> bool:
    """Whether *host* (an address or ``localhost``) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Watch(threading.Thread):
    """Reads the record's change stamp every :data:`POLL_S` and counts its changes; the
    event streams wait on it (one reader for every page open)."""

    def __init__(self, opener: Callable[[], Storage]) -> None:
        super().__init__(name="dse-dashboard-watch", daemon=True)
        self._opener = opener
        self._changed = threading.Condition()
        self.generation = 0
        self._stop = threading.Event()
        self.primed = threading.Event()
        """Set once the record's first stamp is read: what generation 0 stands for (a page
        read before it could not tell whether a change came between)."""

    def run(self) -> None:
        store, last = None, None
        first = True
        while first or not self._stop.wait(POLL_S):
            try:
                store = store or self._opener()
                stamp = store.pages.stamp()
            except Exception:  # noqa: BLE001 - the record away a moment: read again
                if first and self._stop.wait(POLL_S):
                    break
                if store is not None:
                    with contextlib.suppress(Exception):
                        store.close()
                store = None
                continue
            if first:  # the record as it is: generation 0, no change
                first, last = False, stamp
                self.primed.set()
            elif stamp != last:
                last = stamp
                with self._changed:
                    self.generation += 1
                    self._changed.notify_all()
        if store is not None:
            store.close()

    def wait_change(self, seen: int, timeout: float) -> int:
        """The generation after *seen*, once the record changed (or *seen* on timeout)."""
        with self._changed:
            self._changed.wait_for(lambda: self.generation != seen or self._stop.is_set(),
                                   timeout)
            return self.generation

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()


class Dashboard(http.server.ThreadingHTTPServer):
    """The HTTP server: the page, the API and the event stream of one record."""

    daemon_threads = True

    def __init__(self, opener: Callable[[], Storage], host: str, port: int,
                 token: str | None) -> None:
        super().__init__((host, port), Handler)
        self.opener = opener
        self.token = token
        self.watch = Watch(opener)
        self._local = threading.local()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        text = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{text}]" if ":" in text else text
        query = f"/?token={self.token}" if self.token else "/"
        return f"http://{shown}:{port}{query}"

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection in its thread (a browser keeps one open for many requests),
        then close the reader it opened: a reader is the thread's (SQLite's connections are
        their thread's), and the thread ends with the connection."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.forget_store()

    def store(self) -> Storage:
        """This connection's thread's reader of the record, opened at its first read."""
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = self.opener()
        return store

    def forget_store(self) -> None:
        """Close this thread's reader (its connection failed, or the thread ends): the next
        request opens one."""
        store = getattr(self._local, "store", None)
        self._local.store = None
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()

    def serve(self) -> None:
        self.watch.start()
        try:
            self.serve_forever(poll_interval=0.2)
        finally:
            self.watch.stop()
            self.server_close()


class Handler(http.server.BaseHTTPRequestHandler):
    """One request: a static file, an API read (JSON) or the event stream."""

    server: Dashboard
    protocol_version = "HTTP/1.1"
    STATIC: ClassVar[Any] = resources.files("dse.dashboard") / "static"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the address and errors, not every request."""

    def do_GET(self) -> None:
        parts = urllib.parse.urlsplit(self.path)
        args = dict(urllib.parse.parse_qsl(parts.query))
        if not self._allowed(args):
            self._send(403, b"a token is needed: open the address dse dashboard printed\n",
                       "text/plain; charset=utf-8")
            return
        if parts.path == "/api/events":
            self._events()
        elif parts.path.startswith("/api/"):
            self._api(parts.path, args)
        else:
            self._static(parts.path, args)

    def _allowed(self, args: dict[str, str]) -> bool:
        token = self.server.token
        if token is None:
            return True
        given = args.get("token") or ""
        for part in (self.headers.get("Cookie") or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and not given:
                given = value
        return hmac.compare_digest(given.encode(), token.encode())

    def _api(self, path: str, args: dict[str, str]) -> None:
        route = next(((name, found) for pattern, name in _ROUTES
                      if (found := pattern.match(path)) is not None), None)
        if route is None:
            self._json(404, {"error": f"no such API: {path}"})
            return
        name, found = route
        ids = [int(g) for g in found.groups()]
        # Read before the record: the answer holds at least what that generation saw, so a
        # page drawn from it redraws on a later generation's event only (none missed).
        self.server.watch.primed.wait(PRIMED_WAIT_S)
        generation = self.server.watch.generation
        try:
            store = self.server.store()
            body = self._read(store, name, ids, args)
        except DseError as exc:
            self._json(400 if name != "trial" else 404, {"error": str(exc)})
            return
        except Exception as exc:  # noqa: BLE001 - a reader gone bad: one line, a new reader
            self.server.forget_store()
            self._json(503, {"error": f"{type(exc).__name__}: {exc}"})
            return
        self._json(200, body, generation=generation)

    @staticmethod
    def _read(store: Storage, name: str, ids: list[int], args: dict[str, str]) -> Any:
        if name == "runs":
            return {"where": store.where, "runs": _data.runs(store)}
        if name == "trials":
            return _data.trial_page(store, ids[0], args)
        if name == "trial":
            return _data.trial_record(store, ids[0], ids[1])
        return _data.figures(store, ids[0])

    def _events(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        watch = self.server.watch
        seen = watch.generation
        try:
            self.wfile.write(f"event: change\ndata: {seen}\n\n".encode())
            self.wfile.flush()
            while not watch.stopped:
                now = watch.wait_change(seen, KEEPALIVE_S)
                message = f"event: change\ndata: {now}\n\n" if now != seen else ": quiet\n\n"
                seen = now
                self.wfile.write(message.encode())
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return

    def _static(self, path: str, args: dict[str, str]) -> None:
        name = "index.html" if path in ("", "/") else path.lstrip("/")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            self._send(404, b"not found\n", "text/plain; charset=utf-8")
            return
        target = self.STATIC / name
        if not target.is_file():
            self._send(404, b"not found\n", "text/plain; charset=utf-8")
            return
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        cookie = None
        if self.server.token and args.get("token"):
            cookie = f"{COOKIE}={self.server.token}; HttpOnly; SameSite=Strict; Path=/"
        self._send(200, target.read_bytes(), kind, cookie=cookie,
                   cache="max-age=3600" if name.endswith(".min.js") else "no-cache")

    def _json(self, code: int, body: Any, *, generation: int | None = None) -> None:
        self._send(code, json.dumps(body, allow_nan=False).encode(),
                   "application/json; charset=utf-8", generation=generation)

    def _send(self, code: int, data: bytes, kind: str, *, cookie: str | None = None,
              cache: str = "no-store", generation: int | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", cache)
        self.send_header("X-Content-Type-Options", "nosniff")
        if generation is not None:
            self.send_header("X-Dse-Generation", str(generation))
        if cookie:
            self.send_header("Set-Cookie", cookie)
        self.end_headers()
        self.wfile.write(data)


def new_token() -> str:
    """A token for a dashboard bound beyond loopback."""
    return secrets.token_urlsafe(18)


def open_dashboard(workspace: Path | None, url: str | None, *, host: str = "127.0.0.1",
                   port: int = 8765, token: str | None = None) -> Dashboard:
    """The dashboard of the record at *url* (else the workspace's SQLite file), bound to
    *host*:*port* (port 0: any free one). Beyond loopback it asks a token (*token*, else a new
    one). The record is opened once here, so a missing one is an error before the server
    starts."""
    from dse.record._open import reader

    def opener() -> Storage:
        return reader(workspace, url)

    opener().close()
    if token is None and not loopback(host):
        token = new_token()
    return Dashboard(opener, host, port, token)
