"""The wrapper server's spares: wrappers forked ahead, handed a request each — real processes.

Every process of the backend (its wrapper server, the spares, their pre-forked workload
processes) inherits the controller's environment: a variable naming this test's ``tmp_path``
finds them through /proc.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dse import JobSpec, JobState
from dse.testing.contracts import wait_for
from dse_local import LocalBackend, attempt_dir
from support.procs import alive, live_pids_mentioning, stat_fields


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[bytes]:
    """An environment entry of this test's controller, so of every process it starts."""
    monkeypatch.setenv("DSE_SPAWN_TEST", str(tmp_path))
    value = f"DSE_SPAWN_TEST={tmp_path}".encode()
    yield value
    for pid in live_pids_mentioning(value):
        os.kill(pid, signal.SIGKILL)


def _spec(tmp_path: Path, name: str, command: str) -> JobSpec:
    return JobSpec(trial_id=name, attempt=1, params={}, trial_dir=tmp_path / name,
                   argv=(command,), shell=True)


def _idle_spares(marker: bytes) -> list[int]:
    """The backend's processes that are not its server (the test's child): spares forked
    ahead and their workload processes, once no attempt runs."""
    found = []
    for pid in live_pids_mentioning(marker):
        fields = stat_fields(pid)
        if fields is not None and int(fields[1]) != os.getpid():
            found.append(pid)
    return found


def test_the_wrapper_pid_file_is_written_before_submit_returns(tmp_path: Path, marker: bytes):
    specs = [_spec(tmp_path, f"t{i}", "sleep 30") for i in range(3)]
    with LocalBackend(cpus=3, gpus=0, grace=0.5) as backend:
        ids = backend.submit(specs)  # three at once: one request to the server
        pids = []
        for spec in specs:
            words = (attempt_dir(spec) / "wrapper.pid").read_text().split()
            pid, ticks = int(words[0]), int(words[1])
            assert alive(pid, ticks)
            pids.append(pid)
        assert len(set(pids)) == 3
        backend.cancel(ids)
        final = wait_for(backend, ids, timeout=20)
    assert {status.state for status in final.values()} == {JobState.CANCELLED}


def test_spares_killed_while_they_wait_are_replaced(tmp_path: Path, marker: bytes):
    with LocalBackend(cpus=2, gpus=0, grace=0.5) as backend:
        first = backend.submit([_spec(tmp_path, "first", "true")])
        assert wait_for(backend, first, timeout=20)[first[0]].state is JobState.SUCCEEDED
        spares = wait_until_listed(marker)
        assert spares
        for pid in spares:
            os.kill(pid, signal.SIGKILL)
        specs = [_spec(tmp_path, f"after{i}", "exit 0") for i in range(2)]
        ids = backend.submit(specs)
        final = wait_for(backend, ids, timeout=20)
    assert {status.state for status in final.values()} == {JobState.SUCCEEDED}


def test_attempts_queued_ahead_start_on_a_new_server_when_it_died(
    tmp_path: Path, marker: bytes,
):
    # Attempts queued ahead start as slots free without the controller waiting for the
    # server's answer; a server killed meanwhile is started again, and nothing is lost.
    with LocalBackend(cpus=1, gpus=0, grace=0.5) as backend:
        backend.limit_running(1)
        specs = [_spec(tmp_path, f"q{i}", "sleep 0.2") for i in range(4)]
        ids = backend.submit(specs)  # one starts, three wait in the backend's queue
        servers = [pid for pid in live_pids_mentioning(marker)
                   if b"--serve" in Path(f"/proc/{pid}/cmdline").read_bytes()
                   and int((stat_fields(pid) or [b"0", b"0"])[1]) == os.getpid()]
        assert len(servers) == 1
        os.kill(servers[0], signal.SIGKILL)
        final = wait_for(backend, ids, timeout=60)
    assert {status.state for status in final.values()} == {JobState.SUCCEEDED}
    assert all((attempt_dir(spec) / "exit.json").is_file() for spec in specs)


def test_no_spare_outlives_its_backend(tmp_path: Path, marker: bytes):
    with LocalBackend(cpus=2, gpus=0, grace=0.5) as backend:
        ids = backend.submit([_spec(tmp_path, "one", "true")])
        wait_for(backend, ids, timeout=20)
        assert wait_until_listed(marker)
    deadline = time.monotonic() + 10
    while live_pids_mentioning(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert live_pids_mentioning(marker) == []


def wait_until_listed(marker: bytes) -> list[int]:
    """The idle spares and their workload processes (two per spare), once all are forked."""
    deadline = time.monotonic() + 10
    while True:
        found = _idle_spares(marker)
        if len(found) >= 4 or time.monotonic() > deadline:
            return found
        time.sleep(0.02)
