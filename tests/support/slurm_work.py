"""Campaigns of ``work.py`` trials on the real local Slurm cluster (see ``support.slurm``).

Each trial runs ``work.py``, which appends one line per run to ``runs.log`` in its checkpoint
directory (attempt and node), so a test checks what ran, not what the engine believes ran. A
trial sleeps its ``seconds``, or until the test calls :func:`release`: a test that needs trials
to be running while it interrupts them lets them end as soon as the interruption is recorded,
instead of guessing how long that takes on a loaded machine.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import write_plugin

WORK = r"""
import os, socket, sys, time
from dse import trial

p = trial.params()
with open(os.path.join(os.environ["DSE_CHECKPOINT_DIR"], "runs.log"), "a") as log:
    log.write("%s %s\n" % (os.environ["DSE_ATTEMPT"], os.environ.get("SLURMD_NODENAME")))
mode = p["mode"]
if mode == "exit3":
    sys.exit(3)
if mode == "oom":
    hog = b"x" * (1200 << 20)
    time.sleep(30)
released = os.path.join(os.path.dirname(os.path.abspath(__file__)), "released")
deadline = time.monotonic() + p["seconds"]
while time.monotonic() < deadline and not os.path.exists(released):
    time.sleep(0.2)
trial.report({"value": p["i"] * 1.5}, complete=True)
"""

INTERRUPTIONS = {"preempted", "node_fail", "boot_fail", "lost", "cancelled", "launch_error"}
"""Attempt ends the engine retries (a cancel is one only when dse did not ask for it)."""

CAMPAIGN = """
[campaign]
name = "{name}"
agent = "list"
backend = "slurm"
mode = "{mode}"
max_parallelism = {parallelism}
poll_interval = ["0.3s", "1s"]

[agent.list]
points = [{points}]

[environment]
command = ["python", "work.py"]
time_limit = "{time_limit}"
memory_mb = 300

[backend.slurm]
partition = "{partition}"
{backend}

[[objectives]]
metric = "value"

[space]
mode = ["ok", "exit3", "oom"]
i = {{ type = "int", low = 0, high = 1000 }}
seconds = {{ type = "float", low = 0, high = 600 }}
"""


def project_with(
    tmp_path: Path, name: str, points: list[dict[str, object]], *, parallelism: int,
    mode: str = "waves", time_limit: str = "2m", partition: str = "batch", backend: str = "",
) -> Path:
    """A project whose campaign *name* runs *points* in *partition* (more lines of its
    ``[backend.slurm]`` table in *backend*; job arrays, ``mode = "jobs"``, unless they set a
    mode); its Slurm jobs are named ``dse.<name>-1.<token>``."""
    if "mode =" not in backend:
        backend = 'mode = "jobs"\n' + backend
    write_plugin(tmp_path)
    (tmp_path / "work.py").write_text(WORK)
    inline = ", ".join(
        "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in point.items()) + "}"
        for point in points
    )
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.format(
        name=name, mode=mode, parallelism=parallelism, points=inline, time_limit=time_limit,
        partition=partition, backend=backend,
    ))
    return tmp_path


def release(project: Path) -> None:
    """Let every trial of *project* still sleeping (and every later one) end now."""
    (project / "released").touch()
