"""SlurmBackend: the contract on the real cluster, reconciliation by job name, options, and
failing Slurm commands (stand-in commands on PATH) that must never fail a trial."""

from __future__ import annotations

import os
import shlex
import stat
import sys
from typing import TYPE_CHECKING

import pytest

from dse import ConfigError, JobSpec, JobState
from dse.testing import BackendContract, FakeClock
from dse.testing.contracts import contract_job, wait_for
from dse_slurm import SacctRow, SlurmBackend, SlurmOptions, usage_from_sacct

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from dse import Backend


@pytest.mark.xdist_group("slurm")
class TestSlurmContract(BackendContract):
    @pytest.fixture
    def backend_factory(self, slurm_cluster: str) -> Callable[[], Backend]:
        return lambda: SlurmBackend(options=SlurmOptions(partition="batch"), sacct_lag=10)

    @pytest.fixture
    def time_limit(self) -> float:
        return 60.0  # Slurm's time limits are whole minutes


@pytest.mark.xdist_group("slurm")
def test_an_attempt_whose_id_was_never_recorded_is_found_by_its_job_name(
    slurm_cluster: str, tmp_path: Path
) -> None:
    first = SlurmBackend()
    jobs = [contract_job(tmp_path / "run", f"t-{i}", "succeed") for i in range(3)]
    ids = first.submit(jobs)
    # A new controller knows the specs (they were recorded before submission), not the ids.
    second = SlurmBackend()
    try:
        assert [second.job_id_for(job) for job in jobs] == ids
        assert second.job_id_for(contract_job(tmp_path / "run", "never", "succeed")) is None
        second.reattach(dict(zip(ids, jobs, strict=True)))
        final = wait_for(second, ids)
        assert {s.state for s in final.values()} == {JobState.SUCCEEDED}
    finally:
        second.shutdown()
        first.shutdown()


def test_options_from_the_campaign_file() -> None:
    backend = SlurmBackend.from_options({
        "partition": "gpu", "account": "proj", "exclusive": True, "array_throttle": 4,
        "extra_sbatch": ["--mail-type=END"], "setup": ["module load cuda"],
        "signal_lead": "2m", "sacct_lag": "10s",
    })
    assert backend.options == SlurmOptions(
        partition="gpu", account="proj", exclusive=True, array_throttle=4,
        extra_sbatch=("--mail-type=END",), setup=("module load cuda",), signal_lead_s=120,
    )
    assert backend.sacct_lag == 10.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"partiton": "x"}, r"backend.slurm: unknown option\(s\) \['partiton'\]"),
        ({"partition": 3}, "backend.slurm.partition: expected a string"),
        ({"exclusive": "yes"}, "backend.slurm.exclusive: expected true or false"),
        ({"setup": "module load x"}, "backend.slurm.setup: expected a list of strings"),
        ({"array_throttle": 0}, "backend.slurm.array_throttle: >= 1 expected"),
        ({"partition": "a\nb"}, "backend.slurm.partition: .* holds a newline"),
        ({"signal_lead": "soon"}, "backend.slurm.signal_lead"),
    ],
)
def test_bad_options_name_the_key(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SlurmBackend.from_options(options, source="c.toml")


def test_usage_reads_sacct_alloc_tres() -> None:
    row = SacctRow("5_1", "COMPLETED", 0, None, elapsed_s=42, alloc_tres={
        "billing": "4", "cpu": "4", "gres/gpu": "2", "mem": "8G", "node": "1",
    })
    assert usage_from_sacct(row) == {
        "elapsed_s": 42.0, "billing": 4.0, "cpus": 4.0, "gpus": 2.0, "mem_mb": 8192.0,
        "nodes": 1.0,
    }
    assert usage_from_sacct(SacctRow("5", "FAILED", 1, None)) == {}


# -- Slurm commands that fail (stand-ins on PATH; the real cluster is tested above) ---------

SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "srun",
                  "salloc", "sstat")
"""Every Slurm command a test could reach: all are stand-ins, so none reaches a real
cluster (a real ``sacct`` with no cluster waits out its timeouts)."""
UNFAKED_LOG = "unfaked-calls"


def fake_slurm(bin_dir: Path, **scripts: str) -> None:
    """Put stand-in Slurm commands (shell bodies) first on PATH; every Slurm command not in
    *scripts* is one that fails loudly: it exits 127 and the test fails at teardown, naming
    it (a backend that survives a failing command would otherwise hide the call)."""
    bin_dir.mkdir(exist_ok=True)
    unknown = sorted(set(scripts) - set(SLURM_COMMANDS))
    assert not unknown, f"fake_slurm: not Slurm commands: {unknown}"
    log = bin_dir / UNFAKED_LOG
    for name in SLURM_COMMANDS:
        body = scripts.get(name)
        if body is None:
            body = (f'echo "{name} $*" >> {shlex.quote(str(log))}\n'
                    f'echo "fake_slurm: {name} was called but this test does not fake it" >&2\n'
                    "exit 127")
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory first on PATH for :func:`fake_slurm`; the test fails when it called a
    Slurm command it did not fake."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_slurm(bin_dir)  # until the test says otherwise, every Slurm command fails loudly
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    yield bin_dir
    log = bin_dir / UNFAKED_LOG
    if log.exists():
        pytest.fail(f"the test called Slurm commands it did not fake: {log.read_text()!r}")


