"""Reading a campaign file (UTF-8 TOML), and the two keys that say where its record is.

``dse status``, ``report`` and ``export`` given a campaign file need only its name and its
workspace: they read those here, without validating (nor importing what validates) the rest
of the campaign, which :func:`dse.campaign._campaign.load_campaign` does for ``dse run``.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dse.model._errors import ConfigError
from dse.model._numbers import INT64_MAX, out_of_range

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["RECORD_SCHEMES", "apply_overrides", "campaign_place", "check_name", "check_numbers",
           "read_campaign_file"]

RECORD_SCHEMES = ("postgresql://", "postgres://")
"""The URLs that name a record other than the workspace's SQLite file."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def check_name(name: object, where: str) -> str:
    """Refuse a campaign name that could escape its directory (``../x``, ``a/b``)."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise ConfigError(
            f"{where}: {name!r} is not a valid campaign name; expected 1-100 letters, digits,"
            " '.', '_' or '-' (no '/', no '..')"
        )
    return name


def read_campaign_file(path: Path) -> dict[str, Any]:
    """The parsed contents of the campaign file *path*.

    :raises ConfigError: it cannot be read, is not UTF-8 or is not TOML (the file named).
    """
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the campaign file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        msg = (f"{source}: line {line}: byte 0x{exc.object[exc.start]:02x} is not UTF-8; a"
               " campaign file is UTF-8 TOML")
        raise ConfigError(msg) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: malformed TOML: {exc}") from None
    except ValueError as exc:  # an integer of more digits than Python converts (4300)
        raise ConfigError(f"{source}: malformed TOML: {exc}") from None


def check_numbers(data: Mapping[str, Any], source: str) -> None:
    """Refuse the first number of *data* (a parsed campaign or pool file) the record could
    not keep: an integer beyond 64 bits (SQLite's), a NaN or an infinity (JSON has none);
    whatever key it is under, the plugins' tables too.

    :raises ConfigError: naming the file and the key (``space.x[0]``).
    """
    todo: list[tuple[str, Any]] = [("", data)]
    while todo:
        path, value = todo.pop()
        if isinstance(value, Mapping):
            items = reversed(list(value.items()))
            todo += [(f"{path}.{k}" if path else str(k), v) for k, v in items]
        elif isinstance(value, list):
            todo += [(f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value)))]
        elif out_of_range(value) is not None:
            shown = repr(value) if len(repr(value)) <= 30 else f"{repr(value)[:27]}..."
            expected = ("a finite number" if isinstance(value, float) else
                        f"an integer within 64 bits (-{INT64_MAX} to {INT64_MAX})")
            raise ConfigError(f"{source}: {path}: expected {expected}, got {shown}")


def apply_overrides(data: dict[str, Any], overrides: Sequence[str], source: str
                    ) -> dict[str, Any]:
    """*data* (a parsed campaign file) with each ``KEY=VALUE`` of *overrides* (``dse run
    --set``) applied in order, as if the file said it; *data* itself is left unchanged.

    ``KEY`` is a dotted path of tables (``environment.time_limit``, ``agent.bayesian.initial``,
    ``space.x.high``; a number picks an element of an array of tables: ``objectives.0.metric``);
    a key without a table is the ``[campaign]`` table's (``max_parallelism=4``). ``VALUE`` is a
    TOML value (``4``, ``true``, ``"10m"``, ``[1, 2]``, ``{ low = 1, high = 8 }``); anything
    that is not one is the string as typed (``agent=grid``, ``time_limit=10m``).

    :raises ConfigError: an override without ``=``, an empty key, or a path through a value
        that is not a table (named with the override).
    """
    out = copy.deepcopy(data)
    for override in overrides:
        key, eq, text = override.partition("=")
        where = f"{source}: --set {override}"
        path = [part.strip() for part in key.split(".")]
        if not eq or not all(path):
            raise ConfigError(f"{where}: expected KEY=VALUE (a dotted key such as"
                              " max_parallelism or environment.time_limit)")
        if len(path) == 1:
            path.insert(0, "campaign")
        node: Any = out
        for depth, part in enumerate(path[:-1]):
            node = _descend(node, part, ".".join(path[:depth + 1]), where)
        last = path[-1]
        if isinstance(node, list):
            node[_index(node, last, ".".join(path), where)] = _toml_value(text)
        else:
            node[last] = _toml_value(text)
    return out


def _descend(node: Any, part: str, at: str, where: str) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, at, where)]
    if not isinstance(node, dict):
        raise ConfigError(f"{where}: {at.rpartition('.')[0]} is not a table")
    child = node.setdefault(part, {})
    if not isinstance(child, dict | list):
        raise ConfigError(f"{where}: {at} is not a table (it is {child!r})")
    return child


def _index(node: list[Any], part: str, at: str, where: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"{where}: {at}: expected an index from 0 to {len(node) - 1}")
    return int(part)


def _toml_value(text: str) -> Any:
    """*text* read as a TOML value, or the string itself when it is not one."""
    try:
        return tomllib.loads(f"v = {text.strip()}")["v"]
    except (tomllib.TOMLDecodeError, ValueError):  # ValueError: over 4300 digits
        return text


def campaign_place(path: str | Path, *, workspace: str | Path | None = None
                   ) -> tuple[str, Path, str | None]:
    """The campaign name, the workspace and the record URL (``None``: the workspace's
    file) of the campaign file *path*, as :func:`dse.campaign._campaign.load_campaign`
    resolves them (the name defaults to the file's stem, the workspace to ``.dse`` beside the
    file; *workspace* overrides it), with the same errors about those keys; the rest of the
    file is not read."""
    path = Path(path)
    data = read_campaign_file(path)
    top = _entry(data, "campaign", dict, "a table", {}, f"{path}: ")
    where = f"{path}: campaign."
    name = _entry(top, "name", str, "a campaign name", path.stem, where)
    check_name(name, f"{path}: campaign.name")
    ws = _entry(top, "workspace", str, "a directory path", ".dse", where)
    record = _entry(top, "record", str, "a postgresql:// URL", "", where) or None
    # Absolute, as load_campaign makes it.
    return (name, (Path(workspace) if workspace is not None else path.parent / ws).resolve(),
            record)


def _entry(table: dict[str, Any], key: str, kind: type, expected: str, default: Any,
           prefix: str) -> Any:
    value = table.get(key, default)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ConfigError(f"{prefix}{key}: expected {expected}, got {value!r}")
    return value
