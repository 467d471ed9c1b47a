"""The parser class of the ``dse`` command: argparse's, keeping what it was given (its
arguments, subcommands and their help) where completion and "did you mean" can read it, and
saying "did you mean" for a mistyped subcommand or choice."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any, NoReturn

from dse.model._errors import did_you_mean

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["DseParser"]


class DseParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` that records its arguments (:attr:`arguments`),
    its subcommands (:attr:`commands`, with :attr:`command_help`) and whose errors name the
    closest choice."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.arguments: list[argparse.Action] = []
        """Every argument added (``-h`` included), in order, groups' too."""
        self.commands: dict[str, DseParser] = {}
        """The subcommands' parsers, by name (:meth:`subcommands`)."""
        self.command_help: dict[str, str] = {}
        """Each subcommand's one-line help."""
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.arguments.append(action)
        return action

    def add_mutually_exclusive_group(self, **kwargs: Any) -> Any:
        group = super().add_mutually_exclusive_group(**kwargs)
        add = group.add_argument

        def recorded(*args: Any, **kw: Any) -> argparse.Action:
            action = add(*args, **kw)
            self.arguments.append(action)
            return action

        group.add_argument = recorded  # type: ignore[method-assign]
        return group

    def subcommands(self, **kwargs: Any) -> Callable[..., DseParser]:
        """Add the subcommands' action; return what adds one (``add(name, help=...,
        ...)``), recording it."""
        action = self.add_subparsers(**kwargs)

        def add(name: str, **kw: Any) -> DseParser:
            parser: DseParser = action.add_parser(name, **kw)
            self.commands[name] = parser
            self.command_help[name] = str(kw.get("help") or "")
            return parser

        return add

    def options(self, command: str | None = None) -> list[str]:
        """The option strings of *command*'s parser (of this one without it)."""
        parser = self.commands.get(command or "", self)
        return [s for action in parser.arguments for s in action.option_strings]

    def error(self, message: str) -> NoReturn:
        invalid = re.match(r"argument .*: invalid choice: '([^']*)' \(choose from (.*)\)$",
                           message)
        if invalid is not None:
            choices = re.findall(r"'([^']*)'", invalid.group(2))
            message += did_you_mean([invalid.group(1)], choices)
        super().error(message)
