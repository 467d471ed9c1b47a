"""The code version of a workload: its git commit, or a digest of the files that are its code.

In a git checkout, ``git:<commit>`` for a clean one, ``git:<commit>+dirty:<digest>`` when the
workload's directory has uncommitted changes (tracked edits and untracked files, the dse
workspace excluded). Outside git (or without git), ``files:<digest>``: a digest of every file
:class:`CodeScan` counts as the workload's code — the program and script the command runs,
the files it names, the Python modules those import from their own directories, and the
declared ``[environment] code`` (which a git checkout's version adds to as ``+files:``).
It is part of every trial's identity, so a cache never crosses code versions
(docs/record.md, "The identity of a result").
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dse.campaign._deps import command_words, find_program, interpreter_of, is_python, trial_path
from dse.model._digests import FileDigests, JsonCache
from dse.model._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = ["CodeFiles", "CodeScan", "CodeSpec", "detect_code_version"]


def _git(workdir: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        proc = subprocess.run([git, "-C", str(workdir), *args], capture_output=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc if proc.returncode == 0 else None


def detect_code_version(workdir: Path, *, exclude: Path | None = None) -> str | None:
    """The code version of the workload in *workdir* (see the module docstring); *exclude*
    (the dse workspace) never counts as a change."""
    head = _git(workdir, "rev-parse", "HEAD")
    if head is None:
        return None
    commit = head.stdout.decode().strip()
    spec = ["--", "."]
    if exclude is not None:
        with contextlib.suppress(ValueError):  # a workspace elsewhere needs no exclusion
            spec.append(f":(exclude){exclude.resolve().relative_to(workdir.resolve())}")
    diff = _git(workdir, "diff", "HEAD", "--binary", *spec)
    others = _git(workdir, "ls-files", "--others", "--exclude-standard", "-z", *spec)
    if diff is None or others is None:
        return f"git:{commit}"
    digest = hashlib.sha256(diff.stdout)
    for name in sorted(filter(None, others.stdout.split(b"\0"))):
        digest.update(b"\0" + name + b"\0")
        try:
            digest.update((workdir / name.decode()).read_bytes())
        except OSError:
            continue
    if not diff.stdout and not others.stdout:
        return f"git:{commit}"
    return f"git:{commit}+dirty:{digest.hexdigest()[:12]}"


# -- code outside git: the files a workload runs --------------------------------------------

_SUFFIXES = frozenset({
    ".py", ".pyx", ".pxd", ".sh", ".bash", ".zsh", ".pl", ".rb", ".r", ".jl", ".lua", ".js",
    ".mjs", ".ts", ".toml", ".yaml", ".yml", ".json", ".cfg", ".ini", ".conf",
})
"""The files a command names that count as code (its scripts and configuration); a named file
of another kind (a log, a table, a model) is data or output: ``[data]`` versions data."""
_NEVER = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", "node_modules",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", "site-packages",
    "dist-packages", ".dse",
})
"""Directories never counted as code: version control, caches, virtual environments (those
are dependencies), dse workspaces."""
_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})
_GLOB = re.compile(r"[*?\[]")
_IMPORTS = "code-imports.json"


@dataclass(frozen=True, slots=True)
class CodeSpec:
    """The ``[environment] code`` and ``code_exclude`` keys."""

    include: tuple[str, ...] = ()
    """Files, directories (everything under them) and glob patterns (``**`` too), relative to
    the working directory, that are code besides what the command runs."""
    exclude: tuple[str, ...] = ()
    """Patterns of files never counted (a name without ``/`` matches at any depth; a
    directory excludes what is under it)."""


@dataclass(frozen=True, slots=True)
class CodeFiles:
    """The files counted as a workload's code, and their digest."""

    version: str
    """``files:<digest>``: sha256 over each file's name and content."""
    files: Mapping[str, str]
    """Each file (relative to the working directory when under it) → its content's digest
    (12 hex digits)."""


