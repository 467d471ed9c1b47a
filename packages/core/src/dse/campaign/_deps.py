"""The dependencies of a workload: what its command's program is, and what it can import.

Part of a result's identity (docs/record.md, "The identity of a result"): a result measured
with other dependencies is not reused. The controller finds them once per campaign, before
anything is dispatched:

* the **program** is the command's first word (after ``VAR=value`` assignments and ``env``),
  found as the trial finds it: relative to the working directory when it names a path, else
  on the ``PATH`` the trial gets (the controller's Python's directory first, as dse's
  backends give it); a script's ``#!`` line names its interpreter (a console
  script such as ``torchrun`` is the Python its line names). With ``shell = true``, the first
  simple command of the line that is not a shell builtin;
* a **Python** program is asked what :func:`dse.trial.environment` answers in a trial (its
  version and every installed distribution, with the trial's environment variables, from the
  working directory): the digest is the one ``dse.trial.report()`` stamps on the trial;
* any **other** program is digested by path and content.

The answer for an interpreter (not for a wrapper script such as pyenv's shim, which picks
one when it runs) is cached (``$DSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/dse``,
else ``~/.cache/dse``) under the interpreter's stamp and the variables that move its
``sys.path``, and kept while no directory on that path changed (installing, upgrading or
removing a distribution changes its ``site-packages``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.model._digests import JsonCache
from dse.model._hashing import canonical_json

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dse.model._digests import FileDigests

__all__ = ["Dependencies", "command_words", "detect_dependencies", "environment_digest",
           "find_program", "interpreter_of", "is_python", "trial_path"]

_PYTHON = re.compile(r"(python|pypy)(\d+(\.\d+)*)?")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
_WRAPPERS = frozenset({"env", "exec", "command", "nohup", "time", "nice"})
_BUILTINS = frozenset({"cd", "export", "source", ".", "set", "unset", "true", ":", "umask",
                       "ulimit", "trap", "shopt", "alias", "echo", "printf", "test", "["})
_OPERATORS = frozenset({";", "&&", "||", "|", "&"})
_PATH_VARIABLES = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
                   "PYTHONSAFEPATH", "VIRTUAL_ENV")
"""The variables a trial's environment may set that change what its Python imports."""
_CACHE = "environments.json"
_CACHE_ENTRIES = 64
"""Interpreters (and PATH-like variables) the cache remembers: the latest asked."""
_PROBE = Path(__file__).resolve().parents[1] / "_envprobe.py"
"""The file the interpreter runs: :mod:`dse._envprobe`, which imports nothing of dse."""
_PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Dependencies:
    """What a workload's command runs with, as the controller found it before dispatch."""

    digest: str
    """Part of the identity: ``sha256:…`` of the Python environment (as ``dse.trial`` stamps
    a trial), of another program's path and content, or the declared
    ``[environment] dependencies``."""
    program: str | None = None
    """The program the command resolves to (its real path); ``None`` when declared."""
    python: str | None = None
    """The Python version, for a Python program."""
    distributions: Mapping[str, str] = field(default_factory=dict)
    """Every installed distribution a Python program can import, ``{name: version}``."""

    def describe(self) -> dict[str, Any]:
        """What the run's record keeps of them (the distributions are kept once per digest,
        in the record's environments)."""
        out: dict[str, Any] = {"digest": self.digest, "program": self.program}
        if self.python is not None:
            out.update(python=self.python, distributions=len(self.distributions))
        return out


