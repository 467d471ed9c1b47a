"""A Python function objective starts warm on the local backend (``dse_local/_warm.py``): its
module is imported once, by a server each attempt is forked from, and every attempt is still a
process of its own under its wrapper — its own environment, working directory, logs, time
limit, exit status and failure, and no state left by the attempt before it.

Each campaign runs as a real script (``python script.py``), as a user runs it; the module
under test writes one line to ``imports.log`` each time its top level runs, and the pid that
ran it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

TIMEOUT = 600
"""Seconds a script may take: generous, for a loaded 2-core machine."""

OBJECTIVE = """\
import os
import sys
import time

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "imports.log"), "a") as f:
    f.write(f"{os.getpid()} {os.environ.get('DSE_TRIAL_ID', '-')}\\n")
print("imported")  # never into the controller's pipe
if sys.argv[0] != "script.py":  # a worker's import reads /dev/null, never the controller's
    assert sys.stdin.read() == ""
{guard}
SEEN = []


def objective(params):
    SEEN.append(params["x"])  # a module's state: never seen by the next attempt
    kind = params["kind"]
    if kind == "raise":
        raise ValueError(f"no good: {params['x']}")
    if kind == "exit":
        sys.exit(3)
    if kind == "hang":
        time.sleep(600)
    if kind == "spawn":  # a child that imports the main module afresh, as spawn does
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(1) as pool:
            assert pool.map(abs, [-params["x"]]) == [params["x"]]
    print("out", params["x"])
    return {
        "loss": float(params["x"]),
        "seen": len(SEEN),
        "pid": os.getpid(),
        "in_campaign_dir": float(os.path.exists("script.py")),  # the command's cwd
        "trial": float(os.environ["DSE_TRIAL_ID"].rsplit("-", 1)[1]),
        "path0": float(sys.path[0] == os.getcwd()),
    }
"""

SCRIPT = """\
import json
import dse
from objective import objective

results = dse.run(
    {{
        "campaign": {{"name": "warm", "agent": "grid", "max_parallelism": 2}},
        "space": {{"x": [1, 2, 3, 4], "kind": {kinds!r}}},
        "objectives": [{{"metric": "loss"}}],
        "environment": {{"time_limit": {time_limit!r}, "gpus": {gpus}}},
        "backend": {{"local": {{"cpus": 2, "gpus": 1, "grace": "1s"}}}},
    }},
    objective, quiet=True,
)
print(json.dumps([[t.params["x"], t.params["kind"], t.status.value,
                   t.failure.value if t.failure else None, t.metrics,
                   [a.exit_code for a in t.attempts]] for t in results.trials]))
