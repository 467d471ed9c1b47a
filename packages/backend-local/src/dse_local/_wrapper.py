"""The attempt wrapper: runs one workload and writes how it ended, whatever the controller does.

The local backend runs a wrapper server (``python -S _launch.py --serve N``, :func:`serve`)
that keeps N wrappers forked ahead, each in a session of its own with its workload's first
process forked too and waiting for its command: forking a Python process costs milliseconds
(page-table copies and copy-on-write faults), paid while the previous trial runs rather than
between its end and the next start. A wrapper can also be started on its own, as::

    python -S _launch.py ATTEMPT_DIR GRACE LIMIT STDOUT STDERR CWD -- ARGV...

(``_launch.py`` imports this module so that its compiled form is cached; ``LIMIT`` and
``CWD`` may be empty). Every process here is forked once per trial, so the module imports
only what is small: no ``json``, no ``subprocess``, no ``enum``.

It makes itself a child subreaper (descendants that detach are re-parented to it and can be
found), starts the workload in a process group of its own with stdout and stderr going to
files, enforces the time limit itself (so a limit holds after the controller died), turns a
SIGTERM from the controller into SIGTERM → grace → SIGKILL of every descendant, kills
whatever the workload left behind, and finally writes ``exit.json`` atomically in the attempt
directory: exit code or signal, start and end times, peak RSS, and whether the end was a
time-out or a cancel. The workload's first process is started with ``PR_SET_PDEATHSIG``
(SIGKILL), so it dies with a wrapper killed from outside; the rest of the session is then
killed by the controller before it records the attempt as ended.
"""

from __future__ import annotations

