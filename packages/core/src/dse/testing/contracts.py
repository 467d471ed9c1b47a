"""Contract suites for plugin authors (needs pytest: ``pip install dse-core[testing]``)."""

from __future__ import annotations

from dse.testing._agent_contract import AgentContract
from dse.testing._backend_contract import BackendContract, contract_job, wait_for
from dse.testing._storage_contract import StorageContract

__all__ = ["AgentContract", "BackendContract", "StorageContract", "contract_job", "wait_for"]