def job(tmp_path: Path, name: str, argv: tuple[str, ...] = ("true",)) -> JobSpec:
    trial_dir = tmp_path / "run" / name
    trial_dir.mkdir(parents=True, exist_ok=True)
    return JobSpec(f"c-1-{name}", 1, {}, trial_dir, argv=argv, time_limit=60.0)


def test_a_failing_squeue_is_retried_next_pass_and_never_fails_a_trial(
    fake_bin: Path, tmp_path: Path
) -> None:
    state = tmp_path / "squeue-state"
    fake_slurm(
        fake_bin,
        sbatch="echo 77",
        squeue=f'if [ ! -e {state} ]; then touch {state};'
               ' echo "slurm_load_jobs error: Socket timed out on send/recv" >&2; exit 1; fi\n'
               'echo "77_0|RUNNING|n1|None"',
    )
    backend = SlurmBackend()
    backend.submit([job(tmp_path, "a")])

    assert backend.poll() == []  # the failed query: nothing changes, nothing fails
    assert backend.poll_failures == 1
    (status,) = backend.poll()

    assert (status.job_id, status.state, status.node) == ("77_0", JobState.RUNNING, "n1")
    assert backend.poll_failures == 0
    assert backend.last_pass_commands == {"squeue": 1}
    assert backend.commands == {"sbatch": 1, "squeue": 2}


def test_sacct_lag_is_waited_out_then_squeue_decides(fake_bin: Path, tmp_path: Path) -> None:
    fake_slurm(
        fake_bin,
        sbatch="echo 78",
        squeue='echo "78_0|COMPLETED|n2|None"',
        sacct='echo "78_0|RUNNING|0:0|n2|3|2026-01-01T00:00:00|Unknown|cpu=1"',
    )
    clock = FakeClock()
    backend = SlurmBackend(sacct_lag=30.0)
    backend.use_clock(clock)
    backend.submit([job(tmp_path, "a")])

    assert backend.poll() == []  # sacct still says RUNNING: ask again next pass
    assert backend.last_pass_commands == {"sbatch": 1, "squeue": 1, "sacct": 1}
    assert backend.poll() == []
    assert backend.last_pass_commands == {"sacct": 1}  # squeue is not asked again
    clock.sleep(29.0)
    assert backend.poll() == []  # not yet: the lag is counted on the backend's clock
    clock.sleep(1.0)
    (status,) = backend.poll()
    assert (status.state, status.exit_code, status.node) == (JobState.SUCCEEDED, 0, "n2")
    assert backend.poll() == []
    assert backend.last_pass_commands == {}  # a finished job is never queried again


@pytest.mark.parametrize(
    ("stderr", "state"),
    [
        ("sbatch: error: Batch job submission failed: Requested node configuration is not"
         " available", JobState.INVALID),
        ("sbatch: error: Batch job submission failed: Socket timed out on send/recv",
         JobState.LAUNCH_ERROR),
    ],
)
def test_a_refused_sbatch_is_invalid_or_a_launch_error(
    fake_bin: Path, tmp_path: Path, stderr: str, state: JobState
) -> None:
    fake_slurm(fake_bin, sbatch=f"echo '{stderr}' >&2; exit 1", squeue="exit 0")
    backend = SlurmBackend()
    ids = backend.submit([job(tmp_path, "a"), job(tmp_path, "b")])

    statuses = backend.poll()

    assert [s.job_id for s in statuses] == ids
    assert {s.state for s in statuses} == {state}
    assert all("Batch job submission failed" in (s.reason or "") for s in statuses)


def test_a_job_without_command_is_invalid_without_reaching_slurm(
    fake_bin: Path, tmp_path: Path
) -> None:
    fake_slurm(fake_bin, sbatch="echo 79", squeue="exit 0", sacct="exit 0")
    backend = SlurmBackend()
    bad, good = backend.submit([job(tmp_path, "a", argv=()), job(tmp_path, "b")])

    assert good == "79_0"
    assert backend.commands == {"sbatch": 1}
    statuses = {s.job_id: s for s in backend.poll()}
    assert statuses[bad].state is JobState.INVALID


