"""Slurm backend for dse (``backend = "slurm"``): job arrays, batched polling, state mapping.

:class:`SlurmBackend` is registered through the ``dse`` entry point (``mode = "allocation"``
makes it a :class:`SlurmAllocationBackend`: one pilot job, attempts as its steps); the pure
pieces (batch scripts, manifests, ``squeue``/``sacct`` parsing) are public for tests and other
tools.
"""

from __future__ import annotations

from dse_slurm._allocation import SlurmAllocationBackend, allocation_share, render_pilot_script
from dse_slurm._backend import SlurmBackend, SlurmCommandError, usage_from_sacct
from dse_slurm._script import (
    LAUNCHER,
    SlurmOptions,
    group_for_arrays,
    manifest_entry,
    parse_sbatch_output,
    render_array_script,
    render_manifest,
    sbatch_argv,
    slurm_time,
)
from dse_slurm._states import (
    SACCT_ARGS,
    SQUEUE_ARGS,
    SacctRow,
    SqueueRow,
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
