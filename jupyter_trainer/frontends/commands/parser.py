"""The parser every command of ``jupyter-trainer`` and ``%train`` is defined on, and how a
command's parser names what runs it.

A command's leaf parser names its function with ``handles`` (a function that writes the
command's text to a stream and returns an exit code) or ``starts`` (a function that starts a
run or a sweep; each front end follows what it started its own way: the CLI on stderr, the
magic with its monitor)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeAlias

from ...core.errors import SpecError
from .options import OptionParser, explain

if TYPE_CHECKING:
    from ...api.dry_run import DryRun
    from ...api.runs import Run
    from ...api.sweeps.handle import Sweep

    Started: TypeAlias = Run | Sweep | DryRun

Handler: TypeAlias = Callable[[argparse.Namespace, TextIO], int]
Starter: TypeAlias = Callable[[argparse.Namespace], "Started"]


class CommandParser(OptionParser):
    """A subcommand's parser: an error is one line that says how to see the options.

    ``word_checks`` maps a positional's ``dest`` to a check of the word given for it: a
    word that starts with '-' and is no option of the command is put to the check of the
    positional whose place it takes, so ``register RUN -m x.pt`` says what is wrong with the
    name ``-m`` instead of argparse's "the following arguments are required: path"."""

    word_checks: dict[str, Callable[[str], object]] = {}

    def error(self, message: str) -> NoReturn:
        self.fail(message)

    def fail(self, message: str, noun: str | None = None) -> NoReturn:
        """Raise argparse's ``message`` as one line (``explain``); ``noun`` is the command
        the words began with, when this is the parser of all commands."""
        raise SpecError(
            f"{self.command_prefix()}{explain(self, message, noun)} "
            "(add --help to see every option)"
        )

    def command_prefix(self) -> str:
        command = self.prog.partition(" ")[2]  # "runs" of "jupyter-trainer runs" or "%train runs"
        return f"{command}: " if command else ""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if args is not None and self.word_checks:
            self._check_dashed_words(list(args))
        return super().parse_known_args(args, namespace)

    def _check_dashed_words(self, words: list[str]) -> None:
        places = [a for a in self._actions if not a.option_strings]
        given, skip = 0, False
        for word in words:
            if skip:
                skip = False
                continue
            if (
                word in ("-h", "--help")
                or not word.startswith("-")
                or word == "-"
                or self._negative_number_matcher.match(word)
            ):
                given += 1
                continue
            flag = word.partition("=")[0]
            known = [o for o in self._option_string_actions if o == flag] or [
                o for o in self._option_string_actions if o.startswith(flag) and len(flag) > 2
            ]
            if len(known) == 1:
                skip = "=" not in word and self._option_string_actions[known[0]].nargs is None
                continue
            check = self.word_checks.get(places[given].dest) if given < len(places) else None
            if check is not None:
                try:
                    check(word)
                except SpecError as exc:
                    raise SpecError(f"{self.command_prefix()}{exc}") from None


# What ``add_subparsers(parser_class=CommandParser)`` returns: where a command's parser goes.
Subparsers: TypeAlias = "argparse._SubParsersAction[CommandParser]"


def verbs(parser: argparse.ArgumentParser, *, required: bool) -> Subparsers:
    """The verbs of a noun (``sweep show``, ``models delete``): its subcommands, named in
    ``args.action``."""
    return parser.add_subparsers(
        dest="action", required=required, metavar="VERB", parser_class=CommandParser
    )


def handles(parser: argparse.ArgumentParser, handler: Handler) -> None:
    """``handler`` runs the command that ``parser`` parsed."""
    parser.set_defaults(handler=handler, starter=None)


def starts(parser: argparse.ArgumentParser, starter: Starter) -> None:
    """``starter`` starts the run or sweep that the command ``parser`` parsed asks for."""
    parser.set_defaults(handler=None, starter=starter)


def at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of at least ``low``."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    return whole


def add_wait_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--wait`` / ``--no-wait`` of a command that starts ``what`` ("run" or "sweep"); left
    out, each front end does what it always does (the CLI returns, the magic follows)."""
    wait = parser.add_mutually_exclusive_group()
    wait.add_argument(
        "--wait",
        action="store_true",
        default=None,
        help=f"follow the new {what} to its end (the default of %%train); fail if it fails",
    )
    wait.add_argument(
        "--no-wait",
        dest="wait",
        action="store_false",
        help=f"return once the new {what} has started (the default of jupyter-trainer)",
    )


def origin_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``origin=`` of a new run or sweep, when the front end gave one (``start_command``)."""
    origin = getattr(args, "origin", None)
    return {"origin": origin} if origin else {}