def test_a_job_both_commands_forgot_is_lost(fake_bin: Path, tmp_path: Path) -> None:
    fake_slurm(
        fake_bin,
        sbatch="echo 80",
        squeue="echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1",
        sacct="exit 0",
    )
    backend = SlurmBackend(sacct_lag=0.0)
    (job_id,) = backend.submit([job(tmp_path, "a")])

    (status,) = backend.poll()

    assert (status.job_id, status.state, status.ambiguous) == (job_id, JobState.LOST, True)
    assert "vanished" in (status.reason or "")


def test_without_accounting_squeue_end_states_decide(fake_bin: Path, tmp_path: Path) -> None:
    fake_slurm(
        fake_bin,
        sbatch="echo 81",
        squeue='echo "81_0|PREEMPTED|n3|None"',
        sacct="echo 'sacct: error: Slurm accounting storage is disabled' >&2; exit 1",
    )
    backend = SlurmBackend()
    backend.submit([job(tmp_path, "a")])

    (status,) = backend.poll()

    assert (status.state, status.node) == (JobState.PREEMPTED, "n3")
    assert backend.accounting is False


def test_the_trial_path_starts_with_the_controllers_python(
    fake_bin: Path, tmp_path: Path
) -> None:
    fake_slurm(fake_bin, sbatch="echo 82")
    SlurmBackend().submit([job(tmp_path, "a")])
    (manifest,) = (tmp_path / "run" / ".slurm").glob("*.jsonl")
    assert f'"path": ["{os.path.dirname(sys.executable)}"]' in manifest.read_text()


@pytest.mark.parametrize(
    ("every", "time_limit", "expected"),
    [
        ("120.0", 3600.0, "#SBATCH --signal=B:USR1@120"),  # one checkpoint cadence
        ("5", 3600.0, "#SBATCH --signal=B:USR1@60"),  # never under Slurm's resolution
        ("900", 600.0, "#SBATCH --signal=B:USR1@300"),  # never more than half the limit
        (None, 3600.0, None),  # no cadence: no signal
        ("120", None, None),  # no time limit: nothing to warn of
    ],
)
def test_the_signal_lead_follows_the_checkpoint_cadence(
    fake_bin: Path, tmp_path: Path, every: str | None, time_limit: float | None,
    expected: str | None,
) -> None:
    fake_slurm(fake_bin, sbatch="echo 83")
    env = {} if every is None else {"DSE_CHECKPOINT_EVERY": every}
    spec = JobSpec("c-1-a", 1, {}, tmp_path / "run" / "a", argv=("true",), env=env,
                   time_limit=time_limit)
    SlurmBackend().submit([spec])
    (script,) = (tmp_path / "run" / ".slurm").glob("*.sh")
    signals = [line for line in script.read_text().splitlines() if "--signal" in line]
    assert signals == ([] if expected is None else [expected])


SLOW_QUERY_CAMPAIGN = """
[campaign]
name = "slow"
agent = "random"
backend = "slurm"
max_parallelism = 1
max_trials = 1
poll_interval = ["0.2s", "0.5s"]

[environment]
command = ["true"]

[backend.slurm]
command_timeout = "60s"

[[objectives]]
metric = "value"

[space]
x = { type = "float", low = 0, high = 1 }
"""


def test_sigterm_during_a_squeue_that_does_not_answer_cancels_within_a_second(
    fake_bin: Path, tmp_path: Path
) -> None:
    import signal
    import sqlite3
    import subprocess
    import time

    querying, cancelled = tmp_path / "querying", tmp_path / "cancelled"
    fake_slurm(
        fake_bin,
        sbatch="echo 91",
        # slurmctld too busy to answer a query until the job is cancelled
        squeue=f'if [ -e {cancelled} ]; then echo "91_0|CANCELLED|n1|None"; exit 0; fi\n'
               f"touch {querying}\nexec sleep 60",
        scancel=f"date +%s.%N >> {cancelled}",
        sacct='echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1',
    )
    (tmp_path / "campaign.toml").write_text(SLOW_QUERY_CAMPAIGN)
    proc = subprocess.Popen([sys.executable, "-m", "dse", "run", "campaign.toml"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while not querying.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "squeue was never asked"
            time.sleep(0.05)
        time.sleep(0.5)  # squeue is hanging
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert cancelled.exists(), "the job was never cancelled"
    scancel_at = float(cancelled.read_text().split()[0])
    assert scancel_at - sent < 1.0, f"scancel {scancel_at - sent:.2f}s after the signal"
    conn = sqlite3.connect(tmp_path / ".dse" / "dse.sqlite")
    try:
        assert conn.execute("SELECT status FROM campaigns").fetchall() == [("cancelled",)]
        assert conn.execute("SELECT status FROM trials").fetchall() == [("cancelled",)]
    finally:
        conn.close()
