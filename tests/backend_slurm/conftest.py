"""Fixtures shared by the Slurm tests: the real local cluster (see ``support.slurm``)."""

from __future__ import annotations

from support.slurm import one_slurm_test_at_a_time, slurm_aside, slurm_cluster

__all__ = ["one_slurm_test_at_a_time", "slurm_aside", "slurm_cluster"]
