"""What exactly ran is part of a result's identity: the code and the dependencies (issue 36).

Real `dse run` processes on the local backend, in plain directories (no git: where `dse init`
and the guide lead a newcomer). A result is reused only while the workload's code — its
script, the modules it imports, the files it names — and the Python environment it runs in
are what they were when it was measured; `dse show` says what ran for a cache hit too, and
what differed when a result was not reused.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import dse
from support.cli import last_run, run_dse, write_plugin

DOCS = Path(__file__).resolve().parents[2] / "docs" / "record.md"

CAMPAIGN = """
[campaign]
name = "ident"
agent = "grid"
max_parallelism = 2

[environment]
command = [{command}]
time_limit = "60s"

[[objectives]]
metric = "loss"

[space]
x = [1, 2, 3]
"""

TRIAL = """
import json, os
{imports}
with open(os.environ["DSE_PARAMS_FILE"]) as f:
    x = json.load(f)["x"]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs.log"), "a") as log:
    log.write("%d\\n" % x)
loss = {loss}
path = os.path.join(os.environ["DSE_TRIAL_DIR"], "result.json")
with open(path + ".tmp", "w") as f:
    json.dump({{"metrics": {{"loss": loss}}, "complete": True}}, f)
os.replace(path + ".tmp", path)
"""
"""A trial that needs no dse installed (it runs in venvs without it), writing result.json
as the trial contract says."""


def project(where: Path, *, command: str = '"python", "trial.py"', imports: str = "",
            loss: str = "float(x)") -> Path:
    where.mkdir(parents=True, exist_ok=True)
    write_plugin(where)  # run_dse loads it; never the workload's code (nothing imports it)
    (where / "campaign.toml").write_text(CAMPAIGN.format(command=command))
    (where / "trial.py").write_text(TRIAL.format(imports=imports, loss=loss))
    return where


def run(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run_dse(where, "run", "campaign.toml", *args, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return proc


def runs(where: Path) -> int:
    log = where / "runs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def show(where: Path, trial: str) -> tuple[dict[str, Any], str]:
    doc = run_dse(where, "show", trial, "--json")
    assert doc.returncode == 0, doc.stderr
    text = run_dse(where, "show", trial)
    assert text.returncode == 0, text.stderr
    return json.loads(doc.stdout), text.stdout


def test_nothing_changed_reuses_every_configuration(tmp_path: Path) -> None:
    where = project(tmp_path)
    run(where)
    assert last_run(where) == {"completed": 3}
    run(where)
    assert last_run(where) == {"cached": 3}
    assert runs(where) == 3


def test_an_edited_script_is_measured_again(tmp_path: Path) -> None:
    where = project(tmp_path)
    run(where)
    project(where, loss="42.0")
    run(where)
    assert last_run(where) == {"completed": 3}
    assert runs(where) == 6
    doc, text = show(where, "ident:1")
    assert doc["run"]["code_version"].startswith("files:")
    assert "trial.py changed" in doc["run"]["not_reused"], doc["run"]["not_reused"]
    assert re.search(r"not reused +trial 1 of run 1 measured these params; code version"
                     r" differs: files:\w+ → files:\w+ \(trial.py changed\)", text), text


def test_an_edited_imported_module_is_measured_again(tmp_path: Path) -> None:
    where = project(tmp_path, imports="from lib import helper\nimport lib.scale as scale",
                    loss="helper.f(x) * scale.K")
    (where / "lib").mkdir()
    (where / "lib" / "__init__.py").write_text("")
    (where / "lib" / "helper.py").write_text("def f(x):\n    return x + 1.0\n")
    (where / "lib" / "scale.py").write_text("K = 1.0\n")
    # Beside the code, never code: a log the trial writes, a cache, a big data file.
    (where / "__pycache__").mkdir()
    (where / "__pycache__" / "junk.pyc").write_bytes(b"x")
    run(where)
    doc, _ = show(where, "ident:1")
    assert sorted(doc["run"]["code_files"]) == [
        "lib/__init__.py", "lib/helper.py", "lib/scale.py", "trial.py"]
    run(where)
    assert last_run(where) == {"cached": 3}
    (where / "lib" / "scale.py").write_text("K = 2.0\n")
    run(where)
    assert last_run(where) == {"completed": 3}
    assert runs(where) == 6
    doc, _ = show(where, "ident:2")
    assert "lib/scale.py changed" in doc["run"]["not_reused"]


def test_declared_code_and_its_excludes_are_part_of_the_identity(tmp_path: Path) -> None:
    where = project(tmp_path)
    text = (where / "campaign.toml").read_text().replace(
        'time_limit = "60s"', 'time_limit = "60s"\ncode = ["conf/"]\ncode_exclude = ["*.log"]')
    (where / "campaign.toml").write_text(text)
    (where / "conf").mkdir()
    (where / "conf" / "model.txt").write_text("depth 3")
    (where / "conf" / "notes.log").write_text("a")
    run(where)
    (where / "conf" / "notes.log").write_text("b")  # excluded: still the same code
    run(where)
    assert last_run(where) == {"cached": 3}
    (where / "conf" / "model.txt").write_text("depth 4")
    run(where)
    assert last_run(where) == {"completed": 3}
    (where / "campaign.toml").write_text(text.replace('"conf/"', '"nothing/"'))
    proc = run_dse(where, "run", "campaign.toml", timeout=60)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "environment.code[0]: 'nothing/' matches no file" in line, line


def test_a_large_file_beside_the_code_is_never_read(tmp_path: Path) -> None:
    where = project(tmp_path)
    with (where / "dataset.bin").open("wb") as handle:
        handle.truncate(300 * 1024 * 1024)  # 300 MB beside the code, never named
    run(where)
    run(where)
    assert last_run(where) == {"cached": 3}
    digests = json.loads((where / ".dse" / "code-digests.json").read_text())
    assert sorted(Path(name).name for name in digests) == ["trial.py"]


def test_a_dependency_changed_in_the_workloads_own_venv_is_measured_again(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))

    def install(version: str) -> None:
        for old in site.glob("fakedep-*.dist-info"):
            for file in old.iterdir():
                file.unlink()
            old.rmdir()
        info = site / f"fakedep-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakedep\n"
                                       f"Version: {version}\n")

    install("1.0")
    where = project(tmp_path, command='"venv/bin/python", "trial.py"')
    run(where)
    run(where)
    assert last_run(where) == {"cached": 3}
    install("1.1")
    run(where)
    assert last_run(where) == {"completed": 3}
    assert runs(where) == 6
    doc, text = show(where, "ident:1")
    dispatched = doc["run"]["dispatched_dependencies"]
    assert dispatched["program"] == str(venv / "bin" / "python")
    assert dispatched["digest"].startswith("sha256:")
    assert doc["run"]["dependencies"]["distributions"]["fakedep"] == "1.1"
    assert doc["run"]["dependencies"]["source"] == "dispatch"  # the trial reported none
    assert "dependencies differ: fakedep 1.0 → 1.1" in doc["run"]["not_reused"]
    assert "dependencies differ: fakedep 1.0 → 1.1" in text


def test_show_of_a_cache_hit_answers_what_ran(tmp_path: Path) -> None:
    where = project(tmp_path, imports="import dse.trial")
    (where / "trial.py").write_text(
        "import dse.trial\n"
        "dse.trial.report({'loss': float(dse.trial.params()['x'])})\n")
    run(where)
    run(where)
    measured, _ = show(where, "1:2")
    cached, text = show(where, "2:2")
    assert cached["ended"]["outcome"] == "cached"
    assert cached["run"]["code_version"] == measured["run"]["code_version"]
    assert cached["run"]["code_version"].startswith("files:")
    assert cached["run"]["code_files"] == {"trial.py": measured["run"]["code_files"]["trial.py"]}
    # The trial reported the environment it ran in; the controller found the same before
    # dispatch; the cache hit shows the one of the result it reuses.
    reported = measured["run"]["dependencies"]
    assert reported["source"] == "trial"
    assert reported["distributions"]["dse-core"] == dse.__version__
    assert measured["run"]["dispatched_dependencies"]["digest"] == reported["digest"]
    assert cached["run"]["dependencies"] == {**reported, "source": "reused"}
    assert re.search(r"code version +files:\w+ \(1 file: trial.py\)", text), text
    assert re.search(r"dependencies +sha256:\w+ \(python [\d.]+, \d+ distributions; .+\);"
                     r" the result it reuses reported the same", text), text


GUIDE_TRAIN = '''
import dse.trial

p = dse.trial.params()
val_loss = train(lr=p["lr"], layers=p["layers"], optimizer=p["optimizer"])
dse.trial.report({"val_loss": val_loss})
'''


def test_the_guides_first_campaign_fixed_after_failing_is_measured_again(
    tmp_path: Path,
) -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guide.md").read_text()
    toml = guide[guide.index("# campaign.toml"):]
    toml = toml[:toml.index("```")]
    assert GUIDE_TRAIN.strip().splitlines()[-1] in guide  # the guide's own train.py
    (tmp_path / "campaign.toml").write_text(toml.replace('time_limit = "5m"',
                                                         'time_limit = "60s"'))
    (tmp_path / "train.py").write_text(GUIDE_TRAIN)
    write_plugin(tmp_path)
    failed = run_dse(tmp_path, "run", "campaign.toml", timeout=180)
    assert failed.returncode == dse.ExitCode.NO_RESULT, failed.stderr
    # train is not defined: stopped after 10 failures in a row (max_consecutive_failures)
    assert last_run(tmp_path) == {"failed": 10}
    (tmp_path / "train.py").write_text(
        "def train(lr, layers, optimizer):\n    return lr * layers\n" + GUIDE_TRAIN)
    run(tmp_path)
    assert last_run(tmp_path) == {"completed": 20}


def test_results_without_a_digest_are_not_reused_and_the_run_says_so_once(
    tmp_path: Path,
) -> None:
    where = project(tmp_path)
    run(where)
    # What a record of an earlier release holds: a run whose spec has neither a code
    # version (there was no git) nor a dependency digest, its trials hashed without them.
    db = sqlite3.connect(where / ".dse" / "dse.sqlite")
    try:
        (spec,) = db.execute("SELECT spec FROM campaigns WHERE id = 1").fetchone()
        spec = json.loads(spec)
        for key in ("code_files", "dependencies"):
            spec["environment"].pop(key)
        spec["environment"]["code_version"] = None
        db.execute("UPDATE campaigns SET spec = ? WHERE id = 1", (json.dumps(spec),))
        db.execute("UPDATE trials SET config_hash = 'v-old-' || config_hash")
        db.commit()
    finally:
        db.close()
    proc = run(where)
    assert last_run(where) == {"completed": 3}
    said = [line for line in proc.stderr.splitlines() if "earlier runs were recorded" in line]
    assert len(said) == 1, proc.stderr
    assert ("3 result(s) of earlier runs were recorded without a code version or dependency"
            " digest: shown and exported, never reused") in said[0]
    proc = run(where)
    assert last_run(where) == {"cached": 3}
    assert "earlier runs were recorded" not in proc.stderr


def test_the_identity_table_is_the_code_both_ways(tmp_path: Path) -> None:
    where = project(tmp_path)
    campaign = dse.load_campaign(where / "campaign.toml")
    engine = dse.build_engine(campaign, store=dse.Store(where / "x.sqlite", connect=False))
    try:
        identity = engine.identity()
    finally:
        engine.backend.shutdown()  # type: ignore[attr-defined]
    hashed = {*identity, "params", "data_version"}
    text = DOCS.read_text()
    section = text[text.index("## The identity of a result"):text.index("**Which ends are")]
    documented = set(re.findall(r"^\| [^|]+ \| `([a-z_]+)` \|", section, flags=re.MULTILINE))
    assert documented == hashed
    # The dependencies are in it because the command's Python was found and asked.
    assert str(identity["dependencies"]).startswith("sha256:")
    assert str(identity["code_version"]).startswith("files:")
    assert os.path.isfile(str(campaign.environment.dependencies.program))  # type: ignore[union-attr]


def test_failures_of_a_wrong_workdir_are_not_reused_once_it_is_fixed(tmp_path: Path) -> None:
    write_plugin(tmp_path)
    (tmp_path / "right").mkdir()
    (tmp_path / "wrong").mkdir()
    (tmp_path / "right" / "trial.py").write_text(TRIAL.format(imports="", loss="x * 1.0"))
    text = CAMPAIGN.format(command=f'"{sys.executable}", "trial.py"')
    campaign = tmp_path / "c.toml"
    campaign.write_text(text.replace("time_limit", 'workdir = "wrong"\ntime_limit'))
    failed = run_dse(tmp_path, "run", "c.toml", timeout=120)  # no trial.py there: exit 2 each
    assert failed.returncode == 4, failed.stderr
    assert last_run(tmp_path)["failed"] == 3, failed.stderr
    campaign.write_text(text.replace("time_limit", 'workdir = "right"\ntime_limit'))
    fixed = run_dse(tmp_path, "run", "c.toml", timeout=120)
    assert fixed.returncode == 0, fixed.stderr
    assert last_run(tmp_path) == {"completed": 3}, fixed.stderr
    assert sorted((tmp_path / "right" / "runs.log").read_text().split()) == ["1", "2", "3"]
