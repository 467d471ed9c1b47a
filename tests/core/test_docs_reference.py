"""docs/campaign.md documents exactly the keys the campaign and pool loaders accept.

What the loaders accept is learnt from the loaders, never listed here: the tables
``load_campaign`` reads through its ``_Table`` helper are recorded while it loads a file that
uses every table (a ``_Table`` rejects every key it was not asked for), and the parsers that
check their own tables expose their known keys (``BUDGET_KEYS``, ``PRICE_KEYS``, ``DATA_KEYS``,
``PARAM_KEYS``, ``POOL_KEYS``...). The page is read as Markdown: each heading naming a table in
backticks (``## `[campaign]` ``) opens a section, and the backticked names in the first column
of its tables are the keys it documents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dse import ConfigError, _campaign, load_campaign
from dse._budget import BUDGET_KEYS, PRICE_KEYS, TRIAL_CEILING_KEYS
from dse._data import DATA_KEYS
from dse._pool import POOL_CAMPAIGN_KEYS, POOL_FILE_KEYS, POOL_KEYS, load_pool
from dse._space import PARAM_KEYS

DOC = Path(__file__).resolve().parents[2] / "docs" / "campaign.md"

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

[agent.random]
sampler = "sobol"

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
