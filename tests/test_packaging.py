"""The five distributions are ready for the package index: installed from the wheels pip
builds, each shows a real description with links that work there, its authors, its license
(the file shipped too), its classifiers and the project's URLs.

The wheels are installed into a fresh virtual environment and read there with
``importlib.metadata``, as a user's environment (and the index, from the same fields) sees
them. ``nox -s packaging`` checks the same builds, sdists included, with ``twine check``.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest

from support.venv import REPO, run

DISTRIBUTIONS = {
    "dse-core": "core",
    "dse-agents": "agents",
    "dse-backend-local": "backend-local",
    "dse-backend-slurm": "backend-slurm",
    "dse-backend-ray": "backend-ray",
}
"""Distribution name -> its directory under ``packages/``."""

CLASSIFIERS = {
    "Development Status :: 3 - Alpha",
    "Intended Audience :: Developers",
    "Intended Audience :: Science/Research",
    "Operating System :: POSIX :: Linux",
    "Programming Language :: Python :: 3.11",
    "Programming Language :: Python :: 3.12",
    "Programming Language :: Python :: 3.13",
    "Topic :: Scientific/Engineering",
    "Topic :: System :: Distributed Computing",
    "Typing :: Typed",
}

URLS = {
    "Homepage": "https://github.com/dse-project/dse",
    "Documentation": "https://github.com/dse-project/dse/tree/main/docs",
    "Source": "https://github.com/dse-project/dse",
    "Issues": "https://github.com/dse-project/dse/issues",
}

_READ_METADATA = """
import importlib.metadata as md, json, sys

out = {}
for name in sys.argv[1:]:
    dist = md.distribution(name)
    meta = dist.metadata
    license_files = meta.get_all("License-File") or []
    out[name] = {
        "location": str(dist.locate_file("")),
        "summary": meta.get("Summary"),
        "author": meta.get("Author"),
        "license_expression": meta.get("License-Expression"),
        "license": meta.get("License"),
        "license_files": license_files,
        "license_texts": {f: dist.read_text("licenses/" + f) for f in license_files},
        "recorded": [str(f) for f in dist.files or []],
        "classifiers": meta.get_all("Classifier") or [],
        "urls": meta.get_all("Project-URL") or [],
        "content_type": meta.get("Description-Content-Type"),
        "description": meta.get_payload() or meta.get("Description") or "",
    }
print(json.dumps(out))
"""

pytestmark = [
    pytest.mark.slow,
    # The tests share one environment: keep them on one worker under `--dist loadgroup`.
    pytest.mark.xdist_group("packaging"),
]


@pytest.fixture(scope="module")
def metadata(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each distribution's metadata, read by ``importlib.metadata`` in a fresh venv where
    only the five wheels (built by pip from the sources) are installed."""
    root = tmp_path_factory.mktemp("packaging")
    wheels = root / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q",
         "--no-deps", "-w", str(wheels),
         *(str(REPO / "packages" / d) for d in DISTRIBUTIONS.values())], timeout=900)
    built = sorted(wheels.glob("*.whl"))
    assert len(built) == len(DISTRIBUTIONS), built
    venv = root / "venv"
    # --without-pip and this environment's pip driving the new one, as support.venv does.
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    # Without their dependencies: only the metadata is read, and nothing is imported.
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--disable-pip-version-check", "-q", "--no-deps", *map(str, built)], timeout=600)
    # -I: nothing from the environment or the working directory on the path.
    out = run([str(venv / "bin" / "python"), "-I", "-c", _READ_METADATA, *DISTRIBUTIONS],
              timeout=120, cwd=root)
    found: dict[str, dict[str, Any]] = json.loads(out)
    for name, fields in found.items():
        assert fields["location"].startswith(str(venv)), (name, fields["location"])
    return found


def _link_targets(markdown: str) -> list[str]:
    """Every link and image target of *markdown*, outside code (where nothing is a link)."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.DOTALL | re.MULTILINE)
    text = re.sub(r"`[^`\n]*`", "", text)
    inline = re.findall(r"\]\(\s*<?([^)\s>]+)", text)
    references = re.findall(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", text, flags=re.MULTILINE)
    html = re.findall(r"(?:href|src)\s*=\s*[\"']([^\"']+)", text)
    return inline + references + html


def test_link_targets_finds_what_the_index_would_render_as_a_link() -> None:
    markdown = (
        "See [the docs](../../docs/slurm.md) and ![plot](img/plot.png \"a plot\").\n"
        "[ref]: docs/guide.md\n"
        '<a href="https://example.org/a">a</a>\n'
        "`[not](a-link)` in code\n"
        "```\n[nor](this)\n```\n"
    )
    assert _link_targets(markdown) == [
        "../../docs/slurm.md", "img/plot.png", "docs/guide.md", "https://example.org/a",
    ]


def test_every_package_ships_an_identical_copy_of_the_license() -> None:
    # The build backend cannot reach ../../LICENSE from a package, so each has a copy.
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.lstrip().startswith("Apache License\n")
    assert "Version 2.0, January 2004" in license_text
    for directory in DISTRIBUTIONS.values():
        copy = REPO / "packages" / directory / "LICENSE"
        assert copy.read_text() == license_text, f"{copy} differs from LICENSE: copy it again"


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_summary_and_author(metadata: dict[str, dict[str, Any]], name: str) -> None:
    fields = metadata[name]
    summary = fields["summary"] or ""
    assert len(summary.split()) >= 5, summary
    assert "README" not in summary, summary
    assert fields["author"] == "The dse authors"


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_license_expression_and_the_license_file(
    metadata: dict[str, dict[str, Any]], name: str
) -> None:
    fields = metadata[name]
    assert (fields["license_expression"] or fields["license"]) == "Apache-2.0"
    assert fields["license_files"] == ["LICENSE"]
    assert fields["license_texts"]["LICENSE"] == (REPO / "LICENSE").read_text()
    dist_info = f"{name.replace('-', '_')}-"
    assert any(f.startswith(dist_info) and f.endswith(".dist-info/licenses/LICENSE")
               for f in fields["recorded"]), fields["recorded"]


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_classifiers(metadata: dict[str, dict[str, Any]], name: str) -> None:
    classifiers = set(metadata[name]["classifiers"])
    assert classifiers >= CLASSIFIERS, sorted(CLASSIFIERS - classifiers)
    # PEP 639 deprecates License :: classifiers beside a License-Expression (setuptools
    # refuses to build with both): the expression alone says the license.
    assert not [c for c in classifiers if c.startswith("License ::")]


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_project_urls(metadata: dict[str, dict[str, Any]], name: str) -> None:
    urls = dict(entry.split(", ", 1) for entry in metadata[name]["urls"])
    assert urls == URLS


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_description_is_markdown_whose_links_work_on_the_index(
    metadata: dict[str, dict[str, Any]], name: str
) -> None:
    fields = metadata[name]
    assert fields["content_type"] == "text/markdown"
    description: str = fields["description"]
    assert description.startswith(f"# {name}\n"), description[:200]
    assert "See the repository README" not in description
    installs = [line for line in description.splitlines() if line.startswith("pip install ")]
    assert any(name in line.split() for line in installs), installs
    targets = _link_targets(description)
    assert targets, "no links: the description should point to the repository and its docs"
    relative = [t for t in targets if not t.startswith("https://")]
    assert not relative, f"{name}: links that break on the index: {relative}"
