"""Waiting on what another process brings about: poll it, with a bound; never look once.

A controller, a wrapper, slurmctld or slurmdbd does its part in its own time, and on a loaded
machine (CI runs the suite on 2 cores beside other work, at load 8 and more) that time grows:
a test that samples such a state once — a process gone, a file written, a job in ``sacct`` —
fails whenever it looks too early, with nothing wrong in the code. Every such test waits here
on the state it needs, and fails, naming what it waited for, only once a bound generous
enough for a loaded machine has passed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TypeVar

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str,
               interval: float = 0.1, seen: Callable[[], str] | None = None) -> T:
    """Call *condition* every *interval* seconds until it returns something true, and return
    that; fail the test after *timeout* seconds, naming *what* was awaited and what was seen
    last: *seen*'s account if given, else the last value *condition* returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            last = seen() if seen is not None else repr(value)
            pytest.fail(f"timed out after {timeout:g}s waiting for {what} (last seen: {last})")
        time.sleep(interval)
