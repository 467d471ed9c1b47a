"""The architecture, checked from the sources (STYLE.md points 3 and 16): modules import in one
direction, none reaches into another's private names, and no part grows past a size a reader
can hold.

The checks read the four distributions' ``src/`` trees with :mod:`ast`; nothing is imported.

* **Import cycles** — an edge is every import that runs: at module level *and* inside
  functions (a function-level import is for laziness, never to hide a cycle). Imports under
  ``if TYPE_CHECKING:`` are annotation-only, never run, and are left out (their ``else:``
  branch runs, and counts). ``from package import name`` leads to the module that defines
  *name* when the package only re-exports it (``dse/__init__.py``'s lazy ``_LAZY`` map, or an
  import of it in the ``__init__``), so a re-export is no false cycle through the package.
  An edge goes to the module named, not to its parent packages.
* **Private names** — no ``from m import _x``; no ``m._x`` on an imported module (a private
  *submodule* such as ``dse.model._types`` is a room of its package, not a private name); no
  ``obj._x`` (nor ``getattr(obj, "_x")``) unless the accessing module defines ``_x`` itself
  (a def, a class, an assigned name or attribute, a ``__slots__`` entry, a dataclass field).
  Dunders are public protocol and never count. ``benchmarks/`` may import only public names
  (``dse``, ``dse.testing``, ``dse.trial``, ``dse_agents``...): no ``dse._x`` module.
* **Package direction** — dse-core's packages stand in layers (:data:`LAYERS`: ``model`` at
  the ground, ``cli`` at the top); a module imports from its own package and those below,
  annotation-only imports included. The few upward imports left are listed (:data:`UPWARD`)
  with what removes them, and the list only shrinks.
* **Sizes** — no class over 400 lines, no function over 80 (from ``def`` to its last line),
  no module of dse-core over 700 lines.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    ROOT / "packages" / d / "src"
    for d in ("core", "agents", "backend-local", "backend-slurm", "backend-ray")
]
BENCHMARKS = ROOT / "benchmarks"
OURS = ("dse", "dse_agents", "dse_local", "dse_slurm", "dse_ray")

CLASS_MAX = 400
FUNCTION_MAX = 80
FILE_MAX = {"dse": 700}
"""Lines of a module at most, by package: every module of dse-core."""


# -- reading the sources --------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    """One source file, parsed."""

    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    lines: int

    @property
    def package(self) -> str:
        """The package relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


def load(roots: Iterable[Path]) -> dict[str, Module]:
    """Every module under the ``src/`` directories *roots*, by dotted name."""
    modules: dict[str, Module] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            text = path.read_text(encoding="utf-8")
            name = ".".join(parts)
            modules[name] = Module(
                name, path, ast.parse(text, str(path)), is_package, len(text.splitlines())
            )
    return modules


def where(module: Module, node: ast.AST | int) -> str:
    """``path:line`` of *node*, relative to the repository when inside it."""
    line = node if isinstance(node, int) else getattr(node, "lineno", 0)
    path = module.path
    if path.is_relative_to(ROOT):
        path = path.relative_to(ROOT)
    return f"{path.as_posix()}:{line}"


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under *node* that may run: all but the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        yield child
        if isinstance(child, ast.If) and _type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from runtime_nodes(other)
        else:
            yield from runtime_nodes(child)


