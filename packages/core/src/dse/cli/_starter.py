"""``dse init``: a commented starter campaign and the trial script it runs.

The campaign runs as written (``dse run campaign.toml``: a few seconds on the local backend);
every table a user is likely to want next is there, commented out, with a line on what it
does and where ``docs/campaign.md`` says more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.campaign._campaignfile import check_name
from dse.model._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

__all__ = ["STARTER_TRIAL", "starter_campaign", "write_starter"]

BACKEND_NOTES = {
    "local": 'local processes; "slurm" with dse-backend-slurm',
    "slurm": "Slurm jobs (dse-backend-slurm): see the [backend.slurm] table below",
    "probe": "in-memory trials of dse-core, for a dry run (no process runs the command)",
}
"""What the starter says of the backend it names."""

_CAMPAIGN = '''\
# A dse campaign: an agent proposes configurations of the [space], each runs as a trial
# (the [environment]'s command), and every trial lands in the record (.dse/ beside this
# file). Run it:      dse run {file}
# Then read it back:  dse report {file}   (dse show {name}:1, dse export {file})
# Any key can be overridden for one run, and the run records it:
#                     dse run {file} --set max_parallelism=4 --set budget.trials=50
# Every key: docs/campaign.md.

[campaign]
name = "{name}"
agent = "{agent}"              # random, grid, bayesian (dse-agents); `dse plugins` lists them
backend = "{backend}"{pad}# {backend_note}
mode = "rolling"             # refill a slot as soon as it frees ("waves": batch by batch)
max_parallelism = 2          # trials at once
max_trials = 20              # proposals accepted (trials and cache hits)
seed = 0
# constraints = ["x * y <= 4"]   # proposals that break one are rejected, not run

[environment]
command = ["python", "{trial}"]   # runs in this directory; params arrive via dse.trial
time_limit = "1m"            # an attempt past it is killed and ends time_limit
# cpus = 1                   # per trial; the backend runs as many at once as fit
# memory_mb = 1024

[[objectives]]
metric = "loss"              # a key of what the trial reports (dse.trial.report)
direction = "minimize"

# A second objective optimised together (a Pareto front in `dse report`):
# [[objectives]]
# metric = "spend.wall_s"    # what the trial cost is a metric too
# direction = "minimize"
# (and `objectives = "pareto"` in [campaign])

[space]
x = {{ type = "float", low = -2.0, high = 2.0 }}
y = {{ type = "int", low = 1, high = 8 }}
kind = ["a", "b", "c"]       # a list is a categorical parameter

# Ceilings checked before each launch: nothing starts that could overrun one.
# [budget]
# trials = 100               # trials dispatched
# wall_clock = "2h"          # since the run started
# compute = "10 cpu-hours"
# money = "5 USD"            # with [backend.<name>.price]

# The data the trials read: its version stamps every trial; results about different
# versions are never compared.
# [data]
# paths = ["data/"]

# Stop hopeless trials early from the learning curves they report
# (dse.trial.report_progress); a stopped trial with a checkpoint can be promoted later.
# [stopping]
# rule = "asha"
# max_step = 27

# [agent.bayesian]
# initial = 8                # random points before the model takes over

# [backend.slurm]            # pip install dse-backend-slurm
# partition = "batch"
# account = "my-account"
'''

STARTER_TRIAL = '''\
"""One trial of the starter campaign: read the params dse proposed, compute, report.

Replace the body with your experiment: run a benchmark, train a model, call a simulator.
Report metrics with dse.trial.report (a trial that never reports is never scored).
"""

import math

from dse import trial

params = trial.params()          # {"x": ..., "y": ..., "kind": ...}
x, y, kind = params["x"], params["y"], params["kind"]
offset = {"a": 0.0, "b": 0.5, "c": 1.0}[kind]
loss = (x - 0.7) ** 2 + 0.1 * (y - 3) ** 2 + offset + 0.05 * math.sin(5 * x)
trial.report({"loss": loss})
'''
"""The trial script ``dse init`` writes beside the campaign."""


def starter_campaign(name: str, *, file: str, trial: str, agent: str = "random",
                     backend: str = "local") -> str:
    """The text of the starter campaign named *name* (its file *file*, running *trial*)."""
    note = BACKEND_NOTES.get(backend, "`dse plugins` lists the backends installed")
    return _CAMPAIGN.format(name=name, file=file, trial=trial, agent=agent, backend=backend,
                            pad=" " * max(18 - len(backend), 1), backend_note=note)


def write_starter(path: Path, *, name: str | None = None, agent: str = "random",
                  backend: str = "local", force: bool = False,
                  check: Callable[[], None] | None = None) -> list[Path]:
    """Write the starter campaign at *path* and its trial script beside it (``trial.py``);
    the paths written. An existing file is refused unless *force*, then whatever *check*
    refuses (it raises): nothing is written then."""
    if path.suffix != ".toml":
        raise ConfigError(f"{path}: a campaign file ends in .toml")
    name = check_name(name or path.stem, f"{path}: campaign name")
    trial = path.with_name("trial.py")
    files = [path, trial]
    if not force:
        existing = [str(f) for f in files if f.exists()]
        if existing:
            raise ConfigError(f"{', '.join(existing)}: already exists; dse init writes nothing"
                              " over a file (--force replaces it)")
    if not path.parent.is_dir():
        raise ConfigError(f"{path.parent}: no such directory")
    if check is not None:
        check()
    path.write_text(starter_campaign(name, file=path.name, trial=trial.name, agent=agent,
                                     backend=backend), encoding="utf-8")
    trial.write_text(STARTER_TRIAL, encoding="utf-8")
    return files
