"""A Python function as a trial's command: how :func:`dse.run` names it, and how the worker
(:mod:`dse._worker`, a process of its own for each attempt) finds it again.

A function is named by what finds it in a fresh interpreter, in one of three ways:

* **in a module** the caller imported (``package.module:function``): the worker imports the
  module, the directory it was imported from first on ``sys.path``;
* **in a script** run as ``python script.py`` (its ``__main__``): the worker imports the file
  under another name (``__dse_main__``), so what is under ``if __name__ == "__main__":``
  does not run, and a :func:`dse.run` reached at its top level ends the import there
  (:class:`StopImport`) — as multiprocessing's spawn treats a main module;
* **with no file** (a notebook cell): its source, written into the workspace
  (``objectives/<name>-<digest>.py``); it must be self-contained (its imports inside it).

Lambdas, functions defined inside other functions and other callables have no name a fresh
interpreter finds them by: they are refused in one line before anything runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.model._errors import ConfigError
from dse.model._trialfile import write_trial_file

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import ModuleType

__all__ = ["MAIN_NAME", "ObjectiveRef", "StopImport", "find_function", "reference",
           "stop_if_importing"]

MAIN_NAME = "__dse_main__"
"""The name the worker imports a script under (not ``__main__``: its guard stays shut)."""
WORKER = "dse._worker"
"""The module the worker runs as (``python -m dse._worker``)."""
OBJECTIVES_DIR = "objectives"
"""The workspace's directory of the sources of functions that have no file."""

_importing = False
"""Whether this process (a worker) is importing the module of its objective."""


class StopImport(BaseException):
    """Raised by :func:`dse.run` while the worker imports the objective's module: the import
    ends there (what the script defined above the call is kept). A ``BaseException``, so
    that a script's ``except Exception`` around its campaign does not catch it."""


def stop_if_importing() -> None:
    """Raise :class:`StopImport` when called while the worker imports the objective's module
    (a script's top-level :func:`dse.run`, reached again in every worker)."""
    if _importing:
        raise StopImport


@dataclass(frozen=True, slots=True)
class ObjectiveRef:
    """What names a function to the worker, and what the record keeps of it."""

    name: str
    """How messages name it (``module.function``)."""
    target: str
    """A module name, or the path of a ``.py`` file (a script, or a function's source)."""
    qualname: str
    """Its qualified name in *target*."""
    path: str | None
    """The directory put first on the worker's ``sys.path`` (the one it was imported from)."""
    code_version: str
    """Its code version: the git state of its file's directory (as a campaign file's), else
    a digest of its file, or ``source:<digest>`` of a function that has no file."""
    source: str | None = None
    """A function with no file: its source, which :meth:`write_source` puts at *target*."""

    def command(self, metric: str | None) -> list[str]:
        """The trial command running the function; *metric* names a bare number it returns.

        :raises ConfigError: a path holds a brace (a command item's ``{placeholder}``).
        """
        argv = [sys.executable, "-m", WORKER]
        if self.path is not None:
            argv += ["--path", self.path]
        if metric is not None:
            argv += ["--metric", metric]
        argv.append(f"{self.target}:{self.qualname}")
        for item in argv:
            if "{" in item or "}" in item:
                raise ConfigError(f"objective {self.name}: {item!r} holds a brace, which a"
                                  " trial command reads as a {placeholder}; move the file")
        return argv

    def write_source(self) -> None:
        """Write the source of a function that has no file where the command finds it (its
        name holds its digest: an existing file is the same source)."""
        if self.source is None:
            return
        target = Path(self.target)
        if target.is_file():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        write_trial_file(target.parent, target.name, self.source.encode("utf-8"))


def reference(fn: Callable[..., Any], *, workspace: Path) -> ObjectiveRef:
    """The :class:`ObjectiveRef` of *fn* (see the module docstring).

    :param workspace: where the source of a function with no file goes (and what a code
        version never counts).
    :raises ConfigError: *fn* has no name a fresh interpreter finds it by (a lambda, a
        function inside another, a callable object), or no source (defined at a prompt).
    """
    import inspect  # the controller's alone: the worker never names a function

    if not inspect.isfunction(fn):
        raise ConfigError(f"objective: expected a function defined with def, got {fn!r}")
    qualname: str = fn.__qualname__
    module_name: str | None = fn.__module__
    named = f"{module_name}.{qualname}" if module_name else qualname
    if fn.__name__ == "<lambda>":
        raise ConfigError(f"objective {named}: a lambda cannot run in a worker process (nothing"
                          " names it there); define it with def at the top level")
    if "<locals>" in qualname:
        raise ConfigError(f"objective {named}: a function defined inside another function"
                          " cannot run in a worker process; define it at the top level")
    module = sys.modules.get(module_name or "")
    file = getattr(module, "__file__", None)
    if module_name == "__main__":
        if not file or not _same_file(file, fn.__code__.co_filename):
            return _from_source(fn, named, workspace)  # a notebook's cell
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.name and spec.name != "__main__":
            return _in_module(fn, spec.name, Path(file), named, workspace)  # python -m x.y
        return _in_script(fn, Path(file), named, workspace)
    if module is None or not file:
        return _from_source(fn, named, workspace)
    return _in_module(fn, module.__name__, Path(file), named, workspace)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _resolve(module: ModuleType | None, qualname: str) -> Any:
    value: Any = module
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value


