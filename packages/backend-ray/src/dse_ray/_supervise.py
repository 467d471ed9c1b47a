"""The supervisor of one task of an attempt, on the Ray node: runs the command, writes its end.

The attempt's actor (``_actor``) starts one supervisor per task as
``python -S _supervise.py`` with the task's request (JSON) on stdin. The supervisor is a
process of its own rather than a thread of the actor so that the trial never outlives the
actor unnoticed: it asks the kernel for SIGTERM when its parent (the actor's worker) dies
(``PR_SET_PDEATHSIG``: the raylet killed, ``ray.kill``), and it is a child subreaper, so what
the workload started and detached (``setsid``) is still below it and is killed with it.

It starts the command in a session of its own with the request's environment, stdin
``/dev/null`` and stdout/stderr appended to the attempt's log files; enforces the time limit
(SIGTERM to the whole tree, the grace, SIGKILL); ends it the same way on SIGTERM (a cancel, or
its parent's death); kills the whole tree at once (``out_of_memory``) when the tree's resident
memory passes the request's ``memory_mb``; kills whatever the workload left behind; then writes
``exit.json`` (``exit.<rank>.json`` for a rank above 0) atomically in the attempt directory and
prints the same document on stdout. It imports only the standard library and nothing of dse
(``-S``: no site packages), so it starts in milliseconds wherever Ray runs it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MEMORY_CHECK_S = 0.25
"""How often the tree's resident memory is summed, when the request limits it."""


def _prctl(option: int, arg: int) -> None:
    # Without it, the process group and the walk below still apply.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    return children


def descendants(root: int) -> list[int]:
    """Pids of every live descendant of *root* (walking /proc's parent links)."""
    children = _children_map()
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def signal_tree(pgid: int, sig: int) -> None:
    """Send *sig* to the workload's process group and to every descendant of this process."""
    with contextlib.suppress(OSError):
        os.killpg(pgid, sig)
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def reap() -> dict[int, int]:
    """Reap every ended child; their wait statuses by pid."""
    statuses: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return statuses
        if pid == 0:
            return statuses
        statuses[pid] = status


def tree_rss_kb() -> int:
    """The resident memory of every descendant of this process, in KiB."""
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    total = 0
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/statm", "rb") as handle:
                total += int(handle.read().split()[1]) * page_kb
        except (OSError, IndexError, ValueError):
            continue
    return total


class Run:
    """What happened to the task so far."""

    def __init__(self) -> None:
        self.cancelled = False
        self.orphaned = False
        self.timed_out = False
        self.out_of_memory = False
        self.term_at: float | None = None
        self.termed = False
        self.peak_kb = 0


def _open_log(path: str) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    if not os.path.isfile(f"/proc/self/fd/{fd}"):
        os.close(fd)
        raise OSError(0, "not a regular file", path)
    return fd


def supervise(request: dict[str, object], parent: int) -> dict[str, object]:
    """Run the task *request* describes to its end; return its exit document."""
    state = Run()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)

    def on_term(signum: int, frame: object) -> None:
        if os.getppid() != parent:
            state.orphaned = True
        else:
            state.cancelled = True
        if state.term_at is None:
            state.term_at = time.monotonic()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in request["env"].items()}  # type: ignore[attr-defined]
    limit = request.get("time_limit")
    grace = float(request.get("grace") or 0.0)  # type: ignore[arg-type]
    memory_mb = request.get("memory_mb")
    started = time.time()
    start_mono = time.monotonic()
    doc: dict[str, object] = {"started_at": started, "node": request.get("node")}
    try:
        out_fd = _open_log(str(request["stdout"]))
        err_fd = _open_log(str(request["stderr"]))
    except OSError as exc:
        doc.update(launch_error=f"cannot open {exc.filename}: {exc.strerror}",
                   ended_at=time.time())
        return doc
    try:
        proc = subprocess.Popen(
            argv, env=env, cwd=str(request["cwd"]), stdin=subprocess.DEVNULL, stdout=out_fd,
            stderr=err_fd, start_new_session=True, close_fds=True,
        )
    except (OSError, ValueError) as exc:
        doc.update(launch_error=f"{type(exc).__name__}: {exc}", ended_at=time.time())
        return doc
    finally:
        os.close(out_fd)
        os.close(err_fd)
    sys.stdout.write(json.dumps({"started": proc.pid, "started_at": started}) + "\n")
    sys.stdout.flush()
    code, sig = _wait(proc, state, wake_r, limit, grace, memory_mb, start_mono)
    _clean_up(proc.pid, grace)
    doc.update(
        exit_code=code, signal=sig, ended_at=time.time(), peak_rss_kb=state.peak_kb or None,
        timed_out=state.timed_out, cancelled=state.cancelled and not state.timed_out,
        orphaned=state.orphaned, out_of_memory=state.out_of_memory,
    )
    return doc


