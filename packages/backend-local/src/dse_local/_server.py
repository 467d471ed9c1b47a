"""The wrapper server: the process that starts each attempt's wrapper, forked ahead."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import py_compile
import select
import subprocess
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from dse_local._warm import is_worker
from dse_local._wrapper import encode_request

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

log = logging.getLogger("dse.local")

WRAPPER = Path(__file__).with_name("_launch.py")
Request = tuple["Mapping[str, str]", "Sequence[str]"]
"""A wrapper's environment and arguments (``_wrapper.serve``)."""
PRELOAD_WAIT = 5.0
"""Seconds the first attempt of a Python function objective waits for its warm server to
import the function; attempts start cold until it has (an import that slow, or hung)."""


def compile_wrapper() -> None:
    """Cache the wrapper's bytecode (it starts once per trial), even where
    PYTHONDONTWRITEBYTECODE is set or the install skipped compiling."""
    source = WRAPPER.with_name("_wrapper.py")
    cached = Path(importlib.util.cache_from_source(str(source)))
    try:
        if not cached.exists() or cached.stat().st_mtime < source.stat().st_mtime:
            py_compile.compile(str(source), cfile=str(cached), doraise=True)
    except (OSError, py_compile.PyCompileError) as exc:
        log.debug("cannot cache the wrapper's bytecode: %s", exc)


_NO_SERVER = OSError("the wrapper server did not answer")


def _reply(line: bytes) -> tuple[int, int] | OSError:
    """What the server's answer *line* says: a wrapper's pid and start time, or an error."""
    words = line.split()
    if len(words) == 2 and words[0].isdigit() and words[1].isdigit():
        return int(words[0]), int(words[1])
    return OSError("the wrapper server could not start a wrapper")  # b"0": none took it


class WrapperServer:
    """The wrapper server (``_wrapper.serve``): hands each attempt to a wrapper it forked ahead.

    Starting a Python interpreter per attempt would cost every trial tens of milliseconds,
    and forking one (twice: the wrapper, then its workload) several on this path; the server
    keeps *spares* wrappers forked ahead, each with its workload's first process forked too,
    so a request costs a pipe round trip. Wrappers live in sessions of their own, so they
    outlive the server and the controller.
    """

    def __init__(self, python: str, preload: Sequence[str] | None = None) -> None:
        self.python = python
        self.preload = list(preload) if preload is not None else None
        """A warm server's command (``_warm.py``): it imports the function this command runs
        before it forks any wrapper, and takes only this command's attempts."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.spares = 1
        self.warm: bool | None = None if preload is not None else True
        """Whether it takes requests: a warm server once it said it preloaded (None while it
        imports; False once it could not, or died: its command's attempts start cold)."""
        self._wait = PRELOAD_WAIT
        self.pending: deque[tuple[object, Request]] = deque()
        """The requests sent and not answered yet, each with its tag, oldest first (the server
        answers in order)."""
        self._buffer = b""

    def start(self, spares: int) -> None:
        """Start the server now, with *spares* wrappers forked ahead (it starts at the first
        request otherwise)."""
        self.spares = spares
        if self.proc is None or self.proc.poll() is not None:
            self._start()

    def ready(self) -> bool:
        """Whether to hand it requests now: a warm server (started now, unless :meth:`start`
        started it) is taken once it said it preloaded the function. The first ask waits up to
        :data:`PRELOAD_WAIT` seconds for that (a cold start would pay the same imports);
        later asks never wait."""
        if self.warm is None:
            wait, self._wait = self._wait, 0.0
            proc = self.proc or self._start()
            assert proc.stdout is not None
            fd = proc.stdout.fileno()
            if select.select([fd], [], [], wait)[0]:
                self.warm = os.read(fd, 2) == b"1\n"
                if not self.warm:
                    self.close()
        elif self.warm and self.preload is not None and (
                self.proc is None or self.proc.poll() is not None):
            self.warm = False  # it died: not started again, its attempts start cold
        return bool(self.warm)

    def _start(self) -> subprocess.Popen[bytes]:
        # A warm server needs the command's interpreter as named (a virtual environment's,
        # not the one it links to) and its site packages; the plain one neither.
        command = (
            [self.python, "-S", str(WRAPPER), "--serve", str(self.spares)]
            if self.preload is None else
            [self.preload[0], str(WRAPPER), "--serve", str(self.spares), "--preload",
             *self.preload]
        )
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, bufsize=0,
        )
        return self.proc

    def send(self, requests: Sequence[tuple[object, Request]]) -> bool:
        """Send *requests* (each a tag and a request), all at once: each is answered later
        (:meth:`answers`), once its wrapper wrote its pid file. False if they could not be
        sent: the server ended (the requests it has not answered then get their errors from
        :meth:`answers` first, and the plain server starts again at the next send; a warm
        server does not)."""
        proc = self.proc if self.proc is not None and self.proc.poll() is None else None
        if proc is None:
            if self.preload is not None:
                self.warm = False
                return False
            if self.pending:
                return False
            self.close()  # what is left of one that ended
            proc = self._start()
        assert proc.stdin is not None
        try:
            proc.stdin.write(b"".join(
                b"%d\n%s" % (len(payload), payload)
                for payload in (encode_request(env, list(args))
                                for _tag, (env, args) in requests)))
        except OSError:
            return False
        self.pending.extend(requests)
        return True

    def fileno(self) -> int | None:
        """What becomes readable when an answer arrives (None: nothing is awaited)."""
        if not self.pending or self.proc is None or self.proc.stdout is None:
            return None
        return self.proc.stdout.fileno()

    def answers(self, *, block: bool) -> list[tuple[object, Request, tuple[int, int] | OSError]]:
        """The answers that arrived, oldest first, each with its tag and request: the wrapper's
        pid and start time (clock ticks since boot), or why it could not start. *block*: wait
        for every request sent. A server that ended answers the rest with an error."""
        out: list[tuple[object, Request, tuple[int, int] | OSError]] = []
        fd = self.fileno()
        while fd is not None and self.pending:
            if not block and not select.select([fd], [], [], 0)[0]:
                break
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:  # it ended: no answer comes for the rest
                out.extend((tag, request, OSError("the wrapper server did not answer"))
                           for tag, request in self._answered_none())
                break
            self._buffer += chunk
            while b"\n" in self._buffer and self.pending:
                line, self._buffer = self._buffer.split(b"\n", 1)
                tag, request = self.pending.popleft()
                out.append((tag, request, _reply(line)))
        return out

    def _answered_none(self) -> list[tuple[object, Request]]:
        """Forget the server (it ended, or cannot be written to): the requests it did not
        answer."""
        unanswered = list(self.pending)
        self.pending.clear()
        self._buffer = b""
        self.close()
        return unanswered

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


