"""Slurm backend for dse (``backend = "slurm"``): job arrays, batched polling, state mapping.

:class:`SlurmBackend` (job arrays) is registered through the ``dse`` entry point; with
``mode = "allocation"`` its :meth:`~SlurmBackend.from_options` builds a
:class:`SlurmAllocationBackend` instead (one pilot job, attempts as its steps), and with
``mode = "auto"`` (the default) :meth:`~SlurmBackend.for_trials` picks one of the two. Both
extend :class:`dse.Backend` and run their Slurm commands through one helper,
:class:`dse_slurm._commands.SlurmCommands`. The pure pieces (batch scripts, manifests,
``squeue``/``sacct`` parsing) are public for tests and other tools.

Modules import in one direction: ``_states``, ``_script`` and ``_pilot`` (pure) ←
``_watch`` (ends and liveness from the pilot's files) ← ``_commands`` and ``_options`` (shared
by both modes) ← ``_allocation`` ← ``_arrays`` (whose factory and ``for_trials`` pick the
mode: ``mode = "auto"``, the default, chooses once the campaign's time limit is known) ←
``_plugin``.
"""

from __future__ import annotations

from dse_slurm._allocation import SlurmAllocationBackend, allocation_share
from dse_slurm._arrays import SlurmBackend, usage_from_sacct
from dse_slurm._commands import SlurmCommandError
from dse_slurm._script import (
    LAUNCHER,
    SlurmOptions,
    group_for_arrays,
    manifest_entry,
    parse_sbatch_output,
    render_array_script,
    render_manifest,
    render_pilot_script,
    sbatch_argv,
    slurm_time,
)
from dse_slurm._states import (
    SACCT_ARGS,
    SQUEUE_ARGS,
    SacctRow,
    SqueueRow,
    expand_hostlist,
    expand_job_ids,
    parse_exit_code,
    parse_sacct,
    parse_squeue,
    to_job_state,
)

__version__ = "0.1.0"
__all__ = [
    "LAUNCHER",
    "SACCT_ARGS",
    "SQUEUE_ARGS",
    "SacctRow",
    "SlurmAllocationBackend",
    "SlurmBackend",
    "SlurmCommandError",
    "SlurmOptions",
    "SqueueRow",
    "__version__",
    "allocation_share",
    "expand_hostlist",
    "expand_job_ids",
    "group_for_arrays",
    "manifest_entry",
    "parse_exit_code",
    "parse_sacct",
    "parse_sbatch_output",
    "parse_squeue",
    "render_array_script",
    "render_manifest",
    "render_pilot_script",
    "sbatch_argv",
    "slurm_time",
    "to_job_state",
    "usage_from_sacct",
]
