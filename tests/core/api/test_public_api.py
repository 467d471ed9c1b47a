"""``dse/__init__.py`` names its public API three times, and the three lists agree: the imports
type checkers read, the ``_LAZY`` table that imports a name on first use, and ``__all__``. The
names that moved under their package (``_MOVED``) are still imported for type checkers and
resolve to the same objects as their new homes, but are neither in ``__all__`` nor ``dir()``."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import dse

INIT = Path(dse.__file__)


def _lists() -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(name → module) of the TYPE_CHECKING imports (moved names left out) and of ``_LAZY``,
    and ``__all__``."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    imports: dict[str, str] = {}
    lazy: dict[str, str] = {}
    moved: dict[str, str] = {}
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                assert isinstance(item, ast.ImportFrom), ast.unparse(item)
                assert item.module is not None
                for alias in item.names:
                    imports[alias.asname or alias.name] = item.module
        elif isinstance(node, ast.AnnAssign | ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            if not isinstance(target, ast.Name):  # `__getattr__, __dir__ = lazy_names(...)`
                continue
            if target.id == "_LAZY":
                lazy = ast.literal_eval(node.value)  # type: ignore[arg-type]
            elif target.id == "_MOVED":
                moved = ast.literal_eval(node.value)  # type: ignore[arg-type]
            elif target.id == "__all__":
                names = ast.literal_eval(node.value)  # type: ignore[arg-type]
    assert set(moved) <= set(imports), "a moved name is no longer imported for type checkers"
    return {k: v for k, v in imports.items() if k not in moved}, lazy, names


def test_the_imports_the_lazy_table_and_all_name_the_same_public_api() -> None:
    imports, lazy, names = _lists()
    assert names, "dse/__init__.py has no literal __all__"
    assert len(names) == len(set(names)), "a name is in __all__ twice"
    assert sorted(imports) == sorted(lazy) == sorted(names)
    assert imports == lazy, "a name is imported from another module than _LAZY loads it from"


def test_every_public_name_resolves_to_what_its_module_defines() -> None:
    _, lazy, names = _lists()
    assert sorted(dir(dse)) == sorted(names)
    for name in names:
        assert getattr(dse, name) is getattr(importlib.import_module(lazy[name]), name), name


def test_a_moved_name_is_the_same_object_as_in_its_package() -> None:
    import dse as top

    moved = top._MOVED
    assert {"Store", "Engine", "Pool", "drive", "PoolScheduler"} <= set(moved)
    for name, home in moved.items():
        assert name not in top.__all__
        assert name not in dir(top)
        package = importlib.import_module(home)
        assert name in package.__all__, (name, home)
        assert getattr(top, name) is getattr(package, name), name
