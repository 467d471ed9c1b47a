"""``dse completion SHELL``: a shell completion script made from the ``dse`` parser itself,
so it completes exactly the subcommands, options and choices ``dse --help`` lists.

bash: subcommands, each subcommand's options, an option's choices (``--format``), directories
after a directory option and campaign files (``*.toml``) elsewhere; zsh runs the bash
script through ``bashcompinit``; fish gets ``complete`` lines with each item's help.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

    from dse.cli._argparse import DseParser

__all__ = ["SHELLS", "completion_script"]

SHELLS = ("bash", "zsh", "fish")
"""The shells ``dse completion`` writes a script for."""

_INSTALL = {
    "bash": "# bash: add to ~/.bashrc:   eval \"$(dse completion bash)\"",
    "zsh": "# zsh: add to ~/.zshrc:     eval \"$(dse completion zsh)\"",
    "fish": "# fish: dse completion fish > ~/.config/fish/completions/dse.fish",
}


def _options(parser: DseParser) -> Iterator[argparse.Action]:
    return (action for action in parser.arguments if action.option_strings)


def completion_script(parser: DseParser, shell: str) -> str:
    """The completion script of *parser* for *shell* (one of :data:`SHELLS`)."""
    if shell == "fish":
        return _fish(parser)
    script = _bash(parser)
    if shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    return f"{_INSTALL[shell]}\n{script}"


def _bash(parser: DseParser) -> str:
    subs = parser.commands
    top = " ".join([*subs, "--help", "--version"])
    cases, values = [], []
    for name, sub in subs.items():
        opts = " ".join(s for a in _options(sub) for s in a.option_strings)
        cases.append(f"        {name}) opts={shlex.quote(opts)} ;;")
        for action in _options(sub):
            if action.choices:
                words = shlex.quote(" ".join(map(str, action.choices)))
                for option in action.option_strings:
                    values.append(f"        {name}:{option}) COMPREPLY=($(compgen -W {words}"
                                  ' -- "$cur")); return ;;')
            else:
                # A path completes as one (a directory for --workspace); free text does not.
                what = ("-d" if action.dest == "workspace" else "-f") if action.type is Path \
                    else ""
                reply = f'($(compgen {what} -- "$cur"))' if what else "()"
                for option in action.option_strings:
                    if action.nargs != 0:
                        values.append(f"        {name}:{option}) COMPREPLY={reply}; return ;;")
    nl = "\n"
    return f"""_dse() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local cmd="${{COMP_WORDS[1]}}" opts=""
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "{top}" -- "$cur")); return
    fi
    case "$cmd:$prev" in
{nl.join(values)}
    esac
    case "$cmd" in
{nl.join(cases)}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur")); return
    fi
    COMPREPLY=($(compgen -f -X '!*.toml' -- "$cur") $(compgen -d -- "$cur"))
}}
complete -o filenames -F _dse dse
"""


def _fish(parser: DseParser) -> str:
    subs = parser.commands
    lines = [_INSTALL["fish"], "complete -c dse -f"]
    names = " ".join(subs)
    for name, sub in subs.items():
        lines.append(f"complete -c dse -n 'not __fish_seen_subcommand_from {names}' -a {name}"
                     f" -d {shlex.quote(parser.command_help[name])}")
        for action in _options(sub):
            flags = " ".join(f"-l {s[2:]}" if s.startswith("--") else f"-s {s[1:]}"
                             for s in action.option_strings)
            extra = ""
            if action.choices:
                extra = f" -x -a {shlex.quote(' '.join(map(str, action.choices)))}"
            elif action.type is Path:
                extra = " -r -F"
            elif action.nargs != 0:
                extra = " -x"
            lines.append(f"complete -c dse -n '__fish_seen_subcommand_from {name}' {flags}"
                         f"{extra} -d {shlex.quote(action.help or '')}")
    return "\n".join(lines) + "\n"
