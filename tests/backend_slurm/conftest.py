"""Fixtures shared by the Slurm tests: the real local cluster (see ``support.slurm``)."""

from __future__ import annotations

from support.slurm import slurm_cluster

__all__ = ["slurm_cluster"]