def absolute(module: Module, node: ast.ImportFrom) -> str:
    """The module an ``import from`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = module.package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


# -- import cycles --------------------------------------------------------------------------


def _reexports(package: Module) -> dict[str, str]:
    """Names a package's ``__init__`` only re-exports, each with the module defining it: its
    ``_LAZY`` map (name → module) and its imports, annotation-only ones included (they name
    where a lazily exported name lives)."""
    found: dict[str, str] = {}
    for node in ast.walk(package.tree):
        if isinstance(node, ast.ImportFrom):
            source = absolute(package, node)
            for alias in node.names:
                found.setdefault(alias.asname or alias.name, source)
        targets = (
            [node.target] if isinstance(node, ast.AnnAssign)
            else node.targets if isinstance(node, ast.Assign) else []
        )
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in targets) and isinstance(
            value, ast.Dict
        ):
            for key, val in zip(value.keys, value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(val, ast.Constant):
                    found[str(key.value)] = str(val.value)
    return found


def _known(name: str, modules: dict[str, Module]) -> str | None:
    """The longest prefix of dotted *name* that is one of *modules*."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_edges(
    modules: dict[str, Module], *, annotations: bool = False
) -> dict[str, dict[str, int]]:
    """module → module it imports at run time → the first line doing so; with
    *annotations*, the imports under ``if TYPE_CHECKING:`` too."""
    reexports = {name: _reexports(m) for name, m in modules.items() if m.is_package}
    edges: dict[str, dict[str, int]] = {}
    for name, module in modules.items():
        out = edges.setdefault(name, {})

        def add(target: str | None, line: int, name: str = name, out: dict[str, int] = out) -> None:
            if target is not None and target != name:
                out.setdefault(target, line)

        nodes = ast.walk(module.tree) if annotations else runtime_nodes(module.tree)
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(_known(alias.name, modules), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                source = absolute(module, node)
                if source not in modules:
                    add(_known(source, modules), node.lineno)
                    continue
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in modules:
                        add(sub, node.lineno)
                    elif alias.name in reexports.get(source, {}):
                        add(_known(reexports[source][alias.name], modules), node.lineno)
                    else:
                        add(source, node.lineno)
    return edges


def _components(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, {})))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def import_cycles(modules: dict[str, Module]) -> list[str]:
    """Each group of modules that import each other, with the imports inside it."""
    edges = import_edges(modules)
    report = []
    for component in _components(edges):
        members = set(component)
        pairs = [
            f"{a} -> {b} ({where(modules[a], line)})"
            for a in component for b, line in sorted(edges[a].items()) if b in members
        ]
        report.append(f"cycle among {', '.join(component)}:\n    " + "\n    ".join(pairs))
    return report


# -- the direction of dse-core's packages ---------------------------------------------------

LAYERS = ("model", "trial", "campaign", "plugins", "record", "report", "dashboard", "pool",
          "engine", "integrations", "launch",
          "api", "cli", "top")
"""dse-core's packages from the ground up: a module imports only from its own package and
those below it (annotation-only imports too). Modules at the top of ``dse`` sit where
:data:`TOP_LEVEL` says."""
TOP_LEVEL = {
    "dse._version": "model", "dse._envprobe": "model", "dse.trial": "trial",
    "dse.hookspecs": "plugins", "dse.testing._probe": "plugins", "dse._worker": "launch",
}
"""The layer of each module that is not in a package of :data:`LAYERS` (``top`` otherwise:
``dse``, ``dse.__main__``, ``dse.testing``)."""
UPWARD: dict[tuple[str, str], str] = {}
"""Upward imports still there, each with what removes it; the list only shrinks."""


def layer(name: str, prefix: str = "dse") -> str:
    """The layer of module *name* (a module of ``dse``)."""
    if name in TOP_LEVEL:
        return TOP_LEVEL[name]
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == prefix and parts[1] in LAYERS:
        return parts[1]
    return "top"


def upward_imports(modules: dict[str, Module], prefix: str = "dse") -> list[str]:
    """Every import (annotation-only ones too) from a module of dse-core into a higher layer
    than its own, as ``path:line: a -> b (layer -> layer)``."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    found = []
    for source, targets in import_edges(modules, annotations=True).items():
        if source.partition(".")[0] != prefix:
            continue
        for target, line in sorted(targets.items()):
            if target.partition(".")[0] != prefix or (source, target) in UPWARD:
                continue
            low, high = layer(source, prefix), layer(target, prefix)
            if rank[high] > rank[low]:
                found.append(f"{where(modules[source], line)}: {source} -> {target}"
                             f" ({low} -> {high})")
    return sorted(found, key=_by_place)


# -- private names --------------------------------------------------------------------------


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.Module) -> set[str]:
    """Names the module defines itself: defs, classes, assigned names and attributes,
    ``__slots__`` entries, dataclass fields (annotated class attributes)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.attr)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names.update(
                str(c.value) for c in ast.walk(node.value) if isinstance(c, ast.Constant)
            )
    return names


