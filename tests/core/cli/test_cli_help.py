"""The command line people expect: help on every subcommand and option, "did you mean" for a
mistyped subcommand, option, choice, campaign key, plugin or option of a plugin, `--set`
overrides read as the campaign file would, `dse init`'s starter (every commented table valid
once uncommented) and shell completion that a real bash runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dse import ConfigError, PluginError, PluginManager, did_you_mean, load_campaign
from dse.campaign._campaignfile import apply_overrides
from dse.cli._argparse import DseParser
from dse.cli._cli import _parser
from dse.cli._completion import completion_script
from dse.cli._starter import write_starter
from support.cli import dse_env, write_plugin


def dse(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dse", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def subparsers() -> dict[str, DseParser]:
    return _parser().commands


def test_every_subcommand_and_every_option_has_help() -> None:
    subs = subparsers()
    assert {"init", "run", "status", "report", "plugins", "show", "invalidate", "export",
            "completion"} <= set(subs)
    top = _parser().format_help()
    for name, sub in subs.items():
        assert re.search(rf"^    {name}\s+\S", top, re.MULTILINE), f"{name} has no help"
        for action in sub.arguments:
            if action.option_strings == ["-h", "--help"]:
                continue
            what = "/".join(action.option_strings) or action.dest
            assert (action.help or "").strip(), f"dse {name} {what} has no help"


def test_did_you_mean_names_the_closest_known_name() -> None:
    assert did_you_mean(["max_paralelism"], ["max_parallelism", "mode"]) == (
        "; did you mean 'max_parallelism'?")
    assert did_you_mean(["zzz"], ["max_parallelism"]) == ""
    assert did_you_mean(["cpu", "grac"], ["cpus", "gpus", "grace"]) == (
        "; did you mean 'cpus' for 'cpu', 'grace' for 'grac'?")


@pytest.mark.parametrize(("args", "expected"), [
    (["rnu"], "invalid choice: 'rnu'"),
    (["run", "c.toml", "--fesh"], "unrecognized arguments: --fesh; did you mean '--fresh'?"),
    (["export", "x", "--format", "jsn"], "invalid choice: 'jsn'"),
    (["completion", "bsh"], "invalid choice: 'bsh'"),
])
def test_a_mistyped_command_option_or_choice_says_what_was_meant(
        tmp_path: Path, args: list[str], expected: str) -> None:
    proc = dse(tmp_path, *args)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert expected in last, last
    assert "did you mean" in last, last


@pytest.mark.parametrize(("edit", "expected"), [
    (("max_parallelism = 2", "max_paralelism = 2"),
     "unknown key(s) campaign.max_paralelism; did you mean 'max_parallelism'?"),
    (("\n[environment]\n", "\n[enviroment]\n"), "did you mean 'environment'?"),
    (('y = { type = "int", low = 1, high = 8 }', 'y = { type = "int", low = 1, hihg = 8 }'),
     "space.y: unknown key(s) ['hihg'] for a int parameter; did you mean 'high'?"),
    (("[campaign]", "[budget]\ntrails = 3\n\n[campaign]"), "did you mean 'trials'?"),
])
def test_a_mistyped_campaign_key_or_plugin_says_what_was_meant(
        tmp_path: Path, edit: tuple[str, str], expected: str) -> None:
    (campaign, _) = write_starter(tmp_path / "c.toml")
    text = campaign.read_text()
    assert edit[0] in text
    campaign.write_text(text.replace(edit[0], edit[1], 1))
    proc = dse(tmp_path, "run", "c.toml")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert expected in line, line
    assert not (tmp_path / ".dse").exists()  # refused before the workspace is touched


def test_a_mistyped_plugin_name_says_what_was_meant() -> None:
    # The probe backend and the stopping rules come with dse-core alone.
    plugins = PluginManager()
    with pytest.raises(PluginError, match=r"unknown backend 'prob'; installed backends: .*"
                                          r"; did you mean 'probe'\?$"):
        plugins.backend_class("prob")
    with pytest.raises(PluginError, match=r"; did you mean 'asha'\?$"):
        plugins.stopping_rule_class("ashaa")


def test_set_reads_keys_and_values_as_the_campaign_file_would() -> None:
    data = {"campaign": {"name": "c"}, "objectives": [{"metric": "a"}],
            "environment": {"time_limit": "30s"}}
    out = apply_overrides(data, [
        "max_parallelism=4", "agent=grid", "environment.time_limit=10m",
        "agent.bayesian.initial=8", "objectives.0.metric=b", "space.x={ low = 1, high = 4,"
        " type = \"int\" }", "budget.trials=20", "campaign.seed = 7", "environment.shell=true",
        'campaign.constraints=["x > 1"]'], "c.toml")
    assert out["campaign"] == {"name": "c", "max_parallelism": 4, "agent": "grid", "seed": 7,
                               "constraints": ["x > 1"]}
    assert out["environment"] == {"time_limit": "10m", "shell": True}
    assert out["agent"] == {"bayesian": {"initial": 8}}
    assert out["objectives"] == [{"metric": "b"}]
    assert out["space"] == {"x": {"low": 1, "high": 4, "type": "int"}}
    assert out["budget"] == {"trials": 20}
    assert data["campaign"] == {"name": "c"}  # the file's data is left as read


@pytest.mark.parametrize(("override", "expected"), [
    ("max_parallelism", "--set max_parallelism: expected KEY=VALUE"),
    ("=4", "--set =4: expected KEY=VALUE"),
    ("environment.time_limit.x=1", "environment.time_limit is not a table"),
    ("objectives.3.metric=b", "objectives.3: expected an index from 0 to 0"),
])
def test_a_malformed_set_is_one_line_naming_it(override: str, expected: str) -> None:
    data = {"campaign": {}, "objectives": [{"metric": "a"}], "environment": {"time_limit": 1}}
    with pytest.raises(ConfigError, match=re.escape(expected)):
        apply_overrides(data, [override], "c.toml")


def test_a_set_the_campaign_refuses_is_named_with_the_error(tmp_path: Path) -> None:
    (campaign, _) = write_starter(tmp_path / "c.toml")
    with pytest.raises(ConfigError) as exc:
        load_campaign(campaign, overrides=["max_parallelism=0"])
    assert str(exc.value) == (f"{campaign}: campaign.max_parallelism: expected a positive"
                              " integer, got 0 (with --set max_parallelism=0)")
    loaded = load_campaign(campaign, overrides=["max_parallelism=4", "mode=waves"])
    assert (loaded.max_parallelism, loaded.mode) == (4, "waves")
    assert loaded.overrides == ("max_parallelism=4", "mode=waves")


def test_the_starter_runs_as_written_and_every_commented_table_is_valid(tmp_path: Path) -> None:
    written = write_starter(tmp_path / "study.toml", agent="bayesian")
    assert [p.name for p in written] == ["study.toml", "trial.py"]
    campaign = load_campaign(written[0])
    assert (campaign.name, campaign.agent, campaign.backend) == ("study", "bayesian", "local")
    assert [p.name for p in campaign.space] == ["x", "y", "kind"]
    # Uncomment each optional table (not Slurm's: another distribution) and load again.
    text = written[0].read_text()
    blocks = re.findall(r"^# \[(budget|data|stopping|agent\.bayesian)\]\n((?:# .*\n)+)", text,
                        re.MULTILINE)
    assert {name for name, _ in blocks} == {"budget", "data", "stopping", "agent.bayesian"}
    (tmp_path / "data").mkdir()
    for name, body in blocks:
        lines = [line[2:].split("  #")[0] for line in body.splitlines()]
        edited = text + f"\n[{name}]\n" + "\n".join(lines) + "\n"
        (tmp_path / "edited.toml").write_text(edited)
        loaded = load_campaign(tmp_path / "edited.toml")
        assert loaded.name == "study"
    assert load_campaign(tmp_path / "edited.toml").agent_options == {"initial": 8}


def test_init_writes_nothing_over_a_file(tmp_path: Path) -> None:
    (tmp_path / "trial.py").write_text("mine\n")
    proc = dse(tmp_path, "init")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "dse: error: trial.py: already exists; dse init writes nothing over a file (--force"
        " replaces it)")
    assert not (tmp_path / "campaign.toml").exists()
    assert (tmp_path / "trial.py").read_text() == "mine\n"
    # Plugins dse-core alone has (the test plugin's agent, the probe): the starter names only
    # installed ones.
    write_plugin(tmp_path)
    forced = subprocess.run([sys.executable, "-m", "dse", "init", "--force", "--name", "mine",
                             "--agent", "list", "--backend", "probe"], cwd=tmp_path,
                            env=dse_env(tmp_path),
                            capture_output=True, text=True, timeout=60, check=False)
    assert forced.returncode == 0, forced.stderr
    assert 'name = "mine"' in (tmp_path / "campaign.toml").read_text()
    assert "trial.report" in (tmp_path / "trial.py").read_text()


def complete(tmp_path: Path, words: list[str]) -> list[str]:
    script = tmp_path / "dse.bash"
    script.write_text(dse(tmp_path, "completion", "bash").stdout)
    line = " ".join(f"'{w}'" for w in words)
    code = (f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _dse;"
            ' printf "%s\\n" "${COMPREPLY[@]}"')
    proc = subprocess.run(["bash", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=30, check=True)
    return sorted(proc.stdout.split())


def test_bash_completes_subcommands_options_choices_and_campaign_files(tmp_path: Path) -> None:
    (tmp_path / "study.toml").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "ws").mkdir()
    assert complete(tmp_path, ["dse", "r"]) == ["record", "report", "run"]
    assert complete(tmp_path, ["dse", "run", "--f"]) == ["--fresh"]
    assert complete(tmp_path, ["dse", "run", "--s"]) == ["--set"]
    assert complete(tmp_path, ["dse", "export", "x", "--format", "j"]) == ["json", "jsonl"]
    assert complete(tmp_path, ["dse", "run", ""]) == ["study.toml", "ws"]
    assert complete(tmp_path, ["dse", "status", "--workspace", ""]) == ["ws"]
    assert complete(tmp_path, ["dse", "run", "--set", ""]) == []


def test_zsh_and_fish_scripts_are_made_from_the_same_parser() -> None:
    parser = _parser()
    zsh = completion_script(parser, "zsh")
    assert "bashcompinit" in zsh
    assert "complete -o filenames -F _dse dse" in zsh
    fish = completion_script(parser, "fish")
    assert "-a run -d 'run a campaign file (or several sharing one pool)'" in fish
    assert "__fish_seen_subcommand_from export' -l format -x -a 'csv json jsonl trajectory'" \
        in fish
