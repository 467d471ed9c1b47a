"""Keeps the tests' local Ray cluster: run as a process of its own by ``support.raycluster``.

``python ray_keeper.py TEMP_DIR`` starts a head node (``head``, 1 CPU) and two workers (``w1``,
``w2``, 2 CPUs each) with ``ray.cluster_utils.Cluster``, prints the cluster's address on a
line, then reads commands on stdin, answering each on a line: ``kill NAME`` (SIGKILL the
worker's raylet), ``add`` (start another worker; answers its name), ``stop`` (or end of
input: stop every node and end). A process of its own because ``cluster_utils`` leaves files
to the garbage collector, which the test process would take as errors.
"""

from __future__ import annotations

import os
import select
import sys
from typing import Any

SYSTEM_CONFIG = {
    "health_check_initial_delay_ms": 0,
    # A lost node is declared dead after ~5 s of missed checks (Ray's default: ~15 s), and
    # never for a second's silence of a node starved of CPU beside the tests' other work.
    "health_check_period_ms": 1000,
    "health_check_failure_threshold": 5,
    # Idle workers are not started ahead on a 2-core machine: each costs a Python process.
    "enable_worker_prestart": False,
}
NODE_ARGS: dict[str, Any] = {"object_store_memory": 80 * 2**20}


def drivers_to_head(cluster: Any) -> None:
    """Make a driver started on this host attach to the head's raylet.

    A driver attaches to the raylet of the address Ray cached for this host in the session
    directory, which each node started with an address of its own overwrites: on one host
    standing for three, that would be the last worker started, and a test that kills it
    would kill the controller's connection with it. On a real cluster each host has its own
    session directory, and its own address in it."""
    import json

    from filelock import FileLock

    head = cluster.head_node
    path = os.path.join(head.get_session_dir_path(), "node_ip_address.json")
    with FileLock(path + ".lock"), open(path, "w") as handle:
        json.dump({"node_ip_address": head.node_ip_address}, handle)


def main(temp_dir: str) -> int:
    # No usage report to Ray's servers from a test cluster (the nodes inherit this).
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        **NODE_ARGS, "num_cpus": 1, "node_name": "head", "include_dashboard": False,
        "_system_config": SYSTEM_CONFIG, "temp_dir": temp_dir,
    })
    workers: dict[str, Any] = {}
    made = 0

    def add() -> str:
        nonlocal made
        made += 1
        name = f"w{made}"
        # An address of its own (the loopback has them all): a driver on this host attaches
        # to the raylet of its own address, the head's, never to a worker a test kills.
        workers[name] = cluster.add_node(**NODE_ARGS, num_cpus=2, node_name=name,
                                         node_ip_address=f"127.0.0.{made + 1}")
        drivers_to_head(cluster)
        return name

    try:
        add()
        add()
        cluster.wait_for_nodes()
        print(cluster.address, flush=True)
        parent = os.getppid()
        while True:
            if not select.select([sys.stdin], [], [], 1.0)[0]:
                if os.getppid() != parent:
                    break  # the test process is gone: so is its cluster
                continue
            words = sys.stdin.readline().split()
            if not words or words[0] == "stop":
                break
            if words[0] == "kill":
                workers.pop(words[1]).kill_raylet()
                print("ok", flush=True)
            elif words[0] == "add":
                print(add(), flush=True)
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
