"""Every hook is documented: in its docstring and in docs/plugins.md."""

from __future__ import annotations

import inspect
from pathlib import Path

from dse import hookspecs

DOCS = Path(__file__).resolve().parents[3] / "docs" / "plugins.md"


def _hooks() -> list[str]:
    return [name for name in dir(hookspecs) if name.startswith("dse_")]


def test_there_are_hooks() -> None:
    assert "dse_register_backends" in _hooks()
    assert "dse_register_agents" in _hooks()


def test_every_hook_has_a_docstring_with_every_param_and_the_return() -> None:
    for name in _hooks():
        func = getattr(hookspecs, name)
        doc = inspect.getdoc(func) or ""
        assert len(doc) > 200, f"{name} is barely documented"
        assert ":return:" in doc, name
        for param in inspect.signature(func).parameters:
            assert f":param {param}:" in doc, f"{name}: parameter {param} is undocumented"


def test_every_hook_is_in_the_plugin_guide() -> None:
    text = DOCS.read_text()
    missing = [name for name in _hooks() if f"`{name}`" not in text]
    assert not missing, f"hooks missing from {DOCS.name}: {missing}"