"""


def run(tmp: Path, kinds: list[str], *, guard: str = "", gpus: int = 0,
        time_limit: str = "120s") -> tuple[list[list[object]], list[str]]:
    """Run the campaign in *tmp* (the script must exit 0); its trials and the lines of
    imports.log (one per run of the module's top level: its pid and trial id).

    *time_limit* is every trial's: short only where a trial is meant to hang, since a spawned
    child's fresh interpreter can take seconds to start on a loaded machine."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "objective.py").write_text(OBJECTIVE.replace("{guard}", guard))
    script = SCRIPT.format(kinds=kinds, gpus=gpus, time_limit=time_limit)
    (tmp / "script.py").write_text(textwrap.dedent(script))
    proc = subprocess.run([sys.executable, "script.py"], cwd=tmp, capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)
    # dse.run raises NoResultError only when nothing completed; every case completes some.
    assert proc.returncode == 0, proc.stderr
    trials = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = (tmp / "imports.log").read_text().splitlines()
    return trials, lines


def by_kind(trials: list[list[object]], kind: str) -> list[list[object]]:
    return [t for t in trials if t[1] == kind]


def test_the_module_is_imported_once_and_each_attempt_is_a_process_of_its_own(
    tmp_path: Path,
) -> None:
    trials, imports = run(tmp_path, ["ok"])
    assert [t[2] for t in trials] == ["completed"] * 4
    # Once by the script itself, once by the warm server: never once per attempt.
    assert len(imports) == 2, imports
    server_pids = {int(line.split()[0]) for line in imports if line.split()[1] == "-"}
    metrics: list[dict[str, float]] = [t[4] for t in trials]  # type: ignore[misc]
    pids = {m["pid"] for m in metrics}
    assert len(pids) == 4
    assert not pids & server_pids
    for number, m in enumerate(metrics, 1):
        assert m["seen"] == 1  # no state from the attempt before
        assert m["in_campaign_dir"] == 1
        assert m["path0"] == 1
        assert m["trial"] == number
    logs = sorted((tmp_path / ".dse" / "warm" / "run-1").glob("*/attempt-1/stdout.log"))
    assert [p.read_text() for p in logs] == [f"out {x}\n" for x in (1, 2, 3, 4)]


def test_a_warm_attempt_fails_exits_and_times_out_as_a_cold_one_does(tmp_path: Path) -> None:
    trials, imports = run(tmp_path, ["ok", "raise", "exit", "hang"], time_limit="4s")
    assert len(imports) == 2, imports  # all of them warm
    for t in by_kind(trials, "ok"):
        assert t[2] == "completed"
    for t in by_kind(trials, "raise"):
        assert (t[2], t[3], t[5]) == ("failed", "nonzero_exit", [1])
    for t in by_kind(trials, "exit"):
        assert (t[2], t[3], t[5]) == ("failed", "nonzero_exit", [3])
    for t in by_kind(trials, "hang"):
        assert (t[2], t[3]) == ("budget_exhausted", "time_limit")
    errors = sorted((tmp_path / ".dse" / "warm" / "run-1").glob("*/attempt-1/stderr.log"))
    raised = [p.read_text() for p in errors if "ValueError" in p.read_text()]
    assert len(raised) == 4  # the traceback, from the function's frame on
    assert all("no good" in text and "_worker" not in text for text in raised)


def test_a_module_that_cannot_be_imported_outside_a_trial_starts_each_attempt_cold(
    tmp_path: Path,
) -> None:
    guard = ('if "DSE_TRIAL_ID" not in os.environ and sys.argv[0] != "script.py":\n'
             '    raise RuntimeError("only in a trial")\n')
    trials, imports = run(tmp_path, ["ok"], guard=guard)
    assert [t[2] for t in trials] == ["completed"] * 4
    # The warm server's import failed (not in a trial): every attempt imported it itself.
    in_trials = [line for line in imports if line.split()[1] != "-"]
    assert len(in_trials) == 4, imports


def test_a_trial_given_gpus_starts_its_own_interpreter(tmp_path: Path) -> None:
    trials, imports = run(tmp_path, ["ok"], gpus=1)
    assert [t[2] for t in trials] == ["completed"] * 4
    assert sorted(line.split()[1] for line in imports) == [
        "-", "warm-1-1", "warm-1-2", "warm-1-3", "warm-1-4"]


def test_multiprocessing_spawn_works_in_a_warm_attempt(tmp_path: Path) -> None:
    # Its children import the main module: the worker's, as in a cold attempt.
    trials, imports = run(tmp_path, ["spawn"])
    assert [t[2] for t in trials] == ["completed"] * 4
    assert len(imports) == 2, imports


def test_only_a_worker_named_by_its_absolute_interpreter_starts_warm() -> None:
    # A bare `python` is found on the attempt's PATH (the controller's bin directory first),
    # which the warm server's may not be: such a command starts cold.
    from dse_local._warm import is_worker

    assert is_worker([sys.executable, "-m", "dse._worker", "mod:objective"])
    assert not is_worker(["python", "-m", "dse._worker", "mod:objective"])
    assert not is_worker([sys.executable, "-m", "other", "mod:objective"])
    assert not is_worker([sys.executable, "script.py", "-m", "dse._worker"])
