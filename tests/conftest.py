"""Rules for the whole test suite."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from support.tmux import tmux  # noqa: F401  (a fixture: a real terminal for any test)

if TYPE_CHECKING:
    from collections.abc import Generator

# Property tests assert what holds, never how fast: Hypothesis's default 200 ms deadline per
# example and its too-slow health check are timings, and they failed on a 2-core machine at
# load 8 (DeadlineExceeded in test_retry_policy) with nothing wrong in the code.
settings.register_profile("dse", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("dse")

# The record and the lease a test uses are the test's to choose: a developer's own (a team
# record in DSE_RECORD, a lease floor) never reaches the suite or the controllers it starts.
for _name in ("DSE_RECORD", "DSE_LEASE_S"):
    os.environ.pop(_name, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """In CI (``CI`` set) a skipped test fails: CI installs and starts everything the suite
    needs (Slurm included), so a skip there means a missing install step, not a pass."""
    report = yield
    if not hasattr(report, "wasxfail"):
        _fail_a_skip_in_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """The same for a whole module skipped while it is collected (``allow_module_level``):
    it would otherwise drop its tests from the run and still end green."""
    report = yield
    _fail_a_skip_in_ci(report)
    return report


def _fail_a_skip_in_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    if os.environ.get("CI") and report.skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every test must run: {reason}"


@pytest.fixture
def postgres_url() -> Generator[str, None, None]:
    """A database of its own on the tests' PostgreSQL server (``support.postgres``), dropped
    after the test."""
    from support.postgres import database

    with database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def record(request: pytest.FixtureRequest) -> str | None:
    """The record of a test that runs on both: ``None`` (the workspace's SQLite file) or a
    PostgreSQL URL (``postgres_url``)."""
    if request.param == "sqlite":
        return None
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(autouse=True)
def _reap_started_controllers() -> Generator[None, None, None]:
    """Every ``dse`` a test started with ``support.cli.start_dse`` is gone when it ends."""
    yield
    from support.cli import reap_started

    reap_started()