class Servers:
    """Which wrapper server starts each attempt: the plain one, or the warm server of a Python
    function objective's command (``_warm.py``) once that has imported the function."""

    def __init__(self, python: str, spares: int) -> None:
        self.plain = WrapperServer(python)
        self.plain.spares = spares
        self.warm: dict[tuple[str, ...], WrapperServer] = {}
        """A warm server per Python function objective's command."""
        self._failed: list[tuple[object, tuple[int, int] | OSError]] = []
        """Answers known without a server's word (it could not be reached), for the next
        :meth:`answers`."""
        self._retried: set[int] = set()
        """The tags (by identity) of requests sent again once already."""

    def start(self, spares: int) -> None:
        """Start the plain server now, each server keeping *spares* wrappers forked ahead."""
        self.plain.start(spares)
        for server in self.warm.values():
            server.spares = spares

    def expect(self, argv: tuple[str, ...]) -> None:
        """Start the warm server of *argv* now if it runs a Python function objective: by its
        first attempt it has imported the function."""
        if is_worker(argv) and argv not in self.warm:
            self._warm_server(argv).start(self.plain.spares)

    def _warm_server(self, argv: tuple[str, ...]) -> WrapperServer:
        server = self.warm.get(argv)
        if server is None:
            server = self.warm[argv] = WrapperServer(self.plain.python, preload=argv)
            server.spares = self.plain.spares
        return server

    def send(self, items: Sequence[tuple[object, Request, bool]]) -> None:
        """Send each (tag, request, whether it may start warm) to its server: a Python function
        objective's to its warm server once that is ready (never one *may_warm* excludes: an
        attempt given GPUs), the rest, and any a warm server could not take, to the plain
        one. Each is answered later (:meth:`answers`)."""
        warm: dict[tuple[str, ...], list[tuple[object, Request]]] = {}
        cold: list[tuple[object, Request]] = []
        for tag, request, may_warm in items:
            args = list(request[1])
            argv = tuple(args[args.index("--") + 1:])
            if may_warm and is_worker(argv) and self._warm_server(argv).ready():
                warm.setdefault(argv, []).append((tag, request))
            else:
                cold.append((tag, request))
        for argv, group in warm.items():
            if not self.warm[argv].send(group):
                cold.extend(group)
        if cold and not self.plain.send(cold):
            # It ended: what it did not answer gets its error, and it starts again, once.
            self._failed.extend(self._report(self.plain.answers(block=True), plain=True))
            if not self.plain.send(cold):
                self._failed.extend((tag, _NO_SERVER) for tag, _request in cold)

    def fds(self) -> list[int]:
        """What becomes readable when an answer arrives."""
        return [fd for fd in (s.fileno() for s in self._all()) if fd is not None]

    def answers(self, *, block: bool, ready: Collection[int] = ()
                ) -> list[tuple[object, tuple[int, int] | OSError]]:
        """The answers that arrived (from the servers whose descriptors are in *ready*, or
        every one when *block*: then every request sent is answered), each with its tag. A
        request a warm server could not answer is sent to the plain one; one the plain server
        did not answer (it ended) is sent once more."""
        out, self._failed = self._failed, []
        while True:
            for server in self._all():
                fd = server.fileno()
                if fd is not None and (block or fd in ready):
                    out.extend(self._report(server.answers(block=block),
                                            plain=server is self.plain))
            out, self._failed = out + self._failed, []
            if not block or not any(s.pending for s in self._all()):
                return out

    def _report(self, answers: list[tuple[object, Request, tuple[int, int] | OSError]], *,
                plain: bool) -> list[tuple[object, tuple[int, int] | OSError]]:
        """*answers* of the plain server (*plain*) or a warm one, but those to send again: a
        warm server's failures go to the plain one, the plain one's go to it once more."""
        out: list[tuple[object, tuple[int, int] | OSError]] = []
        again: list[tuple[object, Request, bool]] = []
        for tag, request, reply in answers:
            if isinstance(reply, OSError) and (not plain or id(tag) not in self._retried):
                self._retried.add(id(tag))
                again.append((tag, request, False))
            else:
                self._retried.discard(id(tag))
                out.append((tag, reply))
        if again:
            self.send(again)
        return out

    def _all(self) -> list[WrapperServer]:
        return [self.plain, *self.warm.values()]

    def close(self) -> None:
        self.plain.close()
        for server in self.warm.values():
            server.close()
