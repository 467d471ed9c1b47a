"""The wrapper server: the process that starts each attempt's wrapper, forked ahead."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import py_compile
import select
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from dse_local._warm import is_worker
from dse_local._wrapper import encode_request

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

log = logging.getLogger("dse.local")

WRAPPER = Path(__file__).with_name("_launch.py")
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
        self._wait = PRELOAD_WAIT
        """Whether it takes requests: a warm server once it said it preloaded (None while it
        imports; False once it could not, or died: its command's attempts start cold)."""

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

    def spawn(
        self, requests: Sequence[tuple[Mapping[str, str], Sequence[str]]]
    ) -> list[tuple[int, int] | OSError]:
        """Start a wrapper for each (environment, arguments) of *requests*, all sent at once;
        return each one's pid and start time (clock ticks since boot), its pid file written,
        or why it could not start."""
        out: list[tuple[int, int] | OSError] = []
        for retry in (False, True):
            todo = requests[len(out):]
            proc = self.proc if self.proc is not None and self.proc.poll() is None else None
            if proc is None and self.preload is not None:
                self.warm = False  # a warm server is not started again
                break
            proc = proc or self._start()
            assert proc.stdin is not None
            assert proc.stdout is not None
            message = b"".join(
                b"%d\n%s" % (len(payload), payload)
                for payload in (encode_request(env, list(args)) for env, args in todo)
            )
            try:
                proc.stdin.write(message)
                for line in self._lines(proc.stdout.fileno(), len(todo)):
                    words = line.split()
                    if len(words) == 2 and words[0].isdigit() and words[1].isdigit():
                        out.append((int(words[0]), int(words[1])))
                    elif words == [b"0"]:  # the server runs, but no wrapper took it
                        out.append(OSError("the wrapper server could not start a wrapper"))
                    else:
                        break
            except OSError:
                pass
            if len(out) == len(requests):
                return out
            self.close()
            if retry:
                break
        out.extend(OSError("the wrapper server did not answer") for _ in requests[len(out):])
        return out

    @staticmethod
    def _lines(fd: int, count: int) -> list[bytes]:
        """The next *count* lines the server writes (fewer if it ends first), read a pipe's
        worth at a time (its replies are all it writes, and it writes them once asked)."""
        data = b""
        while data.count(b"\n") < count:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        return data.split(b"\n")[: data.count(b"\n")]

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

    def spawn(self, requests: Sequence[tuple[Mapping[str, str], Sequence[str]]],
              may_warm: Sequence[bool]) -> list[tuple[int, int] | OSError]:
        """:meth:`WrapperServer.spawn` of each request: a Python function objective's on its
        warm server once that is ready (never for a request *may_warm* excludes: an attempt
        given GPUs), the rest, and any the warm server could not take, on the plain one."""
        replies: list[tuple[int, int] | OSError | None] = [None] * len(requests)
        warm: dict[tuple[str, ...], list[int]] = {}
        for i, (_env, args) in enumerate(requests):
            argv = tuple(args[list(args).index("--") + 1:])
            if may_warm[i] and is_worker(argv) and self._warm_server(argv).ready():
                warm.setdefault(argv, []).append(i)
        for argv, indices in warm.items():
            got = self.warm[argv].spawn([requests[i] for i in indices])
            for i, reply in zip(indices, got, strict=True):
                replies[i] = None if isinstance(reply, OSError) else reply
        cold = [i for i, reply in enumerate(replies) if reply is None]
        for i, reply in zip(cold, self.plain.spawn([requests[i] for i in cold]), strict=True):
            replies[i] = reply
        return [reply for reply in replies if reply is not None]

    def close(self) -> None:
        self.plain.close()
        for server in self.warm.values():
            server.close()