def _module_names(module: Module, modules: dict[str, Module]) -> dict[str, str]:
    """Local names bound to modules by imports (``import a.b`` binds ``a``), dotted."""
    bound: dict[str, str] = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.partition(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom):
            source = absolute(module, node)
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    return bound


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The module *node* names (``dse.engine._engine`` for ``dse.engine._engine`` after ``import
    dse``)."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bound)
        return None if base is None else f"{base}.{node.attr}"
    return None


def private_uses(modules: dict[str, Module]) -> list[str]:
    """Every import or use of another module's underscore name, as ``path:line: what``.

    Other libraries' modules are theirs to name (``os._exit`` is documented API): imports
    and module attributes count only for the modules read."""
    ours = {name.partition(".")[0] for name in modules}
    found: list[str] = []
    for module in modules.values():
        defined = _defined(module.tree)
        bound = _module_names(module, modules)
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom):
                source = absolute(module, node)
                found.extend(
                    f"{where(module, node)}: from {source} import {alias.name}"
                    for alias in node.names
                    if _private(alias.name) and f"{source}.{alias.name}" not in modules
                    and source.partition(".")[0] in ours
                )
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                found.extend(_attribute_use(module, node, defined, bound, modules, ours))
            elif (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str) and _private(node.args[1].value)
                and node.args[1].value not in defined
            ):
                found.append(
                    f"{where(module, node)}: {node.func.id}(..., {node.args[1].value!r})"
                )
    return sorted(found, key=_by_place)


def _attribute_use(
    module: Module, node: ast.Attribute, defined: set[str], bound: dict[str, str],
    modules: dict[str, Module], ours: set[str],
) -> list[str]:
    owner = _dotted(node.value, bound)
    if owner is not None:
        if (
            f"{owner}.{node.attr}" in modules or owner == module.name
            or owner.partition(".")[0] not in ours
        ):
            return []  # a private submodule (a room of its package), its own, another's
        return [f"{where(module, node)}: {owner}.{node.attr}"]
    if node.attr in defined:
        return []
    return [f"{where(module, node)}: {ast.unparse(node)}"]


def _by_place(entry: str) -> tuple[str, int]:
    path, line, _ = entry.split(":", 2)
    return path, int(line)


def benchmark_imports(paths: Iterable[Path], ours: Iterable[str] = OURS) -> list[str]:
    """Imports by benchmark scripts of anything but our packages' public names."""
    ours = tuple(ours)
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        module = Module(path.stem, path, tree, is_package=False, lines=0)
        for node in ast.walk(tree):
            imported: list[tuple[str, str]] = []  # (dotted name, how it is imported)
            if isinstance(node, ast.Import):
                imported = [(alias.name, f"import {alias.name}") for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported = [
                    (f"{node.module}.{alias.name}", f"from {node.module} import {alias.name}")
                    for alias in node.names
                ]
            for name, statement in imported:
                parts = name.split(".")
                if parts[0] in ours and any(_private(p) for p in parts):
                    found.append(f"{where(module, node)}: {statement}")
    return found


# -- sizes ----------------------------------------------------------------------------------


def oversized(
    modules: dict[str, Module], *, class_max: int = CLASS_MAX,
    function_max: int = FUNCTION_MAX, file_max: dict[str, int] | None = None,
) -> list[str]:
    """Every class, function and listed file longer than allowed."""
    found = []
    limits = file_max if file_max is not None else FILE_MAX
    for name, module in sorted(modules.items()):
        package = next((p for p in limits if name == p or name.startswith(f"{p}.")), None)
        if package is not None and module.lines > limits[package]:
            found.append(f"{where(module, 1)}: {name} has {module.lines} lines"
                         f" (> {limits[package]})")
    for module in modules.values():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ClassDef):
                kind, limit = "class", class_max
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                kind, limit = "function", function_max
            else:
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append(
                    f"{where(module, node)}: {kind} {node.name} has {length} lines (> {limit})"
                )
    return sorted(found, key=_by_place)


# -- the checks on this repository ---------------------------------------------------------


@functools.cache
def sources() -> dict[str, Module]:
    """The four distributions' modules (read once per test process)."""
    return load(SOURCES)


def _listing(found: list[str]) -> str:
    return f"{len(found)}:\n" + "\n".join(found)


