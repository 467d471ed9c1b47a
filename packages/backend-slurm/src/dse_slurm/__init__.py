"""Slurm backend for dse — pure pieces so far (scripts, manifests, state parsing).

Not registered as a backend until it works (see the issues); nothing here calls Slurm.
"""

from __future__ import annotations

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
    "SlurmOptions",
    "SqueueRow",
    "__version__",
    "expand_job_ids",
    "group_for_arrays",
    "manifest_entry",
    "parse_exit_code",
    "parse_sacct",
    "parse_sbatch_output",
    "parse_squeue",
    "render_array_script",
    "render_manifest",
    "sbatch_argv",
    "slurm_time",
    "to_job_state",
]
