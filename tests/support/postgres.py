"""A real PostgreSQL server for the tests (Debian's ``postgresql`` package), no mock.

``DSE_TEST_POSTGRES`` names a server to use (a URL of a role that may create databases);
otherwise each test process starts its own — ``initdb`` into a temporary directory, then
``pg_ctl start`` on a free loopback port (as the ``postgres`` user when the tests run as
root: the server refuses root) — and stops it when the process ends. Each test gets a
database of its own (:func:`database`; the fixtures ``postgres_url`` and ``record`` of the
suite's conftest).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

ENV = "DSE_TEST_POSTGRES"


_server: str | None = None
_names = itertools.count(1)


def _binaries() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are (Debian keeps them off the PATH)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user() -> list[str]:
    """The command prefix that runs the server's programs as a user it accepts."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _start() -> str:
    """Start a server of this process's own; its URL (as the superuser)."""
    binaries = _binaries()
    if binaries is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    top = Path(tempfile.mkdtemp(prefix="dse-pg-"))
    data = top / "data"
    if os.geteuid() == 0:
        shutil.chown(top, "postgres")
    prefix = _as_server_user()
    subprocess.run([*prefix, str(binaries / "initdb"), "-D", str(data), "-A", "trust",
                    "-U", "postgres", "--no-sync"], check=True, capture_output=True)
    for tries in itertools.count():
        port = _free_port()
        started = subprocess.run(
            [*prefix, str(binaries / "pg_ctl"), "-D", str(data), "-w", "-t", "120",
             "-l", str(top / "log"), "-o",
             f"-p {port} -k {top} -c listen_addresses=127.0.0.1 -c max_connections=200"
             " -c shared_buffers=32MB", "start"], capture_output=True, text=True)
        if started.returncode == 0:
            break
        if tries == 4:
            log = (top / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"PostgreSQL did not start: {started.stderr}{log}")

    def stop() -> None:
        subprocess.run([*prefix, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True)
        shutil.rmtree(top, ignore_errors=True)

    atexit.register(stop)
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


def server() -> str:
    """The URL of the tests' server (started once per process)."""
    global _server
    if _server is None:
        _server = os.environ.get(ENV) or _start()
    return _server


def new_database() -> str:
    """A new, empty database on the tests' server: its URL."""
    import psycopg

    base = server()
    name = f"dse_{os.getpid()}_{next(_names)}_{int(time.time() * 1000) % 10**8}"
    with psycopg.connect(base, autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + f"/{name}"


@contextlib.contextmanager
def database() -> Iterator[str]:
    """A new, empty database on the tests' server (its URL), dropped after the block."""
    url = new_database()
    try:
        yield url
    finally:
        drop_database(url)


def drop_database(url: str) -> None:
    """Drop the database of *url* (its connections ended first)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with contextlib.suppress(psycopg.Error), psycopg.connect(server(), autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
