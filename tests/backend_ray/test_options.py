"""The ``[backend.ray]`` table: what a mistake in it says (one line, naming file and key)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dse import ConfigError
from dse_ray import RayOptions, ray_options
from support.campaign_record import (
    sleepers,
)
from support.cli import run_dse
from support.ray_work import (
    project_with,
)


def test_the_table_is_read_with_durations_and_custom_resources() -> None:
    opts = ray_options({"address": "ray://head:10001", "grace": "3s", "linger": "2m",
                        "resources": {"tpu": 1}}, "c.toml")
    assert opts == RayOptions(address="ray://head:10001", grace=3.0, linger=120.0,
                              resources={"tpu": 1.0})


@pytest.mark.parametrize(("table", "said"), [
    ({"adress": "auto"}, "c.toml: backend.ray: unknown option(s) ['adress']"),
    ({"grace": "soon"}, "c.toml: backend.ray.grace"),
    ({"address": ""}, "c.toml: backend.ray.address: expected a non-empty string"),
    ({"resources": {"CPU": 2}}, "c.toml: backend.ray.resources: ['CPU'] come from"),
    ({"resources": {"tpu": -1}}, "c.toml: backend.ray.resources: expected a table"),
    ({"shared_filesystem": "no"}, "c.toml: backend.ray.shared_filesystem: expected true or"),
    ({"return_limit": "lots"}, "c.toml: backend.ray.return_limit: expected a size"),
    ({"return_limit": "-1MiB"}, "c.toml: backend.ray.return_limit: expected a size"),
    ({"return_limit": "inf"}, "c.toml: backend.ray.return_limit: expected a size"),
    ({"node_dir": "scratch"}, "c.toml: backend.ray.node_dir: expected an absolute path"),
    ({"working_dir": "app"}, "c.toml: backend.ray.working_dir: expected an absolute path"),
])
def test_a_bad_option_is_one_line_naming_the_key(table: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ray_options(table, "c.toml")
    assert str(caught.value).startswith(said), str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("given", "size"), [
    (1000, 1000), ("64MiB", 64 << 20), ("1.5 GB", 1_500_000_000), ("512k", 512 << 10),
    ("0", 0),
])
def test_the_return_limit_is_a_size(given: object, size: int) -> None:
    opts = ray_options({"shared_filesystem": False, "return_limit": given,
                        "node_dir": "/scratch/dse"}, "c.toml")
    assert (opts.shared_filesystem, opts.return_limit, opts.node_dir) == (
        False, size, "/scratch/dse")


def closed_port() -> int:
    """A port of this machine nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_address_nothing_answers_at_stops_the_run_in_one_line(tmp_path: Path) -> None:
    address = f"ray://127.0.0.1:{closed_port()}"
    project = project_with(tmp_path, "nowhere", address, sleepers(1, 0.0), parallelism=1)
    proc = run_dse(project, "run", "campaign.toml", timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "backend.ray" in line]
    assert len(lines) == 1, proc.stderr
    assert f"backend.ray.address: no Ray cluster answers at '{address}'" in lines[0]
    assert "Traceback" not in proc.stderr
