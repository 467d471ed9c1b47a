"""docs/python-api.md, "Ask and tell": its example, run as it is written — alone, then as three
processes at once, as the doc says it may be run — with the random agent of dse-agents. The
record holds what the loops told: every trial of ``max_trials`` once, its learning curve, the
failures with their words."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import dse

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"
TIMEOUT = 300
"""Seconds a script may take: generous, for a loaded 2-core machine."""


def doc_block(first_line: str) -> str:
    """The ```python block of docs/python-api.md whose first line starts with *first_line*."""
    blocks = DOC.read_text(encoding="utf-8").split("```python\n")[1:]
    found = [b.split("\n```", 1)[0] for b in blocks if b.startswith(first_line)]
    assert len(found) == 1, f"one ```python block starting {first_line!r} in {DOC}"
    return found[0] + "\n"


def run_scripts(directory: Path, count: int) -> list[str]:
    """The example run as *count* processes at once in *directory*; their stdouts."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ask_tell.py").write_text(textwrap.dedent(doc_block("# ask_tell.py")))
    procs = [subprocess.Popen([sys.executable, "ask_tell.py"], cwd=directory, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(count)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        outs.append(out)
    return outs


def check_record(directory: Path) -> dse.Results:
    results = dse.load(directory / ".dse", campaign="quad-ask", run=1)
    assert len(results.trials) == 12  # max_trials, none more
    assert set(results.counts) <= {"completed", "failed"}
    assert len({(t.params["x"], t.params["layers"]) for t in results.trials}) == 12
    for t in results.trials:
        x, layers = t.params["x"], t.params["layers"]
        if x > 0.8:
            assert t.status is dse.TrialStatus.FAILED
            assert t.message == "diverged"
        else:
            assert t.status is dse.TrialStatus.COMPLETED
            assert t.metrics == {"loss": (x - 0.3) ** 2 + 0.1 * layers}
            assert t.trial_dir is not None
            progress = (Path(t.trial_dir) / "progress.jsonl").read_text().splitlines()
            assert len(progress) == 3
    assert results.best is not None
    return results


def test_the_example_runs_alone(tmp_path: Path) -> None:
    (out,) = run_scripts(tmp_path, 1)
    results = check_record(tmp_path)
    assert out.startswith("<Results quad-ask run 1: completed, 12 trials")
    assert str(results.best.params if results.best else None) in out


def test_the_example_runs_as_three_processes_at_once(tmp_path: Path) -> None:
    outs = run_scripts(tmp_path, 3)
    results = check_record(tmp_path)
    assert results.run_id == 1  # one run, three loops
    assert any("quad-ask run 1" in out for out in outs)
    # A loop that started once run 1 had ended (on a loaded machine, one may) started a rerun,
    # answered from the record as a rerun of `dse run` is: no configuration asked again.
    for out in outs:
        if "quad-ask run 1" not in out:
            found = re.search(r"quad-ask run (\d+)", out)
            assert found is not None, out
            rerun = dse.load(tmp_path / ".dse", campaign="quad-ask", run=int(found[1]))
            assert set(rerun.counts) <= {"cached"}, rerun.counts
