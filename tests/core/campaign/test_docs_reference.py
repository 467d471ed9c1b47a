"""The reference docs agree with the code: docs/campaign.md documents exactly the keys the
campaign and pool loaders accept, and every public name has documentation of its own.

What the loaders accept is learnt from the loaders, never listed here: the tables
``load_campaign`` reads through its ``_Table`` helper are recorded while it loads a file that
uses every table (a ``_Table`` rejects every key it was not asked for), and the parsers that
check their own tables expose their known keys (``BUDGET_KEYS``, ``PRICE_KEYS``, ``DATA_KEYS``,
``PARAM_KEYS``, ``POOL_KEYS``...). The page is read as Markdown: each heading naming a table in
backticks (``## `[campaign]` ``) opens a section, and the backticked names in the first column
of its tables are the keys it documents.

What ``help()`` shows a plugin author is checked below (the public names' docstrings).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pydoc
import re
import textwrap
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import dse
from dse import ConfigError, load_campaign
from dse.campaign import _campaign
from dse.campaign._data import DATA_KEYS
from dse.campaign._seeding import WARM_KEYS
from dse.model._budget import BUDGET_KEYS, PRICE_KEYS, TRIAL_CEILING_KEYS
from dse.model._space import PARAM_KEYS
from dse.pool._poolfile import POOL_CAMPAIGN_KEYS, POOL_FILE_KEYS, POOL_KEYS, load_pool

DOC = Path(__file__).resolve().parents[3] / "docs" / "campaign.md"

TOP = "(top level)"
"""The pseudo-section of a file's top-level tables: the roots of its sections' names."""
SPACE = "[space.<name>]"
"""The section of a parameter's table, whose second column says which types take a key."""

_TABLE = re.compile(r"`(\[\[?[A-Za-z_][^`\]]*\]\]?)`")
_KEY = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")

EVERY_TABLE = """
[campaign]
name = "every"
backend = "probe"
agent = "random"

[agent]
warm_start = ["every"]
warm_start_data = "any"
warm_start_fill = { x = 1 }

[agent.random]
sampler = "sobol"

[[enqueue]]
x = 3
kind = "b"

[backend.probe.price]
cpu_hour = 1.0

[environment]
command = ["python", "work.py", "{x}"]
time_limit = "1m"
code_version = "v1"

[[objectives]]
metric = "loss"

[space]
x = { type = "int", low = 1, high = 4 }
kind = ["a", "b"]

[budget]
money = "10 USD"

[budget.trial]
wall_time = "5m"

[data]
version = "2024-06"

[scorer]
name = "ratio"
direction = "minimize"

[baseline]
params = { x = 2, kind = "a" }

[stopping]
rule = "asha"
metric = "loss"
direction = "minimize"
min_step = 1
max_step = 27
promote = true

[stopping.asha]
reduction_factor = 3
"""


def variant_section(kind: str) -> str:
    """The pseudo-section of the keys one parameter type takes."""
    return f"{SPACE} type = {kind!r}"


@dataclass(frozen=True)
class Row:
    """One table row of the page."""

    section: str
    """The section it belongs to (its heading's first table name, such as ``[campaign]``)."""
    keys: tuple[str, ...]
    """The backticked names of its first column."""
    variants: tuple[str, ...]
    """The backticked names of its second column (for ``[space.<name>]``: the types)."""
    line: int
    """Its line index in the page."""


@dataclass(frozen=True)
class Reference:
    """What the page documents."""

    aliases: Mapping[str, tuple[str, ...]]
    """Each section's table names, as its heading gives them (``[[objectives]]``,
    ``[objective]``)."""
    rows: tuple[Row, ...]


def parse_reference(text: str) -> Reference:
    aliases: dict[str, tuple[str, ...]] = {}
    rows: list[Row] = []
    section: str | None = None
    fenced = False
    for index, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            continue  # a TOML comment is no heading
        elif line.startswith("#"):
            names = tuple(_TABLE.findall(line))
            section = names[0] if names else None
            if section is not None:
                aliases[section] = names
        elif section is not None and line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            keys = tuple(_KEY.findall(cells[0]))
            if keys:  # not the header row
                variants = tuple(_KEY.findall(cells[1])) if len(cells) > 1 else ()
                rows.append(Row(section, keys, variants, index))
    return Reference(aliases, tuple(rows))


