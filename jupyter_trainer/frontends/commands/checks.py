"""The checks of positional words that start with '-' (``CommandParser.word_checks``), for
the commands of run files and models.

A word that starts with '-' where a model name, a run id or a path goes is taken by the
shell's conventions for an option; these commands say what is wrong with it as that
positional rather than which positional is missing."""

from __future__ import annotations

from collections.abc import Callable

from ...core.errors import SpecError
from ...core.spec import validate_run_id
from ...store.models import parse_ref, validate_model_name
from .parser import CommandParser


def _dashed_path(what: str) -> Callable[[str], None]:
    def check(word: str) -> None:
        raise SpecError(
            f"{word!r} is taken for an option; give {what} that starts with '-' as ./{word}"
        )

    return check


WORD_CHECKS: dict[str, Callable[[str], object]] = {
    "run": validate_run_id,
    "name": validate_model_name,
    "model": parse_ref,
    "path": _dashed_path("a path"),
    "dest": _dashed_path("a folder"),
    "pattern": _dashed_path("a pattern"),
}


def checked(parser: CommandParser) -> CommandParser:
    """``parser``, its positionals' dashed words checked as ``WORD_CHECKS`` says."""
    parser.word_checks = WORD_CHECKS
    return parser


def count(n: int, word: str) -> str:
    """``n word`` or ``n words``."""
    return f"{n} {word}" + ("" if n == 1 else "s")