def environment_digest(environment: Mapping[str, Any]) -> str:
    """The dependency digest of an environment (``{"python", "distributions"}``): sha256 of
    its canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical_json(environment).encode()).hexdigest()[:16]


def command_words(command: Sequence[str], shell: bool) -> list[str]:
    """The words of the command's first simple command that runs a program: assignments,
    ``env`` and other wrappers skipped; with *shell*, the line split as ``sh`` would (a line
    that does not split, or runs only builtins, has none)."""
    if not shell:
        words = list(command)
        while words and (words[0] in _WRAPPERS or _ASSIGNMENT.fullmatch(words[0])):
            words.pop(0)
        return words
    try:
        lexer = shlex.shlex(" ".join(command), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return []
    simple: list[str] = []
    for token in [*tokens, ";"]:
        if token not in _OPERATORS:
            simple.append(token)
            continue
        words = command_words(simple, False)
        if words and words[0] not in _BUILTINS:
            return words
        simple = []
    return []


def trial_path(env: Mapping[str, str]) -> str:
    """The ``PATH`` a trial with variables *env* runs with: dse's backends put the directory
    of the controller's Python first, so ``python`` in a command is the controller's."""
    return os.pathsep.join(filter(None, [os.path.dirname(sys.executable), env.get("PATH")]))


def find_program(word: str, *, path: str | None, workdir: Path) -> Path | None:
    """The file *word* runs, as a trial in *workdir* with ``PATH`` *path* finds it."""
    if not word or "{" in word or "}" in word:
        return None  # a param names it: no one program
    if os.sep in word:
        candidate = workdir / word
        return candidate if candidate.is_file() else None
    found = shutil.which(word, path=path)
    return Path(found) if found else None


def is_python(program: Path) -> bool:
    """Whether *program* is a Python interpreter (by its name, or the name it links to)."""
    names = {program.name, Path(os.path.realpath(program)).name}
    return any(_PYTHON.fullmatch(name) for name in names)


def interpreter_of(program: Path, path: str | None) -> Path | None:
    """The interpreter a script's ``#!`` line names (``/usr/bin/env python3`` looked up on
    *path*), or ``None`` when *program* has no such line."""
    try:
        with program.open("rb") as handle:
            head = handle.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        return find_program(words[0], path=path, workdir=Path("/")) if words else None
    return Path(words[0]) if words else None


def detect_dependencies(
    command: Sequence[str], *, shell: bool, env: Mapping[str, str], workdir: Path,
    digests: FileDigests,
) -> Dependencies | None:
    """The dependencies of *command* (see the module docstring); ``None`` when no program can
    be found (a param names it, or it is not installed here)."""
    words = command_words(command, shell)
    trial_env = {**os.environ, **env}
    path = trial_path(trial_env)
    trial_env["PATH"] = path
    program = find_program(words[0], path=path, workdir=workdir) if words else None
    if program is None:
        return None
    interpreter = program if is_python(program) else interpreter_of(program, path)
    if interpreter is not None and is_python(interpreter):
        found = _python_environment(interpreter, trial_env, workdir)
        if found is not None:
            python = found.get("python")
            dists = found.get("distributions", {})
            return Dependencies(
                digest=environment_digest({"python": python, "distributions": dists}),
                program=str(interpreter.absolute()), python=python, distributions=dists)
    real = os.path.realpath(program)
    try:
        content = digests.digest(real)
    except OSError:
        return None
    return Dependencies(digest=environment_digest({"program": real, "sha256": content}),
                        program=real)


def _python_environment(
    interpreter: Path, env: Mapping[str, str], workdir: Path
) -> dict[str, Any] | None:
    """What :func:`dse.trial.environment` answers under *interpreter* (from the cache while
    nothing on its path changed), or ``None`` when it cannot tell."""
    real = os.path.realpath(interpreter)
    try:
        st = os.stat(real)
    except OSError:
        return None
    # The directory it runs from moves its sys.path only through a relative PYTHONPATH entry:
    # otherwise one answer serves every campaign using this interpreter.
    relative = any(p and not os.path.isabs(p)
                   for p in env.get("PYTHONPATH", "").split(os.pathsep))
    key = canonical_json([real, st.st_size, st.st_mtime_ns, st.st_ino,
                          {k: env.get(k) for k in _PATH_VARIABLES},
                          str(workdir) if relative else None])
    store = JsonCache(_cache_dir() / _CACHE, limit=_CACHE_ENTRIES)
    cache = store.data
    entry = cache.get(key)
    # A wrapper script (pyenv's shim) picks its Python when it runs: never cached.
    cacheable = interpreter_of(Path(real), None) is None
    if cacheable and isinstance(entry, dict) and _unchanged(entry.get("paths")):
        found = entry.get("environment")
        if isinstance(found, dict):
            return found
    try:
        proc = subprocess.run(
            [str(interpreter), str(_PROBE)], capture_output=True,
            text=True, timeout=_PROBE_TIMEOUT_S, check=False, cwd=workdir, env=dict(env))
        answer = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not isinstance(answer, dict) or not isinstance(answer.get("distributions"), dict):
        return None
    paths = [p for p in answer.get("path", []) if isinstance(p, str) and p]
    environment = {"python": answer.get("python"),
                   "distributions": dict(sorted(answer["distributions"].items()))}
    if cacheable:
        cache[key] = {"paths": {p: _stamp(p) for p in paths}, "environment": environment}
        store.save()
    return environment


def _stamp(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _unchanged(paths: object) -> bool:
    return isinstance(paths, dict) and all(_stamp(p) == m for p, m in paths.items())


def _cache_dir() -> Path:
    chosen = os.environ.get("DSE_CACHE_DIR")
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "dse"
