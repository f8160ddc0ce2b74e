"""The command table of ``jupyter-trainer`` and ``%train``: every command, once.

``COMMANDS`` maps each command the user types first (a noun, or a verb on a run) to the
function that defines its parser; nouns with verbs (``sweep show``, ``models delete``, ``env
build``, ``target add``) define them as argparse subcommands. Each leaf parser names the
function that runs it (``parser.handles``) or starts what it asks for (``parser.starts``).
``ALIASES`` keeps the spellings of earlier releases working without showing them in
``--help``. Both front ends build their parser with ``add_commands`` and parse with
``parse_command``; their help is generated from these parsers, so it is never written twice.
Bad input raises ``SpecError`` (a one-line message); the CLI prints it and exits 2, the
magic shows it without leaving the kernel.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from .azure import define_azure
from .azureml import define_azureml
from .check import define_check
from .debug import define_debug
from .diff import define_diff
from .doctor import define_doctor
from .env import define_env
from .files import define_download, define_files
from .hang import define_hang
from .logs import define_logs
from .mlflow import define_mlflow
from .models import define_models, define_register
from .parser import CommandParser, Subparsers
from .pools import define_pools
from .preempt import define_preempt
from .runs import define_cancel, define_runs, define_show, define_stack
from .sessions import define_session, define_sessions
from .submit import define_rerun, define_resume, define_submit
from .sweeps import VERBS as SWEEP_VERBS
from .sweeps import define_sweep, define_sweeps
from .targets import define_target, define_targets
from .tensorboard import define_tensorboard
from .workspace import define_workspace

if TYPE_CHECKING:
    from .parser import Started

COMMANDS: dict[str, Callable[[Subparsers, str], None]] = {
    "submit": define_submit,
    "runs": define_runs,
    "show": define_show,
    "logs": define_logs,
    "cancel": define_cancel,
    "preempt": define_preempt,
    "rerun": define_rerun,
    "resume": define_resume,
    "diff": define_diff,
    "stack": define_stack,
    "hang": define_hang,
    "check": define_check,
    "debug": define_debug,
    "files": define_files,
    "download": define_download,
    "register": define_register,
    "models": define_models,
    "sweep": define_sweep,
    "sweeps": define_sweeps,
    "session": define_session,
    "sessions": define_sessions,
    "env": define_env,
    "targets": define_targets,
    "target": define_target,
    "pools": define_pools,
    "tensorboard": define_tensorboard,
    "mlflow": define_mlflow,
    "doctor": define_doctor,
    "workspace": define_workspace,
    "azureml": define_azureml,
    "azure": define_azure,
}

# Spellings of earlier releases, and the words they stand for: they work, unlisted.
ALIASES: dict[str, tuple[str, ...]] = {
    "sweep-show": ("sweep", "show"),
    "sweep-resume": ("sweep", "resume"),
    "sweep-cancel": ("sweep", "cancel"),
}
# The verb a noun means when the word after it is none of its verbs: ``sweep train.py``.
DEFAULT_VERBS: dict[str, tuple[str, tuple[str, ...]]] = {"sweep": ("start", SWEEP_VERBS)}


def add_commands(sub: Subparsers) -> None:
    """Add every command of the table to ``sub`` (``add_subparsers`` of a
    ``CommandParser``)."""
    for name, define in COMMANDS.items():
        define(sub, name)


def resolve(words: Sequence[str]) -> list[str]:
    """``words`` with an earlier release's spelling of a command replaced by today's."""
    words = list(words)
    if words and words[0] in ALIASES:
        words = [*ALIASES[words[0]], *words[1:]]
    if len(words) >= 2 and words[0] in DEFAULT_VERBS:
        verb, known = DEFAULT_VERBS[words[0]]
        if words[1] not in (*known, "-h", "--help"):
            words = [words[0], verb, *words[1:]]
    return words


def parse_command(parser: CommandParser, words: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(resolve(words))``, where the KEY=VALUE words of ``target add`` may
    also come after its options (argparse fills a positional list only up to the first
    option), and an option of another verb of the same noun is named as that verb's."""
    opts, extra = parser.parse_known_args(resolve(words))
    if isinstance(getattr(opts, "settings", None), list):
        opts.settings = [*opts.settings, *(word for word in extra if not word.startswith("-"))]
        extra = [word for word in extra if word.startswith("-")]
    if extra:
        parser.fail(f"unrecognized arguments: {' '.join(extra)}", getattr(opts, "command", None))
    return opts


def is_start(args: argparse.Namespace) -> bool:
    """Whether the parsed command starts a run or a sweep (the front end follows it)."""
    return getattr(args, "starter", None) is not None


def start_command(
    args: argparse.Namespace,
    script_args: Sequence[str] = (),
    origin: Mapping[str, Any] | None = None,
) -> Started:
    """Start what the parsed starting command asks for; ``script_args`` are those after
    ``--``, ``origin`` where a new run comes from (the magic's notebook and cell)."""
    args.script_args = list(script_args)
    args.origin = dict(origin) if origin else None
    started: Started = args.starter(args)
    return started


def run_command(args: argparse.Namespace, out: TextIO) -> int:
    """Run the parsed command, writing its text to ``out``; its exit code."""
    code: int = args.handler(args, out)
    return code
