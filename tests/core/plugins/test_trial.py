"""``dse.trial`` as a workload uses it: a real Python process under the trial contract."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import dse
import dse.trial

OBJECTIVES = [dse.Objective("time_ms")]
PARAMS = {"tile_m": 64, "layout": "row", "vectorize": True, "lr": 0.001, "name": "a b; rm -rf"}


class Trial(NamedTuple):
    """One prepared trial: its environment, its job and the environment variables it gets."""

    environment: dse.CommandEnvironment
    job: dse.JobSpec

    @property
    def dir(self) -> Path:
        return self.job.trial_dir

    def evaluate(self) -> dse.Evaluation:
        """Score the trial as the engine does after its process exited 0."""
        status = dse.JobStatus("4711", dse.JobState.SUCCEEDED, exit_code=0)
        return self.environment.evaluate(self.job, status)


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DSE_")}


@pytest.fixture
def trial(tmp_path: Path) -> Trial:
    """A trial prepared by the default environment: attempt 2, data version ``v2``."""
    environment = dse.CommandEnvironment(
        dse.EnvironmentConfig(command=("python", "workload.py")), OBJECTIVES
    )
    trial_dir = tmp_path / "kernels-1-7"
    trial_dir.mkdir()
    job = environment.prepare(
        dse.TrialInfo("kernels-1-7", 7, 2, PARAMS, trial_dir, data_version="v2")
    )
    return Trial(environment, job)


@pytest.fixture
def run_workload(trial: Trial) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run Python source as the trial's workload, with the environment dse would give it."""

    def run(
        source: str, *, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = _base_env()
        full_env.update(trial.job.env if env is None else env)
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(source)],
            env=full_env,
            cwd=trial.dir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run


def test_a_workload_reads_its_params_with_their_types(run_workload):
    done = run_workload("""
        import json, dse.trial
        print(json.dumps(dse.trial.params()))
    """)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == PARAMS


def test_a_workload_sees_its_trial_attempt_and_expected_data_version(run_workload, trial):
    done = run_workload("""
        import json, dse.trial
        print(json.dumps([
            dse.trial.trial_id(), str(dse.trial.trial_dir()), dse.trial.attempt(),
            dse.trial.data_version(),
        ]))
    """)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["kernels-1-7", str(trial.dir), 2, "v2"]


def test_the_checkpoint_dir_is_created_and_kept_for_the_next_attempt(run_workload, trial):
    resume = """
        import dse.trial
        state = dse.trial.checkpoint_dir() / "step"
        step = int(state.read_text()) if state.exists() else 0
        state.write_text(str(step + 10))
        print(dse.trial.checkpoint_dir(), step)
    """

    first = run_workload(resume)
    second = run_workload(resume)

    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == [str(trial.job.checkpoint_dir), "0"]
    assert second.stdout.split() == [str(trial.job.checkpoint_dir), "10"]
    assert trial.job.checkpoint_dir.is_dir()


def test_a_reported_result_is_scored_by_the_default_environment(run_workload, trial):
    done = run_workload("""
        import dse.trial
        path = dse.trial.report({"time_ms": 1.25, "gflops": 812}, note="warm cache", runs=3)
        print(path)
    """)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(trial.dir / "result.json")
    evaluation = trial.evaluate()
    assert evaluation.ok
    assert evaluation.metrics == {"time_ms": 1.25, "gflops": 812.0}
    written = json.loads((trial.dir / "result.json").read_text())
    environment = written.pop("environment")
    assert written == {
        "complete": True,
        "metrics": {"time_ms": 1.25, "gflops": 812},
        "data_version": "v2",
        "note": "warm cache",
        "runs": 3,
    }
    # The environment the trial ran in: this Python and its distributions (dse-core among them).
    assert environment["python"] == platform.python_version()
    assert environment["distributions"]["dse-core"] == dse.__version__
    assert evaluation.environment == {"python": environment["python"],
                                      "distributions": environment["distributions"]}
    assert sorted(p.name for p in trial.dir.iterdir()) == ["params.json", "result.json"]


def test_the_data_version_actually_read_is_reported(run_workload, trial):
    done = run_workload("""
        import dse.trial
        dse.trial.report({"time_ms": 1.0}, data_version="v1-stale-mirror")
    """)

    assert done.returncode == 0, done.stderr
    document = json.loads((trial.dir / "result.json").read_text())
    assert document["data_version"] == "v1-stale-mirror"
    assert trial.evaluate().ok


def test_without_an_expected_data_version_the_result_says_null(run_workload, trial):
    env = {**trial.job.env, "DSE_DATA_VERSION": ""}

    done = run_workload(
        "import dse.trial; print(dse.trial.data_version()); dse.trial.report({'time_ms': 1})",
        env=env,
    )

    assert done.stdout.strip() == "None"
    assert json.loads((trial.dir / "result.json").read_text())["data_version"] is None