def test_no_import_cycles() -> None:
    found = import_cycles(sources())
    assert not found, _listing(found)


def test_dse_core_packages_import_downwards() -> None:
    found = upward_imports(sources())
    assert not found, _listing(found)
    edges = import_edges(sources(), annotations=True)
    gone = [pair for pair in UPWARD if pair[1] not in edges.get(pair[0], {})]
    assert not gone, f"no longer imported, strike from UPWARD: {gone}"


CIRCLES_LEFT: list[frozenset[str]] = []
"""Modules still in a circle when annotation-only imports count (none: a lower part is handed a
narrow view of what it uses, never the object above it). A new circle fails; so does a listed
circle that is gone (strike it)."""


def test_no_new_circle_even_counting_annotations() -> None:
    edges = import_edges(sources(), annotations=True)
    circles = _components(edges)
    found = [c for c in circles if not any(set(c) <= k for k in CIRCLES_LEFT)]
    assert not found, found
    gone = [sorted(k) for k in CIRCLES_LEFT if not any(set(c) <= k for c in circles)]
    assert not gone, f"no longer a circle, strike from CIRCLES_LEFT: {gone}"


def test_no_module_touches_another_modules_private_names() -> None:
    found = private_uses(sources())
    assert not found, _listing(found)


def test_benchmarks_import_public_names_only() -> None:
    found = benchmark_imports(sorted(BENCHMARKS.glob("*.py")))
    assert not found, _listing(found)


def test_no_class_function_or_engine_too_long() -> None:
    found = oversized(sources())
    assert not found, _listing(found)


def test_the_checks_read_every_distribution() -> None:
    names = sources()
    assert {name.partition(".")[0] for name in names} == set(OURS)
    assert "dse.engine._engine" in names


# -- each check can fail --------------------------------------------------------------------


def package(tmp_path: Path, files: dict[str, str]) -> dict[str, Module]:
    """A throwaway source tree of *files* (path → source), loaded."""
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return load([tmp_path])


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    modules = package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/_a.py": "from pkg._b import B\n",
        "pkg/_b.py": "B = 1\ndef late():\n    from pkg import _a\n    return _a\n",
    })
    (cycle,) = import_cycles(modules)
    assert "cycle among pkg._a, pkg._b" in cycle
    assert f"pkg._a -> pkg._b ({tmp_path / 'pkg/_a.py'}:1)" in cycle
    assert f"pkg._b -> pkg._a ({tmp_path / 'pkg/_b.py'}:3)" in cycle


def test_relative_imports_make_cycles_too(tmp_path: Path) -> None:
    modules = package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "from . import x\n",
        "pkg/sub/x.py": "from .. import y\n",
        "pkg/y.py": "import pkg.sub\n",
    })
    assert [c.splitlines()[0] for c in import_cycles(modules)] == [
        "cycle among pkg.sub, pkg.sub.x, pkg.y:"
    ]


def test_annotation_only_imports_and_lazy_reexports_make_no_cycle(tmp_path: Path) -> None:
    modules = package(tmp_path, {
        "pkg/__init__.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from pkg._a import A
            _LAZY = {"A": "pkg._a", "B": "pkg._b"}
            def __getattr__(name):
                import importlib
                return getattr(importlib.import_module(_LAZY[name]), name)
            """,
        "pkg/_a.py": "from pkg import B\nclass A: ...\n",
        "pkg/_b.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from pkg._a import A
            else:
                import json
            B = 1
            """,
    })
    assert import_edges(modules)["pkg._a"] == {"pkg._b": 1}
    assert import_cycles(modules) == []