# The C module behind `signal`: the same functions and numbers without importing `enum`,
# which alone would add milliseconds to every trial.
import _signal as signal  # type: ignore[import-not-found]
import errno
import os
import resource
import select
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # no `typing` import at run time: the wrapper imports only what starts fast
    from collections.abc import Mapping

    from dse_local._warm import Warm

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _descendants(root: int) -> list[int]:
    """Pids of every live descendant of *root* (walking /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _has_leftovers(pgid: int) -> bool:
    """Cheap test for processes the workload left: its group, or orphans re-parented to us."""
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        pass
    pid = os.getpid()
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid), "rb") as handle:
            return bool(handle.read().strip())
    except OSError:
        return bool(_descendants(pid))


def _signal_all(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, sig)
        except OSError:
            pass


REAPED: dict[int, int] = {}
"""Wait statuses of children reaped while cleaning up (the workload may be one of them)."""


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def _kill_everything(pgid: int) -> None:
    """SIGKILL the group and every descendant until none is left; reap them."""
    for _ in range(200):
        _signal_all(pgid, signal.SIGKILL)
        _reap()
        if not _descendants(os.getpid()):
            return
        time.sleep(0.01)


class _State:
    """What happened to the attempt so far (no dataclass: it would import more)."""

    __slots__ = ("cancelled", "term_at", "termed", "timed_out")

    def __init__(self) -> None:
        self.cancelled = False
        self.timed_out = False
        self.termed = False
        self.term_at: float | None = None


def _json_str(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ord(ch) < 0x20:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _json_value(value: object) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _json_str(value)
    return repr(value)


# The attempt directory lies in the trial's directory, which the trial writes as it likes (an
# attempt may leave files in the directory of the next): nothing there is followed if it is a
# symlink or waited on if it is a FIFO.
_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def write_atomic(path: str, data: bytes) -> None:
    """Replace *path* with *data* through a fresh temporary file (``O_EXCL``, an
    unpredictable name), so nothing already in the directory is written through."""
    tmp = "%s.%d.%s.tmp" % (path, os.getpid(), os.urandom(6).hex())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_small(path: str, limit: int = 1 << 16, dir_fd: int | None = None) -> bytes | None:
    """The bytes of the regular file *path* (at most *limit*; relative to the open directory
    *dir_fd* if given), or ``None`` when it is missing, a symlink, not a regular file or
    unreadable; never blocks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | _NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not _is_regular(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _is_regular(mode: int) -> bool:
    return mode & 0o170000 == 0o100000  # stat.S_ISREG, without importing stat


TRIAL_DEPTH = 2
"""The directories of an attempt's path a trial can replace: its attempt directory and the
trial directory above it (the run's directory above them is the controller's)."""


def open_attempt_dir(path: str) -> int:
    """The attempt directory *path*, open: its last :data:`TRIAL_DEPTH` components (the
    attempt and trial directories, which trials can write beside and replace) are walked
    without following a symlink, so nothing is ever written outside the run's directory.

    :raises OSError: one of them is missing, a symlink (``ELOOP``) or not a directory.
    """
    parts = path.rstrip("/").split("/")
    top = "/".join(parts[:-TRIAL_DEPTH]) or "/"
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[-TRIAL_DEPTH:]:
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                            dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _enter(attempt_dir: str) -> None:
    """Make the attempt directory this wrapper's working directory, reached by
    :func:`open_attempt_dir`: the wrapper writes its files there by name, and its working
    directory is how a restarted controller tells it apart from any other process (the
    pid file is only a hint)."""
    fd = open_attempt_dir(attempt_dir)
    try:
        os.fchdir(fd)
    finally:
        os.close(fd)


def _open_log(path: str) -> int:
    """Open an attempt's log for appending; refuse (``OSError``) anything but a regular file
    in the attempt directory (:func:`open_attempt_dir`)."""
    try:
        dir_fd = open_attempt_dir(os.path.dirname(path))
    except OSError as exc:
        words = "a symlink" if exc.errno == errno.ELOOP else exc.strerror
        raise OSError(exc.errno, words, os.path.dirname(path)) from None
    try:
        fd = os.open(os.path.basename(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND
                     | _NOFOLLOW, 0o644, dir_fd=dir_fd)
    except OSError as exc:
        # ELOOP: a symlink (never followed); ENXIO: a FIFO nobody reads, or a socket.
        known = {errno.ELOOP: "a symlink", errno.ENXIO: "a FIFO or a socket"}
        words = known.get(exc.errno or 0, exc.strerror)
        raise OSError(exc.errno, words, path) from None
    finally:
        os.close(dir_fd)
    if not _is_regular(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, "not a regular file", path)
    os.set_blocking(fd, True)
    return fd


def _pid_line() -> bytes:
    """This process's pid and start time (clock ticks since boot), as ``wrapper.pid`` holds
    them."""
    with open("/proc/self/stat", "rb") as handle:
        stat = handle.read()
    return b"%d %s\n" % (os.getpid(), stat[stat.rfind(b")") + 2 :].split()[19])


def _write_pid_file(attempt_dir: str, line: bytes | None = None) -> bytes:
    """Enter *attempt_dir* (:func:`_enter`) and write ``wrapper.pid`` there: pid and start
    time (*line*, read now if not given), a hint for a controller that restarts; return the
    line written (the server hands it to the controller as its reply)."""
    _enter(attempt_dir)
    line = line or _pid_line()
    write_atomic("wrapper.pid", line)
    return line


_PRCTL: list[object] = []
"""The C ``prctl`` and the module that calls it, once found (the wrapper server finds them
before it forks: every wrapper then has them without importing or looking up anything)."""


def _find_prctl() -> bool:
    """Find ``prctl`` through the C layer of ctypes (importing `ctypes` itself costs
    milliseconds); whether it could be found."""
    if not _PRCTL:
        try:
            import _ctypes

            prctl = _ctypes.dlsym(_ctypes.dlopen(None, 0), "prctl")  # type: ignore[arg-type]
        except (ImportError, OSError, AttributeError):
            return False
        _PRCTL.extend((_ctypes, prctl))
    return True


def _prctl(option: int, arg: int) -> bool:
    """``prctl(option, arg)``; whether it could be called."""
    if not _find_prctl():
        return False
    module, prctl = _PRCTL
    try:
        module.call_function(prctl, (option, arg, 0, 0, 0))  # type: ignore[attr-defined]
    except OSError:
        return False
    return True


def _subreaper() -> None:
    # Without a subreaper, the process group and the walk below still apply.
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


class _Stub:
    """The workload's first process, forked ahead of its command (:func:`_prestart`)."""

    __slots__ = ("err_r", "go_w", "pid")

    def __init__(self, pid: int, go_w: int, err_r: int) -> None:
        self.pid = pid
        self.go_w = go_w
        self.err_r = err_r


def _prestart(close: tuple[int, ...] = ()) -> _Stub:
    """Fork the workload's first process before its command is known: forking a Python
    process costs milliseconds, which a wrapper forked ahead (:func:`serve`) pays while it
    waits rather than on the trial's path. The child sets its parent-death signal, its own
    process group and default signal handling, then waits for :func:`_go`'s request; it
    ends quietly at end of input (the wrapper was never used). *close*: the wrapper's
    descriptors it must not hold."""
    go_r, go_w = os.pipe()
    err_r, err_w = os.pipe()  # close-on-exec: the wrapper reads EOF once exec succeeded
    wrapper = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(go_w)
            os.close(err_r)
            for fd in close:
                os.close(fd)
            _stub(wrapper, go_r, err_w)
        finally:
            os._exit(127)
    os.close(go_r)
    os.close(err_w)
    return _Stub(pid, go_w, err_r)


def _stub(wrapper: int, go_r: int, err_w: int) -> None:
    """The workload's first process until its exec (see :func:`_prestart`)."""
    # A watchdog for a wrapper killed from outside (the OOM killer, kill -9): the workload's
    # first process dies with it. What it started lives on in the session until the
    # controller, seeing the wrapper gone without its exit file, kills the session (at once,
    # or when it is started again).
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != wrapper:
        os._exit(137)  # the wrapper died before the watchdog was set
    os.setpgid(0, 0)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    payload = _read_to_end(go_r)
    if not payload:
        os._exit(0)  # never used: the server or the wrapper ended
    argv: list[str] = []
    try:
        env, args = _split_request(decode_fields(payload))
        stdout, stderr, cwd = args[3], args[4], args[5]
        argv = args[7:]
        try:
            out_fd = _open_log(stdout)
            err_fd = out_fd if stderr == stdout else _open_log(stderr)
        except OSError as exc:
            # Something the trial left where its log goes: the trial's doing, like a bad
            # command.
            os.write(err_w, ("cannot open %s: %s" % (exc.filename, exc.strerror)).encode(
                errors="replace"))
            os._exit(127)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        if cwd:
            os.chdir(cwd)
        if _WARM is not None and argv == _WARM.argv:
            _WARM.start(env, err_w)  # the function imported already: called, not exec'd
        _execvpe(argv, env)
    except BaseException as exc:  # noqa: BLE001 - report any failure to exec, then die
        try:
            text = type(exc).__name__ + ": " + str(exc)
            if isinstance(exc, OSError) and exc.filename is None and argv:
                text += ": " + repr(argv[0])  # execvp's error does not name the command
            os.write(err_w, text.encode(errors="replace"))
        finally:
            os._exit(127)


def _execvpe(argv: list[str], env: dict[str, str]) -> None:
    """``os.execvpe(argv[0], argv, env)``, the same search of *env*'s ``PATH`` and the same
    error, without the `warnings` module ``os.get_exec_path`` imports: milliseconds of
    every trial's start."""
    name = argv[0]
    if os.path.dirname(name):
        os.execve(name, argv, env)
    path = env.get("PATH")
    saved: OSError | None = None
    last: OSError | None = None
    for directory in (os.defpath if path is None else path).split(os.pathsep):
        try:
            os.execve(os.path.join(directory, name), argv, env)
        except (FileNotFoundError, NotADirectoryError) as exc:
            last = exc
        except OSError as exc:
            last = exc
            saved = saved or exc
    assert last is not None
    raise saved or last


def _read_to_end(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _go(stub: _Stub, payload: bytes) -> tuple[int | None, str | None]:
    """Hand the stub its request (*payload*: the wrapper's environment and arguments); return
    (the workload's pid, or None and why it could not start)."""
    try:
        _write_all(stub.go_w, payload)
    except OSError:
        pass  # it died: its error (or none) tells the rest
    os.close(stub.go_w)
    error = _read_to_end(stub.err_r)
    if error:
        os.waitpid(stub.pid, 0)
        return None, error.decode(errors="replace")
    return stub.pid, None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _split_request(fields: list[str]) -> tuple[dict[str, str], list[str]]:
    """(environment, wrapper arguments) of a request's fields (:func:`serve`)."""
    split = 1 + 2 * int(fields[0])
    return dict(zip(fields[1:split:2], fields[2:split:2], strict=True)), fields[split:]


def encode_request(env: Mapping[str, str], args: list[str]) -> bytes:
    """A wrapper's environment and arguments as one request payload (:func:`serve`)."""
    fields = [b"%d" % len(env)]
    for key, value in env.items():
        fields += (os.fsencode(key), os.fsencode(value))
    fields.extend(os.fsencode(a) for a in args)
    return encode_fields(fields)


def main(args: list[str]) -> int:
    """Run one attempt; *args* is ``DIR GRACE LIMIT STDOUT STDERR CWD -- ARGV...`` (a wrapper
    started on its own rather than forked by :func:`serve`)."""
    _write_pid_file(args[0])
    _subreaper()
    return attempt(args, _prestart(), encode_request(os.environ, args))


def attempt(args: list[str], stub: _Stub, payload: bytes) -> int:
    """Run one attempt whose pid file is written, its first process forked ahead (*stub*,
    which is handed *payload*: the environment and *args*, ``DIR GRACE LIMIT STDOUT STDERR
    CWD -- ARGV...``)."""
    attempt_dir, grace_text, limit_text, _stdout, _stderr, _cwd, sep = args[:7]
    assert sep == "--", "usage: _wrapper.py DIR GRACE LIMIT STDOUT STDERR CWD -- ARGV..."
    grace = float(grace_text)
    limit = float(limit_text) if limit_text else None
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    state = _State()

    def on_term(signum: int, frame: object) -> None:
        state.cancelled = True
        if state.term_at is None:
            state.term_at = time.monotonic()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # The controller starts us with SIGTERM and SIGINT blocked, so a cancel sent before the
    # handlers above existed is pending rather than lost: it is delivered now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    started = time.time()
    start_mono = time.monotonic()
    pid, error = _go(stub, payload)
    code, sig = (None, None) if pid is None else _run(pid, state, wake_r, limit, grace, start_mono)
    ended = time.time()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    _write_exit([
        ("exit_code", code),
        ("signal", sig),
        ("started_at", started),
        ("ended_at", ended),
        ("peak_rss_kb", int(usage.ru_maxrss)),
        ("timed_out", state.timed_out),
        ("cancelled", state.cancelled and not state.timed_out),
        ("launch_error", error),
        ("wrapper_pid", os.getpid()),
        ("moved", _moved(attempt_dir)),
    ])
    return 0


def _moved(attempt_dir: str) -> bool:
    """Whether the attempt directory (this wrapper's working directory) is no longer where
    the attempt was started (the project moved while it ran, after its controller was
    killed): the paths the workload was handed led nowhere, so how it ended says nothing
    about its configuration."""
    if not os.path.isabs(attempt_dir):
        return False
    try:
        there, here = os.stat(attempt_dir), os.stat(".")
    except OSError:
        return True
    return (there.st_dev, there.st_ino) != (here.st_dev, here.st_ino)


def _run(
    pid: int, state: _State, wake_r: int, limit: float | None, grace: float, start_mono: float
) -> tuple[int | None, int | None]:
    """Wait for the workload *pid* to end, ending it at its time limit or on a cancel
    (SIGTERM, *grace*, SIGKILL of its whole tree); return its exit code and signal."""
    code: int | None = None
    sig: int | None = None
    pgid = pid
    pidfd = os.pidfd_open(pid)
    while True:
        now = time.monotonic()
        if state.term_at is None and limit is not None and now - start_mono >= limit:
            state.timed_out = True
            state.term_at = now
        timeout = None
        if state.term_at is not None:
            if not state.termed:
                state.termed = True
                _signal_all(pgid, signal.SIGTERM)
            left = grace - (now - state.term_at)
            if left <= 0:
                _kill_everything(pgid)
                left = 0.05
            timeout = left
        elif limit is not None:
            timeout = max(limit - (now - start_mono), 0.0)
        ready, _, _ = select.select([pidfd, wake_r], [], [], timeout)
        if wake_r in ready:
            try:
                os.read(wake_r, 512)
            except BlockingIOError:
                pass
        if pidfd in ready or pid in REAPED:
            status = REAPED.pop(pid) if pid in REAPED else os.waitpid(pid, 0)[1]
            code = os.waitstatus_to_exitcode(status)
            if code < 0:
                sig, code = -code, None
            break
    os.close(pidfd)
    # Nothing a trial started may outlive it: stop what is left in its group and below.
    if _has_leftovers(pgid):
        _signal_all(pgid, signal.SIGTERM)
        end = time.monotonic() + min(grace, 2.0)
        while time.monotonic() < end:
            _reap()
            if not _descendants(os.getpid()):
                break
            time.sleep(0.02)
        _kill_everything(pgid)
    return code, sig


def _write_exit(fields: list[tuple[str, object]]) -> None:
    text = "{" + ", ".join(_json_str(k) + ": " + _json_value(v) for k, v in fields) + "}\n"
    # No fsync: the file must survive the controller's death, not the machine's (a machine
    # crash ends the attempt too, and a lost attempt is retried). Written by name in the
    # working directory, the attempt directory (entered before the pid file was written):
    # never through a symlink put in its place since.
    write_atomic("exit.json", text.encode())


def encode_fields(fields: list[bytes]) -> bytes:
    """*fields* as one request payload: each field its decimal length, ``:``, its bytes."""
    return b"".join(b"%d:%s" % (len(field), field) for field in fields)


def decode_fields(payload: bytes) -> list[str]:
    """The fields of a payload :func:`encode_fields` made, decoded as file names are."""
    fields = []
    pos = 0
    while pos < len(payload):
        colon = payload.index(b":", pos)
        start = colon + 1
        end = start + int(payload[pos:colon])
        fields.append(payload[start:end].decode("utf-8", "surrogateescape"))
        pos = end
    return fields


SPARES = 1
"""Wrappers the server keeps forked ahead (the controller asks for more: ``--serve N``)."""
_WARM: Warm | None = None
"""The function this server imported (``_warm.py``): its command's attempts start warm."""


class _Spare:
    """A wrapper forked ahead by the server, waiting for its request (:func:`_spare`)."""

    __slots__ = ("ack_r", "pid", "req_w")

    def __init__(self, pid: int, req_w: int, ack_r: int) -> None:
        self.pid = pid
        self.req_w = req_w
        self.ack_r = ack_r


def _fork_spare(others: list[_Spare], null: int) -> _Spare:
    req_r, req_w = os.pipe()
    ack_r, ack_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            # Only its own pipes: a spare holding another's would keep it from ever seeing
            # the end of its input.
            for other in others:
                for fd in (other.req_w, other.ack_r):
                    if fd >= 0:  # -1: closed in the server (its number may be reused)
                        os.close(fd)
            os.close(req_w)
            os.close(ack_r)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.close(null)
            code = _spare(req_r, ack_w)
        finally:
            os._exit(code)
    os.close(req_r)
    os.close(ack_w)
    return _Spare(pid, req_w, ack_r)


def _spare(req_r: int, ack_w: int) -> int:
    """A wrapper forked ahead: a session of its own, the workload's first process forked
    (:func:`_prestart`); then it waits for its request. It writes its pid file before it
    acknowledges the request (so the pid file exists once the controller learns its pid),
    then runs the attempt. At end of input (the server ended) it ends without a trace."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _subreaper()
    stub = _prestart(close=(req_r, ack_w))
    line = _pid_line()  # while it waits
    payload = _read_to_end(req_r)
    if not payload:
        os.close(stub.go_w)  # the stub ends too
        return 0
    _env, args = _split_request(decode_fields(payload))
    os.write(ack_w, _write_pid_file(args[0], line))
    os.close(ack_w)
    return attempt(args, stub, payload)


def _give(spare: _Spare, payload: bytes) -> None:
    """Hand *spare* its request (:func:`_taken` reads its answer)."""
    try:
        _write_all(spare.req_w, payload)
    except OSError:
        pass  # it died while it waited: no acknowledgement comes
    os.close(spare.req_w)
    spare.req_w = -1


def _taken(spare: _Spare) -> bytes:
    """The ``pid ticks`` line of the wrapper *spare* once its pid file is written, or b""
    if it is gone."""
    ack = _read_to_end(spare.ack_r)
    spare.ack_r = -1
    return ack if ack.endswith(b"\n") else b""


def serve(spares: int = SPARES, warm: Warm | None = None) -> int:
    """The wrapper server: so no attempt pays Python's start, nor a fork on its path.

    It keeps *spares* wrappers forked ahead (:func:`_spare`), each with its workload's first
    process forked too, and hands each request to one. Requests arrive on stdin, each a
    decimal length and a newline, then that many bytes of fields (:func:`decode_fields`): the
    number of environment entries, each entry's name and value, then the wrapper's arguments.
    Every field carries its own length, so no byte of a value (a newline, a NUL, an ``=``)
    can split it or start another. Each request is answered on stdout, once the wrapper's
    pid file is written, with the wrapper's pid and start time (``0`` if none could take
    it). The server ends at end of input (its controller is gone), and its idle spares with
    it; wrappers already running live on, each in a session of its own.

    A server started to preload a function (*warm*, ``_launch.py --serve N --preload
    ARGV...``) first says whether it could: ``1`` or ``0`` and a newline, before any reply.
    """
    global _WARM
    _WARM = warm
    # Wrappers must start with these blocked: a cancel sent before a wrapper installed its
    # handlers then waits for them instead of killing it without an exit file.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps ended wrappers
    _find_prctl()  # once, for every wrapper forked from here
    null = os.open(os.devnull, os.O_RDWR)
    ready: list[_Spare] = []
    if warm is not None:
        os.write(1, b"1\n")
    buffer = b""
    try:
        while True:
            if len(ready) < spares and not select.select([0], [], [], 0)[0]:
                ready.append(_fork_spare(ready, null))  # while no request waits
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return 0
            buffer += chunk
            payloads = []
            while b"\n" in buffer:
                header, rest = buffer.split(b"\n", 1)
                size = int(header)
                if len(rest) < size:
                    break
                payloads.append(rest[:size])
                buffer = rest[size:]
            # Every request that came together is handed over before any answer is awaited:
            # the wrappers write their pid files side by side.
            given: list[_Spare] = []
            for payload in payloads:
                spare = ready.pop(0) if ready else _fork_spare([*ready, *given], null)
                _give(spare, payload)
                given.append(spare)
            replies = []
            for payload, spare in zip(payloads, given, strict=True):
                reply = _taken(spare)
                if not reply:  # a spare killed while it waited: a fresh wrapper
                    spare = _fork_spare([*ready, *given], null)
                    _give(spare, payload)
                    reply = _taken(spare)
                replies.append(reply or b"0\n")
            if replies:
                os.write(1, b"".join(replies))
    finally:
        for spare in ready:  # each ends at the end of its input
            os.close(spare.req_w)
            os.close(spare.ack_r)


if __name__ == "__main__":  # pragma: no cover - run through _launch.py
    sys.exit(main(sys.argv[1:]))
