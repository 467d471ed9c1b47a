"""A small integration for the tests of the copier (dse.integrations._exporter), loaded by
``DSE_PLUGINS=support.ledger``: each trial is one JSON line of ``<workspace>/ledger.jsonl``,
written whole with one ``write`` and fsynced; a line a killed writer left without its newline
is what :meth:`Ledger.open` removes. ``LEDGER_SLOW_S`` makes each write take that long;
``LEDGER_FAIL`` makes every write raise, to show one integration failing stops only itself."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dse

if TYPE_CHECKING:
    from collections.abc import Iterable


class Ledger(dse.Integration):
    name = "ledger"
    version = "1"

    def __init__(self, file: str = "ledger.jsonl") -> None:
        self.file = file
        self.path: Path | None = None

    def open(self, campaign: dse.CampaignExport) -> Iterable[str]:
        self.path = campaign.workspace / self.file
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        whole = data[:data.rfind(b"\n") + 1]
        if whole != data:  # a writer killed mid-line: its trial is written again
            with self.path.open("r+b") as f:
                f.truncate(len(whole))
        return [json.loads(line)["key"] for line in whole.decode().splitlines()]

    def write(self, trial: dse.TrialExport) -> None:
        assert self.path is not None
        if os.environ.get("LEDGER_FAIL"):
            raise ConnectionError("the ledger's server is down")
        time.sleep(float(os.environ.get("LEDGER_SLOW_S", "0")))
        line = json.dumps({
            "key": trial.key, "name": trial.name, "status": trial.status,
            "params": dict(trial.params), "metrics": dict(trial.metrics),
            "curve": [[step, dict(m)] for step, m, _ in trial.curve], "pid": os.getpid(),
            "config_hash": trial.config_hash, "cache_of": trial.cache_of,
        })
        with self.path.open("a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


@dse.hookimpl
def dse_register_integrations() -> list[type[dse.Integration]]:
    return [Ledger]


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """The whole lines of the ledger *path*."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
