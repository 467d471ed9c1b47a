"""Where and when trials run: waves, rolling refills, CPU and GPU slots — real processes.

Every assertion reads the time stamps the workload processes wrote themselves.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from dse_local import LocalBackend


def overlap(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """Whether two traced [start, end] intervals overlap."""
    return a["start"] < b["end"] and b["start"] < a["end"]


def most_at_once(traces: Iterable[Mapping[str, float]]) -> int:
    """The largest number of traced intervals running at one instant."""
    spans = list(traces)
    return max(sum(1 for s in spans if s["start"] <= t["start"] < s["end"]) for t in spans)


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Put an ``nvidia-smi`` listing two GPUs first on PATH; return how many it lists."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'echo "GPU 0: Fake (UUID: GPU-0)"\n'
        'echo "GPU 1: Fake (UUID: GPU-1)"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return 2


def test_a_wave_runs_at_once_and_the_next_wave_waits_for_all_of_it(run_local):
    run = run_local([{"x": i, "sleep": 0.6} for i in range(1, 7)],
                    mode="waves", max_parallelism=3)
    assert run.result.stats.completed == 6
    traces = run.traces()
    first, second = [traces[n] for n in (1, 2, 3)], [traces[n] for n in (4, 5, 6)]
    for a, b in itertools.combinations(first, 2):
        assert overlap(a, b)
    last_end = max(t["end"] for t in first)
    assert all(t["start"] > last_end for t in second)


def test_rolling_refills_a_slot_while_a_long_trial_still_runs(run_local):
    durations = [1.5, 0.2, 0.2, 0.2]
    run = run_local([{"x": i, "sleep": d} for i, d in enumerate(durations, start=1)],
                    mode="rolling", max_parallelism=2)
    assert run.result.stats.completed == 4
    traces = run.traces()
    assert traces[3]["start"] < traces[1]["end"]
    assert traces[4]["start"] < traces[1]["end"]
    assert most_at_once(traces.values()) <= 2


def test_gpus_are_detected_from_nvidia_smi(fake_gpus):
    assert LocalBackend().gpus == fake_gpus


def test_a_gpu_is_never_shared_by_two_running_trials(run_local, fake_gpus):
    # Plenty of CPUs: the GPUs alone must hold trials back.
    backend = LocalBackend(cpus=8, grace=1.0)
    run = run_local([{"x": i, "sleep": 0.3} for i in range(1, 7)], backend=backend,
                    mode="rolling", max_parallelism=4, environment={"gpus": 1})
    assert run.result.stats.completed == 6
    traces = run.traces()
    assert {t["cuda"] for t in traces.values()} <= {str(g) for g in range(fake_gpus)}
    for a, b in itertools.combinations(traces.values(), 2):
        if a["cuda"] == b["cuda"]:
            assert not overlap(a, b)
    assert most_at_once(traces.values()) <= fake_gpus


def test_a_trial_asking_for_no_gpu_sees_none(run_local, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    run = run_local([{"x": 1, "sleep": 0}], backend=LocalBackend(cpus=2, gpus=2))
    assert run.traces()[1]["cuda"] == ""


def test_a_trial_waits_until_its_cpus_are_free(run_local):
    backend = LocalBackend(cpus=2, gpus=0)
    run = run_local([{"x": i, "sleep": 0.3} for i in range(1, 4)], backend=backend,
                    mode="rolling", max_parallelism=3, environment={"cpus": 2})
    assert run.result.stats.completed == 3
    traces = run.traces()
    for a, b in itertools.combinations(traces.values(), 2):
        assert not overlap(a, b)
