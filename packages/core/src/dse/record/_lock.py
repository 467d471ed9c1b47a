"""One controller per campaign: the lock file ``<workspace>/<name>.lock``.

The lock is two things at once. The file's *content* (JSON: host, pid, start time, boot id)
names the holder, for the message a second ``dse run`` prints and for network file systems
where ``flock`` may be emulated, local to one client, or missing. An ``flock`` held on the
file for as long as the campaign runs lets the kernel say whether a holder on this host is
gone: a killed controller releases it whatever way it died.

The file is published whole: it is written and locked under a temporary name, then
hard-linked into place (``link`` fails when the name exists, the classic exclusive create
that also holds on NFS). A lock held on this host by a process that is gone (dead pid, a
pid from before a reboot, a reused pid, or nobody holding the ``flock``) is stale and is
taken over by replacing the file while holding the old file's ``flock``, so two runs that
find the same stale lock cannot both take it. A lock held on another host (or by a process
that lives here but stopped renewing) is taken over once the campaign's lease in the record
expires (``lease``): the record, which every host shares, says that it is gone.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import secrets
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.model._errors import LockedError

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
_RETRY_SLEEP = 0.02
# errno values meaning "this file system offers no flock": the JSON content is all there is.
_NO_FLOCK = frozenset({errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})
# errno values meaning "this file system has no hard links": fall back to O_EXCL.
_NO_LINK = frozenset({errno.EPERM, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})


def _boot_id() -> str | None:
    try:
        return Path(_BOOT_ID_FILE).read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """The start time of process *pid* in clock ticks since boot (``/proc/<pid>/stat``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        # Field 22; the command name (field 2) may hold spaces and parentheses.
        return int(text.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds (or held) a campaign lock, as written in the lock file."""

    host: str
    """Host name of the controller (``socket.gethostname()``)."""
    pid: int
    """Process id of the controller on that host."""
    started_at: str
    """When it took the lock: local time, ISO 8601 with the UTC offset."""
    boot_id: str | None = None
    """``/proc/sys/kernel/random/boot_id`` of the host then: a pid from an earlier boot is gone."""
    start_ticks: int | None = None
    """Start time of the process (``/proc/<pid>/stat``): tells a reused pid from the holder."""

    @classmethod
    def current(cls) -> LockHolder:
        """This process."""
        now = datetime.datetime.now().astimezone()
        return cls(
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=now.isoformat(timespec="seconds"),
            boot_id=_boot_id(),
            start_ticks=_start_ticks(os.getpid()),
        )

    @classmethod
    def from_json(cls, text: str) -> LockHolder | None:
        """The holder a lock file names, or ``None`` when the content is not a valid lock."""
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        host, pid, started = doc.get("host"), doc.get("pid"), doc.get("started_at")
        boot, ticks = doc.get("boot_id"), doc.get("start_ticks")
        if not (isinstance(host, str) and host and type(pid) is int and pid > 0):
            return None
        return cls(
            host=host,
            pid=pid,
            started_at=started if isinstance(started, str) else "an unknown time",
            boot_id=boot if isinstance(boot, str) else None,
            start_ticks=ticks if type(ticks) is int else None,
        )

    def as_record(self) -> dict[str, Any]:
        """This holder as the record keeps it (the ``controller`` event of a run)."""
        return asdict(self)

    def to_json(self) -> str:
        """The lock file's content naming this holder (what :meth:`from_json` reads)."""
        return json.dumps(asdict(self), indent=2) + "\n"

    def describe(self) -> str:
        """``pid 1234 on host node7 since 2026-11-29 10:52:01+01:00``."""
        return f"pid {self.pid} on host {self.host} since {self.started_at.replace('T', ' ')}"

    def is_running(self) -> bool:
        """Whether this holder, assumed to be on this host, is still the living process."""
        boot = _boot_id()
        if self.boot_id is not None and boot is not None and self.boot_id != boot:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # alive, owned by another user
        if self.start_ticks is not None:
            ticks = _start_ticks(self.pid)
            if ticks is not None and ticks != self.start_ticks:
                return False
        return True


def _flock(fd: int, *, block: bool = False) -> bool | None:
    """``flock(LOCK_EX)`` on *fd*: True when held, False when another holds it, None when
    this file system has no ``flock``."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if block else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in _NO_FLOCK:
            return None
        raise
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _read_all(fd: int) -> str:
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 65536, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


class CampaignLock:
    """Context manager that makes this process the one controller of a campaign.

    ``with CampaignLock(workspace, name) as lock:`` creates ``<workspace>/<name>.lock``
    naming this process and holds an ``flock`` on it; leaving the block removes the file
    (if it is still this process's). When the campaign is held by a running controller,
    entering raises :class:`~dse.LockedError` naming its host and pid. A stale lock left on
    this host by a controller that is gone is taken over: :attr:`took_over` then names the
    old holder and :attr:`notice` says so in one line. Not re-entrant.

    :param workspace: the campaign's workspace directory (created when missing).
    :param name: the campaign name.
    :param settle: seconds to wait for a lock that is being written or taken over by
        another process before deciding about it.
    :param lease: says whether the campaign's lease in the record is fresh (``True``),
        expired (``False``) or missing (``None``). A lock whose holder's lease expired is
        stale whatever host holds it and whatever its ``flock`` says (a controller stopped
        past its lease, a host gone): it is taken over, and the record's lease decides
        between two controllers that took it over at once.
    """

    def __init__(self, workspace: str | Path, name: str, *, settle: float = 1.0,
                 lease: Callable[[], bool | None] | None = None) -> None:
        self.workspace = Path(workspace)
        self.name = name
        self.lease = lease
        """The campaign's lease in the record (fresh, expired, or ``None``: none), asked of a
        lock whose holder lives or is on another host: an expired lease makes it stale."""
        self.path = self.workspace / f"{name}.lock"
        self.settle = settle
        self.holder: LockHolder | None = None
        """This process, once the lock is held."""
        self.took_over: LockHolder | None = None
        """The holder of the stale lock that was taken over, if any."""
        self.notice: str | None = None
        """One line saying that (and why) a stale lock was taken over."""
        self._fd: int | None = None

    def __enter__(self) -> CampaignLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    # -- acquire --------------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the lock, or raise :class:`~dse.LockedError` naming its holder."""
        if self._fd is not None:
            raise LockedError(f"{self.path}: this process already holds the campaign lock")
        me = LockHolder.current()
        try:
            self.workspace.mkdir(parents=True, exist_ok=True)
            deadline = time.monotonic() + self.settle
            while True:
                if self._create(me):
                    break
                if self._inspect(me, settled=time.monotonic() >= deadline):
                    break
                time.sleep(_RETRY_SLEEP)
        except OSError as exc:
            raise LockedError(f"{self.path}: cannot take the campaign lock ({exc})") from None
        self.holder = me

    def _prepare(self, me: LockHolder) -> tuple[int, Path]:
        """A complete, fsynced and flocked lock file under a temporary name."""
        tmp = self.workspace / f".{self.name}.lock.{me.pid}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, me.to_json().encode("utf-8"))
            # On NFS, data still in the client's cache is invisible to other hosts.
            os.fsync(fd)
            _flock(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        return fd, tmp

    def _create(self, me: LockHolder) -> bool:
        """Publish a new lock file; False when one exists."""
        fd, tmp = self._prepare(me)
        try:
            try:
                os.link(tmp, self.path)
                linked = True
            except FileExistsError:
                # An NFS link whose reply was lost is retried and reports EEXIST although it
                # succeeded: the link count says which.
                linked = os.fstat(fd).st_nlink >= 2
        except OSError as exc:
            os.close(fd)
            if exc.errno not in _NO_LINK:
                raise
            return self._create_exclusive(me)
        finally:
            tmp.unlink(missing_ok=True)
        if not linked:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def _create_exclusive(self, me: LockHolder) -> bool:
        """``O_CREAT | O_EXCL`` where the file system has no hard links.

        The file is empty for a moment; :meth:`_inspect` waits for an unreadable lock
        to settle before judging it, and the blocking ``flock`` below only waits for
        such an inspector to let go.
        """
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        try:
            _flock(fd, block=True)
            os.write(fd, me.to_json().encode("utf-8"))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise
        self._fd = fd
        return True

    def _inspect(self, me: LockHolder, *, settled: bool) -> bool:
        """Judge the existing lock file: True once taken over, False to look again.

        Raises :class:`~dse.LockedError` when the lock is held.
        """
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)  # NFS flock needs write access
        except FileNotFoundError:
            return False  # released meanwhile
        try:
            flocked = _flock(fd)
            if not _same_file(fd, self.path):
                return False  # released or replaced meanwhile
            holder = LockHolder.from_json(_read_all(fd))
            if holder is not None and self.lease is not None and self.lease() is False:
                why = f"was held by {holder.describe()}, whose lease in the record expired"
            elif holder is None:
                if not settled:
                    return False  # maybe being written (a file system without hard links)
                if flocked is False:
                    raise LockedError(
                        f"campaign {self.name!r} is locked by an unreadable lock file that"
                        f" another process holds open ({self.path}); delete it if no dse run"
                        " uses this campaign"
                    )
                why = "had an unreadable lock file that no process held open"
            elif holder.host != me.host:
                raise LockedError(
                    f"campaign {self.name!r} is already running: held by {holder.describe()}"
                    f" (lock file {self.path}); a lock held on another host is taken over"
                    " once its lease in the record expires"
                )
            else:
                running = holder.is_running()
                if running and flocked is not True:
                    raise LockedError(
                        f"campaign {self.name!r} is already running: held by"
                        f" {holder.describe()} (lock file {self.path})"
                    )
                if flocked is False:
                    if not settled:
                        return False  # another process is taking the stale lock over
                    raise LockedError(
                        f"campaign {self.name!r} is locked: {holder.describe()} has ended,"
                        f" but another process still holds its lock file {self.path} open"
                        " (one it left behind?); stop that process, or delete the lock file"
                        " if no dse run uses this campaign"
                    )
                state = "no longer holds it" if running else "is no longer running"
                why = f"was held by {holder.describe()}, which {state}"
            self._take_over(me)
        finally:
            os.close(fd)
        self.took_over = holder
        self.notice = (
            f"took over a stale lock: campaign {self.name!r} {why} (lock file {self.path})"
        )
        return True

    def _take_over(self, me: LockHolder) -> None:
        # The caller holds the old file's flock (where flock exists), and whoever replaces the
        # file must hold it: of several runs that found the same stale lock, one replaces it.
        fd, tmp = self._prepare(me)
        try:
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        self._fd = fd

    # -- release --------------------------------------------------------------------------

    def release(self) -> None:
        """Remove the lock file if it is still this process's, then drop the ``flock``."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if _same_file(fd, self.path):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)
        self.holder = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None


def lock_held(workspace: str | Path, name: str, *,
              remote: Callable[[], bool] | None = None, missing: bool = False) -> bool:
    """Whether a live controller holds campaign *name*'s lock in *workspace* (this process
    included), judged as :class:`CampaignLock` judges a lock it finds: the ``flock`` says so
    where there is one; without, the holder named in the file must be running on this host,
    and a holder on another host is alive if *remote* says so (its lease in the record; by
    default it is taken to be alive). No lock file: *missing* (by default, nobody holds it)."""
    path = Path(workspace) / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)  # NFS flock needs write access
    except FileNotFoundError:
        return missing
    except OSError:
        return True  # cannot look: never judge a lock gone without seeing it
    try:
        flocked = _flock(fd)
        if flocked is not None:
            # Whoever holds a lock file holds its flock from before it is published.
            return not flocked
        holder = LockHolder.from_json(_read_all(fd))
        if holder is None:
            return True  # maybe being written
        if holder.host != socket.gethostname():
            return remote is None or remote()
        return holder.is_running()
    finally:
        os.close(fd)  # drops the flock just taken, if any
