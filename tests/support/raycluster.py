"""A real local Ray cluster of three nodes for the Ray backend's tests.

A head node (``head``, 1 CPU) and two workers (``w1`` and ``w2``, 2 CPUs each, on loopback
addresses of their own, ``127.0.0.2``...), each a raylet of its own on this machine with its
own object store and sockets in a temporary directory of the cluster's own, the dashboard off;
a driver started here (the test process, a `dse run`) attaches to the head's raylet.
``support/ray_keeper.py`` starts and keeps them, in a process of its own, and stops them at
the end of the module that uses them. The head declares a node dead after about 5 s of missed
health checks (Ray's default is 15 s): a test that kills a raylet waits on that. A test that
takes a node away calls :meth:`RayCluster.replace` after, so the next finds three nodes again.

Set ``DSE_KEEP_RAY=1`` to keep the cluster's temporary directory (its logs: a raylet's crash
is in ``session_latest/logs/raylet*.out``) after it stops.

The modules that use the cluster carry ``pytest.mark.xdist_group("ray")`` and hold a file lock
while their cluster lives (:func:`cluster_for_module`): one cluster at a time on this machine,
whatever xdist does with the group.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from support.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

KEEPER = Path(__file__).with_name("ray_keeper.py")
LOCK = Path(tempfile.gettempdir()) / "dse-ray-cluster.lock"


class RayCluster:
    """The running cluster (its keeper process): its address, its worker nodes by name."""

    def __init__(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="dseray", dir="/tmp")  # socket paths: short
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        self.keeper = subprocess.Popen(
            [sys.executable, str(KEEPER), self.temp_dir], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
            start_new_session=True,
        )
        self.address = self._answer(180.0)
        self.workers = ["w1", "w2"]

    def _answer(self, timeout: float) -> str:
        assert self.keeper.stdout is not None
        import select

        ready, _, _ = select.select([self.keeper.stdout], [], [], timeout)
        line = self.keeper.stdout.readline().strip() if ready else ""
        if not line:
            self.stop()
            pytest.fail(f"the Ray cluster's keeper did not answer within {timeout:g}s")
        return line

    def _say(self, command: str) -> str:
        assert self.keeper.stdin is not None
        self.keeper.stdin.write(command + "\n")
        self.keeper.stdin.flush()
        return self._answer(120.0)

    def kill_raylet(self, name: str) -> None:
        """Kill worker *name*'s raylet with SIGKILL: the node is lost, as a machine that died."""
        self._say(f"kill {name}")
        self.workers.remove(name)

    def alive(self) -> list[str]:
        """The names of the nodes Ray's control store holds alive."""
        import ray

        return sorted(n["NodeName"] for n in ray.nodes() if n["Alive"])

    def replace(self) -> None:
        """Start workers until two are alive again (after a test took one away)."""
        while len(self.workers) < 2:
            self.workers.append(self._say("add"))
        wait_until(lambda: len(self.alive()) >= 3, 60, "three alive Ray nodes",
                   seen=lambda: str(self.alive()))

    def stop(self) -> None:
        """Stop every node, and kill whatever of the cluster is left (found by its directory)."""
        with contextlib.suppress(OSError, ValueError):
            assert self.keeper.stdin is not None
            self.keeper.stdin.write("stop\n")
            self.keeper.stdin.close()
        try:
            self.keeper.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.keeper.pid, signal.SIGKILL)
            self.keeper.wait()
        if self.keeper.stdout is not None:
            self.keeper.stdout.close()
        deadline = time.monotonic() + 10
        while leftovers(self.temp_dir) and time.monotonic() < deadline:
            for pid in leftovers(self.temp_dir):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        if not os.environ.get("DSE_KEEP_RAY"):
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def leftovers(temp_dir: str) -> list[int]:
    """Processes whose command line names the cluster's directory (its nodes' daemons)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if temp_dir.encode() in cmdline:
                found.append(int(name))
    return found


@contextlib.contextmanager
def cluster_for_module() -> Iterator[RayCluster]:
    """A three-node cluster for one test module, one at a time on this machine (a file lock);
    the test process joins it as a driver. Stopped at the end, whatever happened."""
    import ray

    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cluster = RayCluster()
        try:
            ray.init(address=cluster.address, log_to_driver=False)
            yield cluster
        finally:
            ray.shutdown()
            cluster.stop()
