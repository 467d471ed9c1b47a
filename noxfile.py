"""Sessions for the dse monorepo: `nox` runs tests, isolation, lint and types."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["tests", "isolation", "lint", "types"]
nox.options.reuse_existing_virtualenvs = True

PACKAGES = ["packages/core[report,postgres]", "packages/agents", "packages/backend-local",
            "packages/backend-slurm", "packages/backend-ray"]
TEST_DEPS = ["pytest>=8,<9.2", "pytest-xdist>=3", "hypothesis>=6.100"]
"""pytest 9.2 ignores the group pytest-xdist 3.8 gives an ``xdist_group`` test (it sets a node
id that pytest 9.2 no longer reads), so ``--dist loadgroup`` spread the Slurm tests over all
workers; the Slurm tests also hold a lock (``support.slurm``), and this keeps them on one."""
WORKERS = (os.cpu_count() or 1) + 2
"""Two workers more than cores: the ``slurm`` and ``slurm-aside`` groups each hold a worker that
mostly waits on the cluster (about 190 s of the suite on a 2-core machine), and the other tests
keep every core busy beside them. The ``ray`` group (about two minutes) starts its own
three-node Ray cluster per module (``tests/support/raycluster.py``) on the worker it holds."""
INTEGRATIONS = "packages/core[report,postgres,integrations]"
"""dse-core as the tests install it: with MLflow, TensorBoard and W&B, which tests/integrations
writes to and reads back (the types session leaves them out: mypy checks dse's calls to them as
``Any``, the same with or without them installed)."""
TORCH = "torch==2.13.0"
"""The CPU-only build the machines have on disk (Ax's and Optuna's GP need torch)."""
BROWSER_DEPS = ["playwright>=1.40"]
"""Drives Debian's Chromium (installed by .ci/run) to open the HTML report; never downloads
a browser of its own."""


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """Run every package's tests in parallel with all four distributions installed."""
    # torch first, alone, pinned to the CPU-only wheel the machines have, and pinned again
    # beside ax-platform (the ax agent's tests): left to it, pip fetches a multi-GB CUDA build.
    session.install(TORCH)
    packages = [INTEGRATIONS, "packages/agents[optuna,optunahub,ax]", *PACKAGES[2:]]
    session.install(*TEST_DEPS, *BROWSER_DEPS, "pandas", TORCH, *(f"-e{p}" for p in packages))
    session.run("pytest", "-n", str(WORKERS), "--dist", "loadgroup", *session.posargs)


@nox.session(python="3.11")
def isolation(session: nox.Session) -> None:
    """Install only dse-core and run its tests: core must not need the other packages."""
    session.install(*TEST_DEPS, "-epackages/core[testing,postgres]")
    session.run("python", "-c", "import importlib.util as u, sys;"
                " sys.exit(u.find_spec('dse_agents') is not None)")
    session.run("pytest", "-n", "auto", "tests/core", *session.posargs)


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """Check style with ruff."""
    session.install("ruff")
    session.run("ruff", "check", "packages", "tests", "benchmarks", "examples", "noxfile.py")


@nox.session(python="3.11")
def types(session: nox.Session) -> None:
    """Type-check the four packages with mypy --strict."""
    session.install("mypy", "pytest", "numpy", "scipy", *(f"-e{p}" for p in PACKAGES))
    session.run("mypy")


@nox.session(python="3.11")
def packaging(session: nox.Session) -> None:
    """Build the four sdists and wheels and check what the index shows with twine --strict."""
    session.install("build", "twine")
    dist = Path(session.create_tmp()) / "dist"
    shutil.rmtree(dist, ignore_errors=True)  # only this run's files get checked
    for package in PACKAGES:
        session.run("python", "-m", "build", "--outdir", str(dist), package.partition("[")[0])
    session.run("twine", "check", "--strict", *sorted(str(f) for f in dist.iterdir()))


@nox.session(python="3.11", default=False)
def bench(session: nox.Session) -> None:
    """Run the benchmarks against their peers (quick mode unless --full is passed)."""
    # torch is for Optuna's GPSampler and Ax/BoTorch (search_quality); pinned to the CPU-only
    # wheel the machines have, and installed first, alone: an unpinned install (or one that
    # lets ax-platform choose torch) may fetch a multi-GB CUDA build.
    # scikit-learn only for the digits early_stopping.py trains on (its trials need numpy),
    # and for Optuna's fANOVA in importance.py; optuna-dashboard is dashboard.py's peer.
    session.install("torch==2.13.0")
    # Ray Tune is ray_throughput.py's peer, on the ray dse-backend-ray pins; it was tried with
    # pandas 2 only.
    session.install("optuna", "numpy", "scipy", "torch==2.13.0", "ax-platform>=1.3,<1.4",
                    "scikit-learn", "optuna-dashboard", "ray[tune]==2.40.0", "pandas<3",
                    *(f"-e{p}" for p in PACKAGES))
    quick = [] if "--full" in session.posargs else ["--quick"]
    session.run("python", "benchmarks/engine_overhead.py", *quick)
    session.run("python", "benchmarks/local_overhead.py", *quick)
    session.run("python", "benchmarks/python_objective.py", *quick)
    session.run("python", "benchmarks/many_slots.py", *quick)
    session.run("python", "benchmarks/search_quality.py", *quick)
    session.run("python", "benchmarks/scheduling.py", *quick)
    session.run("python", "benchmarks/report_render.py", *quick)
    session.run("python", "benchmarks/scale.py", *quick)
    session.run("python", "benchmarks/early_stopping.py", *quick)
    # Syne Tune's MOBSTER needs an environment of its own (numpy < 1.27): without it those
    # rows say "not run" (model_based_hyperband.py's docstring makes it).
    session.run("python", "benchmarks/model_based_hyperband.py", *quick)
    session.run("python", "benchmarks/importance.py", *quick)
    session.run("python", "benchmarks/dashboard.py", *quick)
    session.run("python", "benchmarks/ray_throughput.py", *quick)
