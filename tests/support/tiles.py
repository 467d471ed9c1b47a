"""The workload of the campaigns docs/agents.md shows for ``agent = "ax"`` and OptunaHub's
samplers: a kernel's time over ``tile``, ``unroll`` and ``lr``, best (1.0 s) at tile 64,
unroll 2 and lr 10^-2 (away from the space's centre, where Ax starts), written by the tests
beside the campaign file as ``kernel.py``."""

from __future__ import annotations

KERNEL = """\
import json, math, os
with open(os.environ["DSE_PARAMS_FILE"], encoding="utf-8") as handle:
    p = json.load(handle)
seconds = (1 + (math.log2(p["tile"]) - 6) ** 2 / 4 + {1: 0.3, 2: 0.0, 4: 0.1, 8: 0.4}[p["unroll"]]
           + (math.log10(p["lr"]) + 2) ** 2 / 10)
out = os.path.join(os.environ["DSE_TRIAL_DIR"], "result.json")
with open(out + ".tmp", "w", encoding="utf-8") as handle:
    json.dump({"complete": True, "metrics": {"seconds": seconds}}, handle)
os.replace(out + ".tmp", out)
"""