def _file_version(file: Path, workspace: Path, root: Path) -> str:
    """The git state of *file*'s directory, else the digest of *file* and the modules it
    imports from *root* (the directory first on the worker's path) and its own directory."""
    # The controller's alone: the worker runs no git and digests nothing.
    from dse.campaign._code import CodeScan, detect_code_version

    found = detect_code_version(file.parent, exclude=workspace)
    if found is not None:
        return found
    files = CodeScan(root, never=(workspace,), cache_dir=workspace).files(
        [file], roots=[root, file.parent])
    if files is not None:
        return files.version
    return "sha256:" + hashlib.sha256(file.read_bytes()).hexdigest()[:16]


def _in_module(fn: Callable[..., Any], name: str, file: Path, named: str,
               workspace: Path) -> ObjectiveRef:
    if _resolve(sys.modules.get(fn.__module__), fn.__qualname__) is not fn:
        raise ConfigError(f"objective {named}: {named} is not this function (redefined, or"
                          " wrapped without functools.wraps?)")
    file = file.absolute()
    root = file.parent
    for _ in range(name.count(".") + (file.stem == "__init__")):
        root = root.parent
    return ObjectiveRef(named, name, fn.__qualname__, str(root),
                        _file_version(file, workspace, root))


def _in_script(fn: Callable[..., Any], file: Path, named: str, workspace: Path) -> ObjectiveRef:
    if _resolve(sys.modules["__main__"], fn.__qualname__) is not fn:
        raise ConfigError(f"objective {named}: {named} is not this function (redefined, or"
                          " wrapped without functools.wraps?)")
    file = file.absolute()
    return ObjectiveRef(f"{file.name}:{fn.__qualname__}", str(file), fn.__qualname__,
                        str(file.parent), _file_version(file, workspace, file.parent))


def _from_source(fn: Callable[..., Any], named: str, workspace: Path) -> ObjectiveRef:
    import inspect
    import textwrap

    if fn.__qualname__ != fn.__name__:
        raise ConfigError(f"objective {named}: a function with no file must be defined at the"
                          " top level (not in a class)")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise ConfigError(
            f"objective {named}: its source cannot be read (defined at a prompt or in"
            " python -c?); define it in a .py file or a notebook cell") from None
    digest = hashlib.sha256(source.encode()).hexdigest()
    target = workspace / OBJECTIVES_DIR / f"{fn.__name__}-{digest[:12]}.py"
    return ObjectiveRef(named, str(target), fn.__name__, None, f"source:{digest[:16]}",
                        source=source)


# -- the worker's side ------------------------------------------------------------------------


class ObjectiveNotFound(LookupError):
    """The worker's module holds no function by the name the command gives."""


def find_function(target: str, qualname: str, paths: Sequence[str] = ()) -> Callable[..., Any]:
    """Import *target* (a module name, or a ``.py`` file imported as :data:`MAIN_NAME`) and
    return its *qualname*; *paths* go first on ``sys.path``.

    :raises ObjectiveNotFound: the module has no such function (defined under
        ``if __name__ == "__main__":``, or after a top-level :func:`dse.run`?).
    """
    global _importing
    for path in reversed(paths):
        sys.path.insert(0, path)
    _importing = True
    try:
        module = _import(target)
    finally:
        _importing = False
    fn = _resolve(module, qualname)
    if not callable(fn):
        raise ObjectiveNotFound(
            f"{target} defines no function {qualname} when imported (is it defined under"
            " if __name__ == '__main__':, or after the call to dse.run?)")
    found: Callable[..., Any] = fn
    return found


def _import(target: str) -> ModuleType:
    """Import *target* as :func:`find_function` says, by hand (not ``import_module``): an
    import a top-level :func:`dse.run` stops keeps what it defined."""
    if target.endswith(".py"):
        spec = importlib.util.spec_from_file_location(MAIN_NAME, target)
    else:
        spec = importlib.util.find_spec(target)  # imports its parent packages
        if target in sys.modules:
            return sys.modules[target]  # a parent package imported it
    if spec is None or spec.loader is None:
        raise ObjectiveNotFound(f"no module {target} to import")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    # A top-level dse.run stops the import: what the module defined above the call is enough.
    with contextlib.suppress(StopImport):
        spec.loader.exec_module(module)
    return module
