"""The worker: one attempt of a trial whose objective is a Python function (:func:`dse.run`).

``python -m dse._worker [--path DIR] [--metric NAME] TARGET:QUALNAME`` is the trial's
command, run by the backend like any other (a process of its own, under the campaign's time
limit): it finds the function (:func:`dse.campaign._objective.find_function`), calls it with the
params (:func:`dse.trial.params`) and writes what it returns through :func:`dse.trial.report`,
so the controller judges it as it judges a command's ``result.json``:

* a number is the metric *NAME* (the campaign's first objective); a mapping is the metrics;
  anything else is written as the metric's value, which dse records ``invalid_metric``;
* ``None``: the function reported itself (``dse.trial.report``), or nothing (``no_result``);
* an exception: its traceback (from the function's frame on) goes to the attempt's
  ``stderr.log`` and the worker exits 1 (``nonzero_exit``), as a command that fails does.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dse.trial
from dse.campaign._objective import ObjectiveNotFound, find_function

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["main", "prepare"]

USAGE = "usage: python -m dse._worker [--path DIR] [--metric NAME] TARGET:QUALNAME"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one attempt; return the exit code."""
    run = prepare(list(sys.argv[1:] if argv is None else argv))
    return run if isinstance(run, int) else run()


def prepare(argv: Sequence[str]) -> Callable[[], int] | int:
    """Find the function the worker's arguments *argv* name (its module imported); return
    what runs one attempt of it (its exit code), or the exit code of a failure to find it
    (said on stderr). The local backend's warm start (``dse_local._warm``) calls this once in
    a process each attempt is then forked from."""
    args = list(argv)
    paths: list[str] = []
    metric = None
    while len(args) > 1 and args[0] in ("--path", "--metric"):
        option, value = args.pop(0), args.pop(0)
        if option == "--path":
            paths.append(value)
        else:
            metric = value
    if len(args) != 1 or ":" not in args[0]:
        print(USAGE, file=sys.stderr)
        return 2
    target, _, qualname = args[0].rpartition(":")
    # A script parsing its arguments at its top level sees none but its name, not ours.
    sys.argv[:] = [target]
    try:
        fn = find_function(target, qualname, paths)
    except ObjectiveNotFound as exc:
        print(f"dse worker: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 -- the module's own error, told as Python would
        _print_from(exc, skip=0)
        return 1

    def run() -> int:
        params = dse.trial.params()
        try:
            value = fn(params)
        except Exception as exc:  # noqa: BLE001 -- the objective failed: about the design
            _print_from(exc, skip=1)
            return 1
        return _report(value, metric, f"{target}:{qualname}")

    return run


def _print_from(exc: BaseException, *, skip: int) -> None:
    """Print *exc*'s traceback without the worker's own *skip* frames at its top."""
    tb = exc.__traceback__
    for _ in range(skip):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


def _report(value: Any, metric: str | None, name: str) -> int:
    if value is None:
        if not (dse.trial.trial_dir() / dse.trial.RESULT_FILE).exists():
            print(f"dse worker: {name} returned None and reported nothing (return a number or"
                  " a dict of metrics, or call dse.trial.report)", file=sys.stderr)
        return 0
    if isinstance(value, Mapping):
        metrics = {str(k): v for k, v in value.items()}
    elif metric is not None:
        metrics = {metric: value}
    else:
        print(f"dse worker: {name} returned {value!r}, but the campaign has no objective"
              " metric to name it; return a dict of metrics", file=sys.stderr)
        return 1
    # A value JSON cannot hold is written as its repr: dse records the metric as no number
    # (invalid_metric), as it would a command's.
    written: dict[str, Any] = {k: v if _writable(v) else repr(v) for k, v in metrics.items()}
    dse.trial.report(written)
    return 0


def _writable(value: Any) -> bool:
    """Whether :func:`dse.trial.report` writes *value* (numbers of numeric libraries too)."""
    try:
        json.dumps(value, allow_nan=True, default=_number)
    except (TypeError, ValueError):
        return False
    return True


def _number(value: Any) -> Any:
    """What :func:`dse.trial.report` makes of a numpy (or similar) value."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if hasattr(value, "__float__"):
        return float(value)
    raise TypeError(type(value).__name__)


if __name__ == "__main__":
    sys.exit(main())