@pytest.mark.parametrize(
    ("value", "says"),
    [("float('nan')", "NaN"), ("float('inf')", "Infinity"), ("-float('inf')", "-Infinity")],
)
def test_a_non_finite_metric_is_written_and_recorded_as_invalid(run_workload, trial, value, says):
    done = run_workload(f"""
        import dse.trial
        dse.trial.report({{"time_ms": {value}, "gflops": 10.0}})
    """)

    assert done.returncode == 0, done.stderr
    evaluation = trial.evaluate()
    assert evaluation.failure is dse.FailureClass.INVALID_METRIC
    assert evaluation.message == f"metric 'time_ms' is {says}, not a finite number"
    assert evaluation.metrics == {"gflops": 10.0}


def test_a_result_reported_incomplete_is_never_scored(run_workload, trial):
    done = run_workload("""
        import dse.trial
        dse.trial.report({"time_ms": 0.5}, complete=False)
    """)

    assert done.returncode == 0, done.stderr
    assert trial.evaluate().failure is dse.FailureClass.INCOMPLETE_OUTPUT


def test_a_reader_never_sees_half_a_result(run_workload, trial):
    # The workload rewrites a large result over and over; a concurrent reader (what dse
    # would see if the workload were killed at that instant) must always get a whole one.
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
                import dse.trial
                for i in range(150):
                    dse.trial.report({"time_ms": float(i)}, padding="x" * (64_000 + 997 * i))
            """),
        ],
        env={**_base_env(), **trial.job.env},
    )
    result = trial.dir / "result.json"
    reads = 0
    try:
        while writer.poll() is None:
            try:
                data = result.read_bytes()
            except FileNotFoundError:
                continue
            document = json.loads(data)
            assert document["complete"] is True
            assert len(document["padding"]) == 64_000 + 997 * int(document["metrics"]["time_ms"])
            reads += 1
    finally:
        writer.wait(timeout=60)

    assert writer.returncode == 0
    assert reads > 0
    assert json.loads(result.read_bytes())["metrics"] == {"time_ms": 149.0}
    assert sorted(p.name for p in trial.dir.iterdir()) == ["params.json", "result.json"]


def test_outside_a_trial_the_error_names_the_missing_variable(run_workload):
    done = run_workload("import dse.trial; dse.trial.params()", env={})

    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "dse.trial.TrialContextError: dse.trial.params(): $DSE_PARAMS_FILE is not set;"
        " run this as a dse trial (dse run <campaign.toml>), or set it by hand to debug"
    )


@pytest.mark.parametrize(
    ("call", "variable"),
    [
        (dse.trial.trial_id, "DSE_TRIAL_ID"),
        (dse.trial.trial_dir, "DSE_TRIAL_DIR"),
        (dse.trial.checkpoint_dir, "DSE_CHECKPOINT_DIR"),
        (dse.trial.attempt, "DSE_ATTEMPT"),
        (lambda: dse.trial.report({"time_ms": 1.0}), "DSE_TRIAL_DIR"),
    ],
)
def test_each_helper_refuses_to_guess_outside_a_trial(monkeypatch, call, variable):
    for name in list(os.environ):
        if name.startswith("DSE_"):
            monkeypatch.delenv(name)

    with pytest.raises(dse.DseError, match=rf"\${variable} is not set"):
        call()


@pytest.mark.parametrize(
    ("contents", "says"),
    [
        (None, "cannot read"),
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "does not hold a JSON object"),
    ],
)
def test_a_broken_params_file_is_a_clear_error(monkeypatch, tmp_path, contents, says):
    path = tmp_path / "params.json"
    if contents is not None:
        path.write_text(contents)
    monkeypatch.setenv("DSE_PARAMS_FILE", str(path))

    with pytest.raises(dse.trial.TrialContextError, match=says) as caught:
        dse.trial.params()

    assert str(path) in str(caught.value)


def test_a_bad_attempt_number_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("DSE_ATTEMPT", "first")

    with pytest.raises(dse.trial.TrialContextError, match="DSE_ATTEMPT is 'first'"):
        dse.trial.attempt()


def test_numbers_of_numeric_libraries_are_written_as_plain_numbers(monkeypatch, tmp_path):
    monkeypatch.setenv("DSE_TRIAL_DIR", str(tmp_path))

    class Scalar:  # what numpy and torch scalars look like to json
        def tolist(self) -> Any:
            return 3

    dse.trial.report({"a": Decimal("1.5"), "b": Fraction(1, 4), "c": Scalar()})  # type: ignore[dict-item]

    assert json.loads((tmp_path / "result.json").read_text())["metrics"] == {
        "a": 1.5,
        "b": 0.25,
        "c": 3,
    }


def test_a_value_json_cannot_hold_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("DSE_TRIAL_DIR", str(tmp_path))

    with pytest.raises(TypeError, match="a value of type object cannot be written as JSON"):
        dse.trial.report({"time_ms": 1.0}, handle=object())

    assert list(tmp_path.iterdir()) == []