class CodeScan:
    """Finds the files that are a workload's code outside git (the module docstring), and
    digests them through a stat-keyed cache: an unchanged tree costs a ``stat`` per file.

    :param workdir: the command's working directory.
    :param spec: the declared ``code`` and ``code_exclude``.
    :param never: directories never counted (the workspace, the ``[data]`` paths).
    :param cache_dir: where the digests and each file's imports are cached (the workspace,
        once it exists: the first run of a campaign reads its code files, the next ones
        ``stat`` them).
    :param where: what errors name (``campaign.toml: environment``).
    """

    def __init__(self, workdir: Path, *, spec: CodeSpec = CodeSpec(),
                 never: Sequence[Path] = (), cache_dir: Path, where: str = "environment") -> None:
        self.workdir = workdir.resolve()
        self.spec = spec
        self.never = tuple(p.resolve() for p in never)
        # Found when a campaign is loaded, before anything may refuse it: the cache goes in an
        # existing workspace only (a refused campaign writes nothing).
        self.digests = FileDigests(cache_dir / "code-digests.json", make_dir=False)
        self._imports = JsonCache(cache_dir / _IMPORTS, make_dir=False)
        self._imports_changed = False
        self.where = where

    def command(self, command: Sequence[str], *, shell: bool,
                env: Mapping[str, str]) -> CodeFiles | None:
        """The code of *command* (run with extra variables *env*); ``None`` when no file of
        it is code (a program installed elsewhere, with no script of its own)."""
        words = command_words(command, shell)
        path = trial_path({**os.environ, **env})
        named: list[Path] = []
        scripts: list[Path] = []
        modules: list[str] = []
        program = find_program(words[0], path=path, workdir=self.workdir) if words else None
        if program is not None and os.sep in words[0]:
            named.append(program)  # a program of the workload's own (./run.sh, bin/tool)
            interpreter = interpreter_of(program, path)
            if interpreter is not None and is_python(interpreter):
                scripts.append(program)
        rest = words[1:]
        if program is not None and is_python(program):
            rest = self._python_args(rest, scripts, modules)
        for word in rest:
            for item in (word, word.partition("=")[2]):
                file = self._named_file(item)
                if file is not None:
                    named.append(file)
        roots = [*{s.parent.resolve(): None for s in scripts}, self.workdir,
                 *(self.workdir / p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        for module in modules:
            scripts += self._module_files(module, 0, None, roots)
        return self.files([*named, *scripts], roots=roots)

    def files(self, files: Sequence[Path], *, roots: Sequence[Path]) -> CodeFiles | None:
        """The code made of *files*, the Python modules they import (found under *roots*,
        as ``sys.path`` would) and the declared ``code``."""
        counted: dict[Path, None] = {}
        queue = [f.resolve() for f in files]
        while queue:
            file = queue.pop()
            if file in counted or not self._counts(file):
                continue
            counted[file] = None
            if file.suffix == ".py":
                for level, module, names in self._imports_of(file):
                    for name in [None, *names]:
                        queue += self._module_files(module, level, file, roots, name)
        stats: dict[str, os.stat_result | None] = dict.fromkeys(map(str, counted))
        for name, st in self._declared().items():
            stats.setdefault(name, st)
        manifest: dict[str, str] = {}
        for name, st in stats.items():
            try:
                digest = self.digests.digest(name, st)
            except OSError:
                continue  # gone between the look and the read: not code any more
            manifest[self._name(name)] = digest[:12]
        self.digests.save()
        if self._imports_changed:
            self._imports.save()
            self._imports_changed = False
        if not manifest:
            return None
        total = hashlib.sha256()
        for name in sorted(manifest):
            total.update(f"{name}\0{manifest[name]}\n".encode())
        return CodeFiles(f"files:{total.hexdigest()[:16]}", dict(sorted(manifest.items())))

    # -- what counts ------------------------------------------------------------------------

    def _python_args(self, args: list[str], scripts: list[Path], modules: list[str]) -> list[str]:
        """Python's own options read off *args* (the script or ``-m`` module noted); the
        script's arguments are returned."""
        i = 0
        while i < len(args):
            word = args[i]
            if word == "-m" and i + 1 < len(args):
                modules.append(args[i + 1])
                return args[i + 2:]
            if word.startswith("-m") and len(word) > 2:
                modules.append(word[2:])
                return args[i + 1:]
            if word.startswith("-c"):
                return []
            if word in _OPTIONS_WITH_VALUE:
                i += 2
                continue
            if word.startswith("-") and word != "-":
                i += 1
                continue
            file = self._named_file(word, any_suffix=True)
            if file is not None:
                scripts.append(file)
            return args[i + 1:]
        return []

    def _named_file(self, word: str, *, any_suffix: bool = False) -> Path | None:
        if not word or "{" in word or "}" in word or "\0" in word:
            return None
        candidate = self.workdir / word
        try:
            if not candidate.is_file():
                return None
        except OSError:
            return None
        if not any_suffix and candidate.suffix.lower() not in _SUFFIXES:
            return None
        return candidate

    def _counts(self, file: Path) -> bool:
        try:
            relative = file.relative_to(self.workdir)
        except ValueError:
            relative = None
        parts = (relative or file).parts
        if any(part in _NEVER for part in parts[:-1]):
            return False
        if any(file == n or n in file.parents for n in self.never):
            return False
        return relative is None or not self._excluded(relative.as_posix())

    def _excluded(self, relative: str) -> bool:
        name = relative.rsplit("/", 1)[-1]
        for pattern in self.spec.exclude:
            stem = pattern.rstrip("/")
            if (fnmatch.fnmatchcase(relative, stem) or relative.startswith(stem + "/")
                    or ("/" not in stem and fnmatch.fnmatchcase(name, stem))):
                return True
        return False

    def _declared(self) -> dict[str, os.stat_result | None]:
        """The files the declared ``code`` names (each with its ``stat`` when a walk of a
        directory had it)."""
        out: dict[str, os.stat_result | None] = {}
        for i, pattern in enumerate(self.spec.include):
            if _GLOB.search(pattern):
                found = [p.resolve() for p in sorted(self.workdir.glob(pattern))]
            else:
                found = [(self.workdir / pattern).resolve()]
                if not found[0].exists():
                    found = []
            if not found:
                raise ConfigError(f"{self.where}.code[{i}]: {pattern!r} matches no file under"
                                  f" {self.workdir}")
            for path in found:
                if path.is_dir():
                    if self._counts(path / "."):
                        self._walk(str(path), out)
                elif self._counts(path):
                    out.setdefault(str(path), None)
        return out

    def _walk(self, top: str, out: dict[str, os.stat_result | None]) -> None:
        """Every file under the directory *top* that counts, into *out* (one ``scandir`` a
        directory: a tree of thousands of files costs a ``stat`` each)."""
        base = str(self.workdir) + os.sep
        never = [str(n) for n in self.never]
        stack = [top]
        while stack:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    path = entry.path
                    relative = path[len(base):] if path.startswith(base) else None
                    if relative is not None and self._excluded(relative.replace(os.sep, "/")):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        if (entry.name not in _NEVER
                                and not os.path.exists(os.path.join(path, "pyvenv.cfg"))
                                and not any(path == n or path.startswith(n + os.sep)
                                            for n in never)):
                            stack.append(path)
                    elif entry.is_file():
                        out.setdefault(path, entry.stat())

    def _name(self, file: str) -> str:
        base = str(self.workdir) + os.sep
        return file[len(base):].replace(os.sep, "/") if file.startswith(base) else file

    # -- Python imports ---------------------------------------------------------------------

    def _imports_of(self, file: Path) -> list[tuple[int, str, list[str]]]:
        """What *file* imports: (level, module, names), read with :mod:`ast` once per
        content (cached by digest)."""
        try:
            digest = self.digests.digest(file)
        except OSError:
            return []
        cached = self._imports.data.get(digest)
        if isinstance(cached, list):
            return [(int(a), str(b), list(c)) for a, b, c in cached]
        import ast  # lazily: only a workload outside git, with Python of its own, needs it

        found: list[tuple[int, str, list[str]]] = []
        try:
            tree = ast.parse(file.read_bytes(), str(file))
        except (OSError, SyntaxError, ValueError):
            tree = None  # a script that does not parse fails in its trial: still code
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                found += [(0, alias.name, []) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                found.append((node.level, node.module or "",
                              [a.name for a in node.names if a.name != "*"]))
        self._imports.data[digest] = [list(item) for item in found]
        self._imports_changed = True
        return found

    def _module_files(self, module: str, level: int, importer: Path | None,
                      roots: Sequence[Path], name: str | None = None) -> list[Path]:
        """The files importing *module* (``.name``, if a submodule) runs from under
        *roots* (or, for a relative import, from *importer*'s package): its packages'
        ``__init__.py`` and the module itself."""
        parts = [p for p in module.split(".") if p] + ([name] if name else [])
        if level:
            if importer is None or level - 1 >= len(importer.parents):
                return []  # a relative import above the file system's root fails in the trial
            bases = [importer.parents[level - 1]]
        else:
            bases = list(roots)
        for base in bases:
            found: list[Path] = []
            here = base
            for i, part in enumerate(parts):
                package, single = here / part, here / f"{part}.py"
                if (package / "__init__.py").is_file():
                    found.append(package / "__init__.py")
                    here = package
                elif single.is_file() and i == len(parts) - 1:
                    found.append(single)
                elif not package.is_dir():
                    break
                else:
                    here = package  # a namespace package
            else:
                if found:
                    return found
        return []
