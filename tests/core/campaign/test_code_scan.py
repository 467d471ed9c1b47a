"""What counts as a workload's code and dependencies (docs/record.md), on real files and real
interpreters: the parts of a result's identity that say what exactly ran."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import dse
import dse.trial
from dse.campaign._code import CodeScan, CodeSpec
from dse.campaign._deps import Dependencies, command_words, detect_dependencies, environment_digest
from dse.model._digests import FileDigests


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def scan(root: Path, command: list[str], *, shell: bool = False, spec: CodeSpec | None = None,
         never: tuple[Path, ...] = ()) -> dict[str, str]:
    (root / ".dse").mkdir(exist_ok=True)
    found = CodeScan(root, spec=spec or CodeSpec(), never=(root / ".dse", *never),
                     cache_dir=root / ".dse").command(command, shell=shell, env={})
    return dict(found.files) if found is not None else {}


def test_the_script_its_imports_and_the_config_it_names_are_code(tmp_path: Path) -> None:
    tree(tmp_path, {
        "train.py": "import util\nfrom models import net\nfrom models.layers import dense\n"
                    "import numpy\n\ndef f():\n    import late\n",
        "util.py": "", "late.py": "", "models/__init__.py": "from . import registry\n",
        "models/net.py": "from .layers import dense\n", "models/layers/__init__.py": "",
        "models/layers/dense.py": "", "models/registry.py": "",
        "conf.yaml": "lr: 1", "out.log": "", "unrelated.py": "", "data.csv": "1,2",
    })
    files = scan(tmp_path, ["python", "-u", "train.py", "--config", "conf.yaml",
                            "--log=out.log", "--rows", "data.csv"])
    assert sorted(files) == [
        "conf.yaml", "late.py", "models/__init__.py", "models/layers/__init__.py",
        "models/layers/dense.py", "models/net.py", "models/registry.py", "train.py",
        "util.py"]


def test_a_module_a_shell_line_and_a_program_of_its_own(tmp_path: Path) -> None:
    tree(tmp_path, {"pkg/__init__.py": "", "pkg/run.py": "from pkg import helper\n",
                    "pkg/helper.py": "", "run.sh": "#!/bin/sh\necho\n"})
    assert sorted(scan(tmp_path, ["python", "-m", "pkg.run"])) == [
        "pkg/__init__.py", "pkg/helper.py", "pkg/run.py"]
    assert sorted(scan(tmp_path, ["cd . && OMP=1 python -m pkg.run {x}"], shell=True)) == [
        "pkg/__init__.py", "pkg/helper.py", "pkg/run.py"]
    (tmp_path / "run.sh").chmod(0o755)
    assert scan(tmp_path, ["./run.sh", "{x}"]) == {"run.sh": scan(tmp_path, ["./run.sh"])[
        "run.sh"]}
    assert scan(tmp_path, ["sleep", "1"]) == {}  # nothing of its own: no files: version


def test_declared_code_walks_what_it_names_and_never_what_is_not_code(tmp_path: Path) -> None:
    tree(tmp_path, {
        "src/a.py": "", "src/sub/b.py": "", "src/gen/c.py": "", "src/notes.log": "",
        "src/__pycache__/a.pyc": "", "src/.git/HEAD": "", "src/env/pyvenv.cfg": "",
        "src/env/lib/x.py": "", "src/data/big.bin": "", "top.cfg": "",
    })
    spec = CodeSpec(include=("src/", "*.cfg"), exclude=("*.log", "src/gen/"))
    files = scan(tmp_path, [], spec=spec, never=(tmp_path / "src" / "data",))
    assert sorted(files) == ["src/a.py", "src/sub/b.py", "top.cfg"]
    with pytest.raises(dse.ConfigError, match=r"environment.code\[0\]: 'nope/' matches no file"):
        scan(tmp_path, [], spec=CodeSpec(include=("nope/",)))


def test_an_unchanged_tree_is_not_read_again_and_an_edit_is_seen(
    tmp_path: Path, file_reads: list[str],
) -> None:
    tree(tmp_path, {f"src/m{i}.py": f"X = {i}\n" for i in range(50)})
    then = 1_600_000_000
    for path in (tmp_path / "src").iterdir():
        os.utime(path, (then, then))  # not modified within the racy two seconds
    read = file_reads
    spec = CodeSpec(include=("src/",))
    first = scan(tmp_path, [], spec=spec)
    assert len(read) == 50
    read.clear()
    assert scan(tmp_path, [], spec=spec) == first
    assert read == []
    (tmp_path / "src" / "m7.py").write_text("X = 'seven'\n")
    second = scan(tmp_path, [], spec=spec)
    assert read == ["m7.py"]
    assert {k for k in first if first[k] != second[k]} == {"src/m7.py"}


def test_no_cache_is_written_where_there_is_no_workspace_yet(tmp_path: Path) -> None:
    tree(tmp_path, {"t.py": ""})
    found = CodeScan(tmp_path, cache_dir=tmp_path / ".dse").command(
        ["python", "t.py"], shell=False, env={})
    assert found is not None
    assert found.version.startswith("files:")
    assert not (tmp_path / ".dse").exists()  # a refused campaign writes nothing


def test_shell_words_skip_assignments_wrappers_and_builtins() -> None:
    assert command_words(["env", "A=1", "python", "x.py"], False) == ["python", "x.py"]
    assert command_words(["cd sub; export A=1 && nice python x.py | tee log"], True) == [
        "python", "x.py"]
    assert command_words(["echo 'unbalanced"], True) == []


def test_a_python_programs_dependencies_are_what_its_trial_reports(tmp_path: Path) -> None:
    digests = FileDigests(tmp_path / "d.json")
    deps = detect_dependencies([sys.executable, "x.py"], shell=False, env={},
                               workdir=tmp_path, digests=digests)
    assert deps is not None
    assert deps.python is not None
    # What a trial reports, from a trial's own fresh interpreter: this test process may have
    # more on its sys.path (another test's import of setuptools puts its vendored packages
    # there, which then count as distributions).
    report = "import json, dse.trial; print(json.dumps(dse.trial.environment()))"
    reported = json.loads(subprocess.run([sys.executable, "-c", report], cwd=tmp_path,
                                         capture_output=True, text=True, timeout=120,
                                         check=True).stdout)
    assert deps.distributions == reported["distributions"]
    # The digest dse.trial.report() stamps on the trial (dse.engine._results), as the controller
    # saw it.
    assert deps.digest == environment_digest(
        {"python": reported["python"], "distributions": reported["distributions"]})


def test_another_programs_dependencies_are_its_content(tmp_path: Path) -> None:
    tool = tmp_path / "bin" / "tool"
    tree(tmp_path, {"bin/tool": "#!/bin/sh\necho one\n"})
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": str(tmp_path / "bin")}
    digests = FileDigests(tmp_path / "d.json")
    one = detect_dependencies(["tool"], shell=False, env=env, workdir=tmp_path, digests=digests)
    tool.write_text("#!/bin/sh\necho two\n")
    two = detect_dependencies(["tool"], shell=False, env=env, workdir=tmp_path, digests=digests)
    assert one is not None
    assert two is not None
    assert one.program == two.program == str(tool)
    assert one.python is None
    assert one.digest != two.digest
    assert detect_dependencies(["{prog}"], shell=False, env=env, workdir=tmp_path,
                               digests=digests) is None
    assert detect_dependencies(["no-such-program-here"], shell=False, env=env,
                               workdir=tmp_path, digests=digests) is None


def test_an_interpreters_answer_is_cached_until_its_path_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path / "cache"))
    site = tmp_path / "site"
    site.mkdir()
    env = {"PYTHONPATH": str(site)}
    digests = FileDigests(tmp_path / "d.json")

    def deps() -> Dependencies:
        found = detect_dependencies([sys.executable, "x.py"], shell=False, env=env,
                                    workdir=tmp_path, digests=digests)
        assert found is not None
        return found

    before = deps()
    cache = json.loads((tmp_path / "cache" / "environments.json").read_text())
    assert len(cache) == 1
    assert deps() == before
    # A distribution installed where the interpreter imports from: asked again.
    info = site / "fakedep-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakedep\nVersion: 1.0\n")
    after = deps()
    assert after.distributions["fakedep"] == "1.0"
    assert after.digest != before.digest


def test_the_interpreters_cache_keeps_the_latest_entries_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every test's temporary PYTHONPATH is another key: the cache must not grow without end
    # (every dse run reads it whole).
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("dse.campaign._deps._CACHE_ENTRIES", 2)
    digests = FileDigests(tmp_path / "d.json")

    def deps(name: str) -> Dependencies:
        site = tmp_path / name
        site.mkdir(exist_ok=True)
        found = detect_dependencies([sys.executable, "x.py"], shell=False,
                                    env={"PYTHONPATH": str(site)}, workdir=tmp_path,
                                    digests=digests)
        assert found is not None
        return found

    def kept() -> list[str]:
        cache = json.loads((tmp_path / "cache" / "environments.json").read_text())
        return [json.loads(k)[4]["PYTHONPATH"] for k in cache]

    deps("a")
    deps("b")
    deps("a")
    assert kept() == [str(tmp_path / "a"), str(tmp_path / "b")]
    deps("c")
    assert kept() == [str(tmp_path / "b"), str(tmp_path / "c")]


def test_the_probe_reads_every_installed_distribution_as_importlib_metadata_does() -> None:
    import importlib.metadata

    from dse._envprobe import _name_and_version, environment

    expected: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
        assert _name_and_version(text) == (dist.metadata["Name"], dist.version), dist
        if dist.metadata["Name"]:
            name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()  # PEP 503
            expected.setdefault(name, dist.version)
    assert len(expected) > 10  # dse, pytest, pluggy, rich... and their dependencies
    assert environment()["distributions"] == dict(sorted(expected.items()))


def test_the_probe_reads_the_headers_only() -> None:
    from dse._envprobe import _name_and_version

    text = ("Metadata-Version: 2.1\nName:  my_pkg \nSummary: a\n  continued: Version: 9\n"
            "Version: 1.0rc1\nName: other\n\nName: body\nVersion: 2\n")
    assert _name_and_version(text) == ("my_pkg", "1.0rc1")
    assert _name_and_version("") == (None, None)
    assert _name_and_version("Summary: x\n\nName: body\n") == (None, None)