def documented_keys(reference: Reference) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for row in reference.rows:
        keys.setdefault(row.section, set()).update(row.keys)
        if row.section == SPACE:
            for kind in row.variants:
                keys.setdefault(variant_section(kind), set()).update(row.keys)
    return keys


def _root(table: str) -> str:
    """``[[objectives]]`` -> ``objectives``; ``[backend.<name>.price]`` -> ``backend``."""
    return table.strip("[]").split(".")[0]


def reference_problems(
    text: str, files: Mapping[str, Mapping[str, AbstractSet[str]]]
) -> list[str]:
    """What the page gets wrong about the loaders: *files* maps each kind of file to the keys
    its loader accepts, by section (``TOP``: its top-level tables). A section of the page
    belongs to the file whose loader reads it, else to the first file."""
    reference = parse_reference(text)
    documented = documented_keys(reference)

    def owner(section: str) -> str:
        return next((kind for kind, accepted in files.items() if section in accepted),
                    next(iter(files)))

    problems = []
    for kind, accepted in files.items():
        sections = {s: keys for s, keys in documented.items() if owner(s) == kind}
        sections[TOP] = {_root(name) for section, names in reference.aliases.items()
                         if owner(section) == kind for name in names}
        for section in sorted(accepted.keys() | sections.keys()):
            if section not in accepted:
                problems.append(
                    f"{kind} {section}: documented, but the loader reads no such table"
                    f" (keys {sorted(sections[section])})")
            elif section not in sections:
                problems.append(
                    f"{kind} {section}: no section documents it (accepted keys:"
                    f" {sorted(accepted[section])})")
            else:
                what = "table" if section == TOP else "key"
                problems += [
                    f"{kind} {section}: {what} {key!r} is accepted but not documented"
                    for key in sorted(accepted[section] - sections[section])
                ]
                problems += [
                    f"{kind} {section}: {what} {key!r} is documented but the loader rejects it"
                    for key in sorted(sections[section] - accepted[section])
                ]
    return problems


def _section_of(prefix: str) -> str:
    """The section a ``_Table`` prefix reads: ``""`` -> TOP, ``campaign.`` -> ``[campaign]``,
    ``objectives[0].`` -> ``[[objectives]]``."""
    name = prefix.rstrip(".")
    if not name:
        return TOP
    if name.endswith("]"):
        return f"[[{name.split('[')[0]}]]"
    return f"[{name}]"


@dataclass
class _Read:
    table: _campaign._Table
    finished: bool = False


