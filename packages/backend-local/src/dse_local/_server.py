"""The wrapper server: the process that starts each attempt's wrapper, forked ahead."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import py_compile
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from dse_local._wrapper import encode_request

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

log = logging.getLogger("dse.local")

WRAPPER = Path(__file__).with_name("_launch.py")


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

    def __init__(self, python: str) -> None:
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self.spares = 1

    def start(self, spares: int) -> None:
        """Start the server now, with *spares* wrappers forked ahead (it starts at the first
        request otherwise)."""
        self.spares = spares
        if self.proc is None or self.proc.poll() is not None:
            self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.proc = subprocess.Popen(
            [self.python, "-S", str(WRAPPER), "--serve", str(self.spares)],
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