def test_private_names_of_other_modules_are_found(tmp_path: Path) -> None:
    modules = package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/_a.py": """\
            import dataclasses
            class A:
                __slots__ = ("_slot",)
                def __init__(self):
                    self._own = 1
                    self._slot = 2
            @dataclasses.dataclass
            class D:
                _field: int = 0
            _helper = 1
            """,
        "pkg/b.py": """\
            import pkg._a
            from pkg import _a
            from pkg._a import _helper, A
            def use(a: A, d):
                a._own                  # line 5
                pkg._a._helper          # line 6
                _a._helper              # line 7
                getattr(a, "_slot")     # line 8
                a.__class__, pkg._a.A, _a.A
                return d._field         # line 10
            """,
        "pkg/c.py": """\
            import os
            from pkg._a import A
            class C(A):
                _mine = 0
                def __init__(self):
                    self._own = 3
                    self._slot = self._mine
                def stop(self):
                    os._exit(self._own)  # another library's name is its own business
            """,
    })
    b = tmp_path / "pkg" / "b.py"
    assert private_uses(modules) == [
        f"{b}:3: from pkg._a import _helper",
        f"{b}:5: a._own",
        f"{b}:6: pkg._a._helper",
        f"{b}:7: pkg._a._helper",
        f"{b}:8: getattr(..., '_slot')",
        f"{b}:10: d._field",
    ]


def test_benchmarks_may_not_import_private_modules_or_names(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text(textwrap.dedent("""\
        import dse
        import dse.testing
        import dse.engine._engine
        from dse import Engine
        from dse.record.sqlite._store import Store
        from dse.trial import checkpointed
        from dse_agents import _bayesian
        from _peers import helper
        """), encoding="utf-8")
    assert benchmark_imports([script]) == [
        f"{script}:3: import dse.engine._engine",
        f"{script}:5: from dse.record.sqlite._store import Store",
        f"{script}:7: from dse_agents import _bayesian",
    ]


def test_long_classes_functions_and_files_are_found(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    modules = package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/_big.py": f"class Big:\n{body}\n\n\ndef long():\n{body}\n\n\ndef short():\n    pass\n",
    })
    big = tmp_path / "pkg" / "_big.py"
    assert oversized(modules, class_max=5, function_max=5, file_max={"pkg._big": 17}) == [
        f"{big}:1: pkg._big has 18 lines (> 17)",
        f"{big}:1: class Big has 6 lines (> 5)",
        f"{big}:9: function long has 6 lines (> 5)",
    ]
    assert oversized(modules, class_max=6, function_max=6, file_max={"pkg._big": 18}) == []


def test_an_upward_import_between_packages_is_found(tmp_path: Path) -> None:
    modules = package(tmp_path, {
        "dse/__init__.py": "",
        "dse/model/__init__.py": "",
        "dse/model/_values.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from dse.engine._engine import Engine
            """,
        "dse/record/__init__.py": "",
        "dse/record/_store.py": "from dse.model._values import x\n",
        "dse/report/__init__.py": "",
        "dse/report/_show.py": "def show():\n    from dse.engine import _engine\n",
        "dse/engine/__init__.py": "",
        "dse/engine/_engine.py": "from dse.record._store import y\nfrom dse.report import _show\n",
    })
    found = upward_imports(modules)
    assert found == [
        f"{tmp_path}/dse/model/_values.py:3: dse.model._values -> dse.engine._engine"
        " (model -> engine)",
        f"{tmp_path}/dse/report/_show.py:2: dse.report._show -> dse.engine._engine"
        " (report -> engine)",
    ]


# -- docs/architecture.md, the map ----------------------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
CORE = ROOT / "packages" / "core" / "src" / "dse"


def named_modules(text: str) -> list[str]:
    """Every dse-core module the map names, as ``package/_module`` (``record/sqlite/_store``)."""
    layers = "|".join(LAYERS)
    return re.findall(rf"`((?:{layers})(?:/[a-z]\w*)*/_\w+)(?:\.\w+)?`", text)


def test_the_map_names_every_package_and_only_modules_that_exist() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    packages = sorted(p.name for p in CORE.iterdir() if (p / "__init__.py").exists()
                      and p.name != "testing")
    rows = re.findall(r"^\| `(\w+)` \|", text, flags=re.M)
    assert [p for p in LAYERS if p in rows] == [p for p in LAYERS if p in packages]
    assert set(packages) <= set(rows), sorted(set(packages) - set(rows))
    named = named_modules(text)
    assert len(named) > 40
    missing = sorted({n for n in named if not (CORE / f"{n}.py").exists()})
    assert not missing, missing


def test_a_module_the_map_names_wrongly_is_found() -> None:
    assert named_modules("see `engine/_engine`, `record/sqlite/_store.commit` and `_x`") == [
        "engine/_engine", "record/sqlite/_store"]
