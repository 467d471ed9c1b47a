"""Integration writers in processes of their own, for the tests that kill them with SIGKILL
part way (tests/integrations): each is a short Python script that patches what it must (a
call that hangs, a slower write) and then calls :func:`write_missing`, which opens the
integration on the campaign and writes the trials it does not hold, saying each step on its
standard output (``open``, ``wrote KEY``, ``done``) for the test to wait on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse import CampaignExport, TrialExport
from support.waiting import wait_until

if TYPE_CHECKING:
    from dse import Integration

PRELUDE = f"""\
import json, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
spec = json.loads(sys.argv[1])
"""
"""What every writer script begins with: the tests' modules importable, its spec read."""


def encode(campaign: CampaignExport, trials: list[TrialExport], **extra: Any) -> str:
    """The spec a writer script is given: the campaign, the trials and *extra*, as JSON."""
    return json.dumps({"campaign": {**asdict(campaign), "workspace": str(campaign.workspace)},
                       "trials": [asdict(t) for t in trials], **extra})


def decode(spec: dict[str, Any]) -> tuple[CampaignExport, list[TrialExport]]:
    """The campaign and the trials of a writer's *spec* (:func:`encode`'s, parsed)."""
    c = spec["campaign"]
    campaign = CampaignExport(**{
        **c, "workspace": Path(c["workspace"]),
        "params": tuple((n, k, tuple(v)) for n, k, v in c["params"]),
        "objectives": tuple(tuple(o) for o in c["objectives"])})
    trials = [TrialExport(**{**t, "curve": tuple(tuple(p) for p in t["curve"])})
              for t in spec["trials"]]
    return campaign, trials


def write_missing(integration: Integration, spec: dict[str, Any]) -> None:
    """Open *integration* on the spec's campaign, write the trials it does not hold, close it,
    saying each step."""
    campaign, trials = decode(spec)
    held = set(integration.open(campaign))
    print("open", json.dumps(sorted(held)), flush=True)
    for t in trials:
        if t.key not in held:
            integration.write(t)
            print("wrote", t.key, flush=True)
    integration.close()
    print("done", flush=True)


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


class Writers:
    """Writer processes of one test running *script* (after :data:`PRELUDE`), each printing
    to a file the test reads as it goes; :meth:`kill_all` kills any still running."""

    def __init__(self, tmp_path: Path, campaign: CampaignExport, script: str) -> None:
        self.tmp_path = tmp_path
        self.campaign = campaign
        self.script = PRELUDE + script
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, trials: list[TrialExport],
              **extra: Any) -> tuple[subprocess.Popen[bytes], Path]:
        out = self.tmp_path / f"writer-{len(self.started)}.out"
        with out.open("wb") as handle:
            proc = subprocess.Popen(
                [sys.executable, "-c", self.script, encode(self.campaign, trials, **extra)],
                stdout=handle, stderr=subprocess.STDOUT)
        self.started.append(proc)
        return proc, out

    @staticmethod
    def await_line(proc: subprocess.Popen[bytes], out: Path, line: bytes) -> None:
        """Wait until *proc* printed *line* (failing at once if it ended first)."""
        wait_until(lambda: line in out.read_bytes() or proc.poll() is not None, 60,
                   f"the writer to print {line!r}", seen=out.read_text)
        assert line in out.read_bytes(), out.read_text()

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                kill(proc)