def _wait(proc: subprocess.Popen[bytes], state: Run, wake_r: int, limit: object,
          grace: float, memory_mb: object, start_mono: float) -> tuple[int | None, int | None]:
    """Wait for the workload to end, ending it at its limit, on a cancel, or past its memory;
    its exit code and signal."""
    pgid = proc.pid
    pidfd = os.pidfd_open(proc.pid)
    mem_kb = int(memory_mb) * 1024 if isinstance(memory_mb, int) else None
    next_mem = start_mono
    while True:
        now = time.monotonic()
        if state.term_at is None and isinstance(limit, int | float) and now - start_mono >= limit:
            state.timed_out = True
            state.term_at = now
        if mem_kb is not None and now >= next_mem and state.term_at is None:
            next_mem = now + MEMORY_CHECK_S
            rss = tree_rss_kb()
            state.peak_kb = max(state.peak_kb, rss)
            if rss > mem_kb:
                state.out_of_memory = True
                signal_tree(pgid, signal.SIGKILL)
        timeout: float | None = None
        if state.term_at is not None:
            if not state.termed:
                state.termed = True
                signal_tree(pgid, signal.SIGTERM)
            left = grace - (now - state.term_at)
            if left <= 0:
                signal_tree(pgid, signal.SIGKILL)
                left = 0.05
            timeout = left
        elif isinstance(limit, int | float):
            timeout = max(limit - (now - start_mono), 0.0)
        if mem_kb is not None:
            timeout = MEMORY_CHECK_S if timeout is None else min(timeout, MEMORY_CHECK_S)
        ready, _, _ = select.select([pidfd, wake_r], [], [], timeout)
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
        if pidfd in ready:
            status = os.waitpid(proc.pid, 0)[1]
            os.close(pidfd)
            code = os.waitstatus_to_exitcode(status)
            return (None, -code) if code < 0 else (code, None)


def _clean_up(pgid: int, grace: float) -> None:
    """Nothing a task started may outlive it: SIGTERM what is left, a short grace, SIGKILL."""
    reap()
    if not descendants(os.getpid()):
        return
    signal_tree(pgid, signal.SIGTERM)
    end = time.monotonic() + min(grace, 2.0)
    while time.monotonic() < end and descendants(os.getpid()):
        reap()
        time.sleep(0.02)
    for _ in range(200):
        signal_tree(pgid, signal.SIGKILL)
        reap()
        if not descendants(os.getpid()):
            return
        time.sleep(0.01)


def write_atomic(path: str, data: bytes) -> None:
    """Replace *path* with *data* through a fresh temporary file."""
    tmp = f"{path}.{os.getpid()}.{os.urandom(6).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def main() -> int:
    parent = os.getppid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the actor died before the request was read
        return 1
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    request = json.loads(sys.stdin.buffer.read())
    doc = supervise(request, parent)
    data = (json.dumps(doc) + "\n").encode()
    try:
        write_atomic(str(request["exit_file"]), data)
    except OSError as exc:
        doc["exit_file_error"] = str(exc)
        data = (json.dumps(doc) + "\n").encode()
    sys.stdout.write(data.decode())
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
