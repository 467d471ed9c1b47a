"""A warm start for trials whose objective is a Python function (``python -m dse._worker``).

Such a trial's command starts a Python interpreter, imports dse and the user's module, then
calls one function: tens to hundreds of milliseconds of every trial, before it does anything.
The local backend starts, for each such command, a second wrapper server (``_launch.py
--serve N --preload ARGV...``, with the command's own interpreter and its site packages) that
imports the function once (:func:`load`, through ``dse._worker.prepare``) before it forks
any wrapper. Every attempt of that command is then the same as a cold one but for its start:
its first process, forked from the server with the function already imported, sets the
attempt's environment, working directory and logs, and calls the function
(:meth:`Warm.start`) instead of exec'ing a fresh interpreter. It is still a process of its
own, in a process group of its own under its wrapper: the time limit, a cancel, the kill of
what it leaves behind, its exit file, its peak memory are the wrapper's as for any command.
What the function changes in its module's state is gone with its process; the next attempt
is forked from the module as it was imported.

What differs from a cold start is only what ran at import: the module's top level ran once,
in the server (its output discarded), under the controller's environment rather than an
attempt's. A module whose import fails there, or asks for an attempt's environment, is not
preloaded: every attempt starts its own interpreter and says what went wrong, as before. A
trial given GPUs always starts its own interpreter (CUDA must start in the process that uses
it, never in a parent it was forked from).

This module is imported by the warm server alone (``_launch.py``), never by a cold wrapper.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]
import contextlib
import importlib
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import NoReturn

WORKER = ("-m", "dse._worker")
"""What follows the interpreter in a worker's command (``python -m dse._worker ARGS``)."""


def is_worker(argv: Sequence[str]) -> bool:
    """Whether *argv* runs a Python function objective (``PYTHON -m dse._worker ...``, as
    :func:`dse.run` names it: the interpreter by its absolute path, so the warm server runs
    the very interpreter a cold attempt would find; a bare ``python`` is searched on the
    attempt's ``PATH``, which the server's may not be)."""
    return len(argv) > 3 and tuple(argv[1:3]) == WORKER and os.path.isabs(argv[0])


class Warm:
    """A function imported once, which each attempt forked from here calls (:meth:`start`)."""

    __slots__ = ("argv", "module", "run")

    def __init__(self, argv: list[str], run: Callable[[], int]) -> None:
        self.argv = argv
        """The command it stands for: an attempt of exactly this command starts warm."""
        self.module = argv[2]
        """The worker's module (``python -m`` runs it as the main module)."""
        self.run = run

    def start(self, env: dict[str, str], started: int) -> NoReturn:
        """Run one attempt in this process (the workload's first, its logs and working
        directory set): *env* becomes the environment, *started* (the descriptor whose end
        tells the wrapper the workload started, as an exec closes it) is closed, the function
        is called, and the process exits as a fresh interpreter would."""
        os.environ.clear()
        os.environ.update(env)
        # As `python -m dse._worker` has it: the working directory first on the path, the
        # worker as the main module (multiprocessing's spawn imports it in its children).
        sys.path[0] = os.getcwd()
        sys.modules["__main__"] = sys.modules[self.module]
        # As a fresh interpreter starts: Ctrl+C raises, a closed pipe raises.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        os.close(started)
        code = 1
        try:
            code = self.run()
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except KeyboardInterrupt:
            _print_exception()
            _finish()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)  # ended by the signal, as Python ends
        except BaseException:  # noqa: BLE001 -- uncaught: its traceback and exit 1, as Python
            _print_exception()
        _finish()
        os._exit(code)


def _exit_code(code: object) -> int:
    """The exit status of ``sys.exit(code)``, its message printed as Python prints it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _print_exception() -> None:
    import traceback

    traceback.print_exc()


def _finish() -> None:
    """What a fresh interpreter does at its end: wait for the threads it started, run the
    exit handlers, flush its streams."""
    if "threading" in sys.modules:  # else no thread was started through it
        import threading

        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    import atexit

    atexit._run_exitfuncs()
    _flush()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()


def load(argv: list[str]) -> Warm | None:
    """Import the function the worker command *argv* runs, in this process, which forks every
    attempt of it; None if it cannot be (each attempt then starts cold). The module's own
    output while it imports is discarded, and it reads nothing: this process's stdin and
    stdout are the controller's pipes."""
    if not is_worker(argv):
        return None
    # `python _launch.py` put the wrapper's directory first on the path, where
    # `python -m` puts the working directory.
    sys.path[0] = os.getcwd()
    # Its stdin and stdout are the controller's pipes: the import sees /dev/null, as an
    # attempt does.
    saved = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    try:
        worker = importlib.import_module(argv[2])
        run = worker.prepare(argv[3:])
        if isinstance(run, int):
            return None  # not found, or its import failed: said by each cold attempt
        import dse.trial

        dse.trial.environment()  # what every result names: probed once, here
    except BaseException:  # noqa: BLE001 -- whatever stops it, the attempts start cold
        return None
    finally:
        _flush()  # before any fork: no child writes it again
        for fd, kept in enumerate(saved):
            os.dup2(kept, fd)
            os.close(kept)
    return Warm(list(argv), run)
