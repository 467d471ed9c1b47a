"""Reading a W&B run as its own files keep it: the ``.wandb`` transaction log an offline run
writes (what ``wandb sync`` uploads), so the tests see what W&B would receive without a server.

The file is ``:W&B`` and three header bytes, then records in LevelDB's log format: 32 KiB
blocks, each record a 7-byte header (CRC32 u32, length u16, type u8: 1 full, 2 first, 3
middle, 4 last piece) and its bytes; a block's tail too short for a header is padding. Each
record is a ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wandb.proto import wandb_internal_pb2

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def chunks(data: bytes) -> Iterator[bytes]:
    """The records' bytes in a ``.wandb`` file's contents *data*, pieces joined."""
    assert data[:4] == b":W&B", data[:7]
    pos, pieces = 7, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if length == 0 and kind == 0:  # zeroes to the end of the block
            pos += left
            continue
        piece = data[pos + HEADER:pos + HEADER + length]
        assert len(piece) == length, f"record cut short at {pos}"
        assert zlib.crc32(bytes([kind]) + piece) == crc, f"bad checksum at {pos}"
        pos += HEADER + length
        if kind == FULL:
            yield piece
        elif kind == FIRST:
            pieces = piece
        elif kind == MIDDLE:
            pieces += piece
        else:
            yield pieces + piece
            pieces = b""


def records(path: Path) -> Iterator[Any]:
    """The ``Record`` messages of the ``.wandb`` file *path*, in order."""
    for chunk in chunks(path.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk)
        yield record


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


@dataclass
class WandbRun:
    """One run as its ``.wandb`` file tells it."""

    run_id: str = ""
    name: str = ""
    project: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None


def read_run(directory: Path) -> WandbRun:
    """The run whose directory (``offline-run-<time>-<id>``) is *directory*: its run record
    (W&B's own ``_wandb`` config left out), its history rows, its summary once every update
    is applied, and its exit code (``None``: never finished)."""
    (path,) = directory.glob("run-*.wandb")
    run = WandbRun()
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.run_id, run.name, run.project = r.run_id, r.display_name, r.project
            run.group, run.job_type, run.tags = r.run_group, r.job_type, list(r.tags)
            run.config.update({_key(c): json.loads(c.value_json) for c in r.config.update})
            run.config.pop("_wandb", None)
        elif kind == "history":
            run.history.append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            run.summary.update({_key(i): json.loads(i.value_json)
                                for i in record.summary.update})
            for item in record.summary.remove:
                run.summary.pop(_key(item), None)
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run