def read_tables(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[_Read]:
    """Load *path*, recording every table the loader reads through ``_Table``."""
    reads: list[_Read] = []

    class Recording(_campaign._Table):
        def __init__(self, data: Mapping[str, Any], source: str, prefix: str) -> None:
            super().__init__(data, source, prefix)
            self.read = _Read(self)
            reads.append(self.read)

        def finish(self) -> None:
            self.read.finished = True
            super().finish()

    with monkeypatch.context() as patch:
        patch.setattr(_campaign, "_Table", Recording)
        load_campaign(path)
    return reads


def campaign_keys(reads: list[_Read]) -> dict[str, frozenset[str]]:
    """Every section's accepted keys: the ``_Table`` reads, and the parsers' own key sets."""
    accepted: dict[str, frozenset[str]] = {}
    for read in reads:
        section = _section_of(read.table.prefix)
        accepted[section] = accepted.get(section, frozenset()) | read.table.used
    accepted |= {
        "[budget]": BUDGET_KEYS,
        "[budget.trial]": TRIAL_CEILING_KEYS,
        "[backend.<name>.price]": PRICE_KEYS,
        "[data]": DATA_KEYS,
        "[agent]": WARM_KEYS,
        SPACE: frozenset().union(*PARAM_KEYS.values()),
    }
    accepted |= {variant_section(kind): keys for kind, keys in PARAM_KEYS.items()}
    return accepted


POOL_SECTIONS = {TOP: POOL_FILE_KEYS, "[pool]": POOL_KEYS, "[[campaign]]": POOL_CAMPAIGN_KEYS}


@pytest.fixture
def accepted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> dict[str, Mapping[str, AbstractSet[str]]]:
    """What the loaders accept, by file kind and section."""
    path = tmp_path / "every.toml"
    path.write_text(EVERY_TABLE)
    reads = read_tables(monkeypatch, path)
    return {"campaign file": campaign_keys(reads), "pool file": POOL_SECTIONS}


def test_the_reference_documents_exactly_the_accepted_keys(
    accepted: dict[str, Mapping[str, AbstractSet[str]]],
) -> None:
    problems = reference_problems(DOC.read_text(), accepted)
    assert not problems, f"{DOC.name} and the loaders disagree:\n" + "\n".join(problems)


def test_the_loader_was_seen_reading_its_tables(
    accepted: dict[str, Mapping[str, AbstractSet[str]]],
) -> None:
    # The recording saw the tables the loader reads, with the keys it asks for.
    sections = accepted["campaign file"]
    for section in ("[campaign]", "[environment]", "[[objectives]]", "[scorer]", "[baseline]"):
        assert sections.get(section), f"the loader was not seen reading {section}"
    assert {"campaign", "space", "budget", "data"} <= sections[TOP]


def test_every_table_the_loader_finishes_rejects_any_other_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What a finished table did not ask for is refused: the recorded keys are all it takes.
    path = tmp_path / "every.toml"
    path.write_text(EVERY_TABLE)
    reads = read_tables(monkeypatch, path)
    open_tables = {_section_of(r.table.prefix) for r in reads if not r.finished}
    assert open_tables == {"[scorer]"}  # the rest of [scorer] goes to the scorer class
    for section in {_section_of(r.table.prefix) for r in reads if r.finished} - {TOP}:
        name = section.strip("[]")
        header = f"[[{name}]]" if section.startswith("[[") else f"[{name}]"
        text = EVERY_TABLE.replace(f"{header}\n", f"{header}\nnot_a_key = 1\n", 1)
        assert text != EVERY_TABLE, section
        path.write_text(text)
        with pytest.raises(ConfigError, match=r"unknown key.*not_a_key"):
            load_campaign(path)
    path.write_text(EVERY_TABLE + "[not_a_table]\n")
    with pytest.raises(ConfigError, match=r"unknown key.*not_a_table"):
        load_campaign(path)


def test_removing_any_documented_row_is_reported(
    accepted: dict[str, Mapping[str, AbstractSet[str]]],
) -> None:
    text = DOC.read_text()
    lines = text.splitlines()
    rows = parse_reference(text).rows
    assert len(rows) > 60, "the reference's tables were not found"
    for row in rows:
        without = "\n".join(lines[: row.line] + lines[row.line + 1:])
        problems = "\n".join(reference_problems(without, accepted))
        for key in row.keys:
            assert f"{row.section}: key {key!r} is accepted but not documented" in problems, (
                f"removing the row of {key!r} from {row.section} went unnoticed")


def test_an_unknown_key_or_a_missing_section_is_reported(
    accepted: dict[str, Mapping[str, AbstractSet[str]]],
) -> None:
    text = DOC.read_text()
    row = "| `lookahead` | integer >= 0 |"
    assert row in text
    extra = text.replace(row, "| `look_ahead` | integer >= 0 | `0` | a typo |\n" + row, 1)
    assert reference_problems(extra, accepted) == [
        "campaign file [campaign]: key 'look_ahead' is documented but the loader rejects it"
    ]
    no_data = text.replace("## `[data]`", "## Data", 1)
    problems = reference_problems(no_data, accepted)
    assert "campaign file [data]: no section documents it (accepted keys:" \
        " ['command', 'paths', 'version'])" in problems
    assert "campaign file (top level): table 'data' is accepted but not documented" in problems
    no_pool = text.replace("### `[pool]`", "### The pool", 1)
    assert any(p.startswith("pool file [pool]: no section") for p in
               reference_problems(no_pool, accepted))


def test_the_examples_of_the_reference_load(tmp_path: Path) -> None:
    blocks = re.findall(r"```toml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    campaign = next(b for b in blocks if "[[objectives]]" in b)
    pool = next(b for b in blocks if "[pool]" in b)
    (tmp_path / "campaign.toml").write_text(campaign)
    loaded = load_campaign(tmp_path / "campaign.toml")
    assert loaded.baseline is not None
    assert loaded.budget.trial.wall_s == 1800.0
    (tmp_path / "pool.toml").write_text(pool)
    config = load_pool(tmp_path / "pool.toml")
    assert [p.name for p in config.campaigns] == ["sweep.toml", "refine.toml"]
    assert dict(config.capacity) == {"slots": 8, "gpus": 4}


# -- the public names' docstrings -------------------------------------------------------------
#
# What `help()` shows a plugin author. Every public name of `dse`, `dse.testing` and
# `dse.trial` (their `__all__`) has a docstring of its own: a class or function its own
# `__doc__` (not one inherited from a builtin or a base class); any other value (a constant, a
# marker) the string literal right after its module-level assignment, found by following the
# imports from the public module to the one that assigns it. Every public method, property and
# fixture of a public class, and of its bases within the package, has a docstring; so does
# every public field of a public dataclass (the string literal right after it in the class
# body that declares it).

PUBLIC_MODULES = ("dse", "dse.testing", "dse.trial")


def _members(cls: type, package: str) -> dict[str, tuple[type, object]]:
    """The public methods, properties and fixtures of *cls* and of its bases within
    *package*, each with the class that defines it (the first in the MRO)."""
    found: dict[str, tuple[type, object]] = {}
    for base in cls.__mro__:
        if base.__module__.split(".")[0] != package:
            continue
        for name, value in vars(base).items():
            if name.startswith("_") or name in found or isinstance(value, type):
                continue
            if isinstance(value, property | classmethod | staticmethod) or callable(value):
                found[name] = (base, value)
    return found


def _doc(value: object) -> str:
    if isinstance(value, classmethod | staticmethod):
        value = value.__func__
    return (getattr(value, "__doc__", None) or "").strip()


def _attribute_docs(body: list[ast.stmt]) -> dict[str, str | None]:
    """The names *body* assigns, each with the string literal right after it (or ``None``);
    the statements under an ``if`` (``TYPE_CHECKING``) are read too."""
    docs: dict[str, str | None] = {}
    for index, node in enumerate(body):
        if isinstance(node, ast.If):
            docs |= {k: v for k, v in _attribute_docs(node.body + node.orelse).items()
                     if v is not None or k not in docs}
            continue
        targets = ([node.target] if isinstance(node, ast.AnnAssign)
                   else node.targets if isinstance(node, ast.Assign) else [])
        after = body[index + 1] if index + 1 < len(body) else None
        doc = (after.value.value if isinstance(after, ast.Expr)
               and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)
               else None)
        for target in targets:
            if isinstance(target, ast.Name) and docs.get(target.id) is None:
                docs[target.id] = doc
    return docs


def constant_docstring(module_name: str, name: str, seen: frozenset[str] = frozenset()
                       ) -> str | None:
    """The docstring of *name* where it is assigned: in *module_name*, or in the module it
    imports *name* from, and so on."""
    module = importlib.import_module(module_name)
    tree = ast.parse(Path(inspect.getfile(module)).read_text(encoding="utf-8"))
    assigned = _attribute_docs(tree.body)
    if name in assigned:
        return assigned[name]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module not in seen and any(
            (alias.asname or alias.name) == name for alias in node.names
        ):
            return constant_docstring(node.module, name, seen | {module_name})
    return None


def field_docs(cls: type) -> dict[str, str | None]:
    """The fields *cls*'s own body declares, each with its docstring (or ``None``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    return _attribute_docs(body)


def docstring_problems(module_name: str) -> list[str]:
    """Every public name of *module_name* (its ``__all__``) that ``help()`` would show without
    its own documentation, and every undocumented public member or dataclass field."""
    module = importlib.import_module(module_name)
    package = module_name.split(".")[0]
    problems = []
    for name in module.__all__:
        value = getattr(module, name)
        where = f"{module_name}.{name}"
        if isinstance(value, type):
            if not _own_class_doc(value):
                problems.append(f"{where}: the class has no docstring of its own")
            problems += [f"{where}.{member}: no docstring (defined in {base.__qualname__})"
                         for member, (base, attr) in _members(value, package).items()
                         if not _doc(attr)]
            if dataclasses.is_dataclass(value):
                problems += _field_problems(value, where)
        elif inspect.isroutine(value):
            if not _doc(value):
                problems.append(f"{where}: the function has no docstring")
        elif not constant_docstring(module_name, name):
            problems.append(f"{where}: no docstring after its assignment"
                            f" ({type(value).__name__} {value!r:.40})")
    return problems


def _own_class_doc(cls: type) -> bool:
    """Whether *cls* has a docstring of its own: not none, and not the one ``@dataclass``
    makes up for a class without (its name and signature, ``V(x: int)``)."""
    doc = (vars(cls).get("__doc__") or "").strip()
    if not doc:
        return False
    if dataclasses.is_dataclass(cls):
        try:
            made_up = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            return True
        return doc != made_up
    return True


def _field_problems(cls: type, where: str) -> list[str]:
    problems = []
    documented: dict[str, str | None] = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base) and "__annotations__" in vars(base):
            documented |= field_docs(base)
    for item in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not item.name.startswith("_") and not documented.get(item.name):
            problems.append(f"{where}.{item.name}: the field has no docstring")
    return problems


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_member_and_field_has_a_docstring(module_name: str) -> None:
    problems = docstring_problems(module_name)
    assert not problems, "undocumented:\n" + "\n".join(problems)


def test_help_of_parameter_shows_dses_documentation() -> None:
    # Parameter was once a string alias: help(dse.Parameter) showed str's help. It is now the
    # documented base of the three parameter classes (a union for type checkers).
    text = pydoc.render_doc(dse.Parameter, renderer=pydoc.plaintext)
    assert "class str" not in text, text[:300]
    assert "One parameter of a :class:`Space`" in text, text[:300]
    params = [dse.Categorical("a", ("x", "y")), dse.IntRange("b", 0, 4),
              dse.FloatRange("c", 0.0, 1.0)]
    assert all(isinstance(p, dse.Parameter) for p in params)
    assert not isinstance("x", dse.Parameter)
    # Still frozen, slotted values: equal by their fields, hashable, no instance dict.
    assert dse.IntRange("b", 0, 4) == params[1]
    assert len({*params, dse.IntRange("b", 0, 4)}) == 3
    assert not any(hasattr(p, "__dict__") for p in params)


UNDOCUMENTED = '''
import dataclasses

__all__ = ["Alias", "Bare", "LIMIT", "Plain", "Value", "helper"]

Alias = "int | str"
LIMIT = 3
"""Documented: never reported."""


class Plain:
    """Documented."""

    def method(self):
        return 1

    @property
    def size(self):
        return 0


@dataclasses.dataclass
class Value:
    """Documented."""

    count: int
    name: str = ""
    """Documented."""


def helper():
    pass


@dataclasses.dataclass
class Bare:
    size: int
    """Documented."""
'''


def test_every_kind_of_missing_docstring_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "undocumented_api.py").write_text(UNDOCUMENTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert docstring_problems("undocumented_api") == [
        "undocumented_api.Alias: no docstring after its assignment (str 'int | str')",
        "undocumented_api.Bare: the class has no docstring of its own",
        "undocumented_api.Plain.method: no docstring (defined in Plain)",
        "undocumented_api.Plain.size: no docstring (defined in Plain)",
        "undocumented_api.Value.count: the field has no docstring",
        "undocumented_api.helper: the function has no docstring",
    ]
