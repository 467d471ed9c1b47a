"""Campaigns of ``work.py`` trials on the tests' local Ray cluster (``support.raycluster``).

Each trial runs ``work.py``, which appends one line per run to ``runs.log`` in its checkpoint
directory (its attempt and the node it ran on, ``DSE_NODE``), so a test checks what ran, not
what the engine believes ran. A trial sleeps its ``seconds``, or until the test calls
:func:`release`; one of mode ``big`` first writes ``model.bin`` (64 KiB) in its trial directory
and reports a first progress step. Each task writes ``rank-<r>.json`` (its rank, node, the
attempt's nodes and its trial directory) in its trial directory; rank 0 reports the result.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from support.campaign_record import attempts_by_trial, recorded, started_on
from support.cli import start_dse, write_plugin
from support.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable

    from support.raycluster import RayCluster

WORK = r"""
import json, os, sys, time
from dse import trial

p = trial.params()
rank = int(os.environ.get("DSE_RANK", "0"))
if rank == 0:
    with open(os.path.join(os.environ["DSE_CHECKPOINT_DIR"], "runs.log"), "a") as log:
        log.write("%s %s\n" % (os.environ["DSE_ATTEMPT"], os.environ.get("DSE_NODE")))
with open(os.path.join(os.environ["DSE_TRIAL_DIR"], "rank-%d.json" % rank), "w") as out:
    json.dump({k: os.environ.get(k) for k in ("DSE_RANK", "DSE_LOCAL_RANK", "DSE_NODE_RANK",
               "DSE_WORLD_SIZE", "DSE_NODE", "DSE_NODES", "DSE_TRIAL_DIR")}, out)
if p["mode"] == "big" and rank == 0:
    with open(os.path.join(os.environ["DSE_TRIAL_DIR"], "model.bin"), "wb") as out:
        out.write(b"x" * 65536)
    trial.report_progress(1, {"value": 1.0})
if p["mode"] == "exit3":
    sys.exit(3)
if p["mode"] == "oom":
    hog = b"x" * (400 << 20)
    time.sleep(30)
released = os.path.join(os.path.dirname(os.path.abspath(__file__)), "released")
deadline = time.monotonic() + p["seconds"]
while time.monotonic() < deadline and not os.path.exists(released):
    time.sleep(0.1)
trial.report({"value": p["i"] * 1.5}, complete=True)
"""

CAMPAIGN = """
[campaign]
name = "{name}"
agent = "list"
backend = "ray"
mode = "{mode}"
max_parallelism = {parallelism}
poll_interval = ["0.2s", "1s"]

[agent.list]
points = [{points}]

[environment]
command = ["python", "work.py"]
time_limit = "2m"
{environment}

[backend.ray]
address = "{address}"
namespace = "{name}"
grace = "2s"
{backend}

[[objectives]]
metric = "value"

[space]
mode = ["ok", "exit3", "oom", "big"]
i = {{ type = "int", low = 0, high = 1000 }}
seconds = {{ type = "float", low = 0, high = 600 }}
"""


def project_with(tmp_path: Path, name: str, address: str, points: list[dict[str, Any]], *,
                 parallelism: int, mode: str = "waves", environment: str = "",
                 backend: str = "") -> Path:
    """A project whose campaign *name* runs *points* on the Ray cluster at *address*."""
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    inline = ", ".join(
        "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in point.items()) + "}"
        for point in points
    )
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.format(
        name=name, mode=mode, parallelism=parallelism, points=inline, address=address,
        environment=environment, backend=backend,
    ))
    return tmp_path


def release(project: Path) -> None:
    """Let every trial of *project* still sleeping (and every later one) end now."""
    (project / "released").touch()


def unique(name: str) -> str:
    """*name* made unique to this test run (its Ray namespace too)."""
    return f"{name}{secrets.token_hex(3)}"


def stop(dse: subprocess.Popen[str]) -> None:
    """Kill the controller (SIGKILL: nothing of it cleans up) and close its pipes."""
    if dse.poll() is None:
        dse.kill()
    dse.communicate(timeout=60)


def finish(dse: subprocess.Popen[str], timeout: float) -> str:
    """Wait for the controller to end (failing the test, with its last words, after
    *timeout* seconds); its stderr."""
    try:
        _, err = dse.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        dse.kill()
        _, err = dse.communicate(timeout=60)
        pytest.fail(f"dse run did not end within {timeout:g}s; its stderr ends: {err[-3000:]}")
    assert dse.returncode == 0, err
    return err



def run_losing_a_node(cluster: RayCluster, project: Path, victim: str,
                      take_away: Callable[[str], None], state: str) -> None:
    """`dse run` *project* to its end while *victim* is taken away under a trial: once a
    trial's workload runs there, ``take_away(victim)``; once the record has an attempt that
    ended *state*, the sleeping trials are released. The cluster has its three nodes again
    after, whatever happened."""
    dse = start_dse(project, "run", "campaign.toml")
    try:
        wait_until(lambda: started_on(project, victim), 120, f"a trial running on {victim}")
        take_away(victim)
        wait_until(lambda: recorded(project, state), 120, f"an attempt ended {state}",
                   seen=lambda: str({n: [a["state"] for a in t] for n, t in
                                     attempts_by_trial(project, missing_ok=True).items()}))
        release(project)
        finish(dse, 240)
    finally:
        stop(dse)
        cluster.replace()
