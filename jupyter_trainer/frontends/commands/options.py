"""The run options shared by ``%%train``, ``%train script.py`` and ``jupyter-trainer submit``,
and those of ``target add`` (``%train`` and the CLI).

One parser definition, so a flag means the same everywhere. Parsing never exits the
process: a bad flag raises ``SpecError`` with the usage line, and ``--help`` raises
``HelpRequested`` carrying the help text.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
from collections.abc import Iterator
from typing import Any

from ...core.errors import SpecError
from ...core.spec import (
    BACKENDS,
    DEFAULT_DEBUG_TIMEOUT,
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_SYSTEM_INTERVAL,
    LAUNCHERS,
    ON_STALL,
)
from .sweep_options import add_sweep_options


class HelpRequested(Exception):
    """``--help`` was given; ``.text`` is what to show."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


_INVALID_VALUE = re.compile(
    r"argument (?P<flags>[^:]+): invalid (?P<kind>\w+) value: (?P<value>.+)"
)
_KINDS = {"int": "a whole number", "float": "a number"}


def option_places(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """(``--long`` option, the command that has it) for every option of ``parser`` and of its
    subcommands' parsers; the command is the prog's words after the program's name."""
    command = parser.prog.partition(" ")[2]
    for action in parser._actions:
        yield from ((s, command) for s in action.option_strings if s.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from option_places(sub)


def explain(parser: argparse.ArgumentParser, message: str, noun: str | None = None) -> str:
    """argparse's ``message`` in one line a person acts on: the flag and what it takes, the
    command an option belongs to when it is another one's, or the unknown option with the
    option it most likely meant. Given the ``noun`` the words began with, an option of
    another of its verbs is named as that verb's."""
    invalid = _INVALID_VALUE.fullmatch(message)
    if invalid and invalid["kind"] in _KINDS:
        flag = invalid["flags"].split("/")[-1]
        return f"{flag} takes {_KINDS[invalid['kind']]}, not {invalid['value']}"
    if message.startswith("unrecognized arguments: "):
        places: dict[str, list[str]] = {}
        for option, command in option_places(parser):
            places.setdefault(option, []).append(command)
        hints = []
        for word in message.partition(": ")[2].split():
            flag = word.partition("=")[0]
            if not flag.startswith("--"):
                continue
            owners = [c for c in dict.fromkeys(places.get(flag, [])) if c]
            owners = [c for c in owners if c.startswith(f"{noun} ")] or owners
            if owners and len(owners) <= 3:
                hints.append(f"{flag} goes with {' or '.join(f'`{c}`' for c in owners)}")
            elif not owners:
                close = difflib.get_close_matches(flag, sorted(places), n=1, cutoff=0.6)
                hints += [f"did you mean {close[0]}?"] if close else []
        return "; ".join([message, *hints])
    return message


class OptionParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise SpecError(
            f"{self.prog}: {explain(self, message)} (`{self.prog} --help` lists every option)"
        )

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise HelpRequested(self.format_help())

    def print_help(self, file: Any = None) -> None:
        raise HelpRequested(self.format_help())


class ParamAction(argparse.Action):
    """``-p KEY=VALUE``, repeatable; the same KEY twice is an error, not "the last wins"."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = list(getattr(namespace, self.dest, None) or [])
        key = str(values).partition("=")[0].strip()
        for earlier in given:
            if earlier.partition("=")[0].strip() == key:
                raise argparse.ArgumentError(
                    self,
                    f"the key {key!r} is given twice ({earlier!r}, then {values!r}); "
                    f"keep the one you mean",
                )
        setattr(namespace, self.dest, [*given, values])


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of a run, in every front end."""
    parser.add_argument("--name", help="a name for the run (default: 'cell' or the script's name)")
    parser.add_argument(
        "--target",
        default="local",
        help="where to run: 'local' or a target from targets.toml (default: local)",
    )
    parser.add_argument("--nodes", type=int, default=1, help="number of nodes (default: 1)")
    parser.add_argument("--procs", type=int, default=1, help="processes per node (default: 1)")
    parser.add_argument(
        "--launcher",
        default="torchrun",
        metavar="|".join(LAUNCHERS),
        help="what starts the ranks (default: torchrun)",
    )
    parser.add_argument(
        "--backend",
        default=None,
        metavar="|".join(BACKENDS),
        help="process-group backend (default: NCCL on CUDA GPUs, else Gloo)",
    )
    parser.add_argument(
        "--env",
        default=None,
        metavar="NAME",
        help="a named environment (default: the kernel's own Python)",
    )
    parser.add_argument(
        "-p",
        "--param",
        action=ParamAction,
        default=[],
        metavar="KEY=VALUE",
        help="set a hyperparameter; VALUE is a Python literal or a string (repeatable)",
    )
    parser.add_argument(
        "--source",
        default=None,
        metavar="DIR",
        help="a folder to add to the snapshot (honours its .trainignore)",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="N",
        help="when a rank fails, start every rank again, up to N times; the "
        "training code resumes from jt.load_checkpoint() (default: 0)",
    )
    parser.add_argument(
        "--hot",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fork the ranks from a warm pool that has imported torch: starts "
        "in a fraction of a second; the default for torchrun runs "
        "without --max-restarts on the local target (one node), on "
        "ssh targets and on Slurm targets with hold (--no-hot: plain "
        "torchrun)",
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=DEFAULT_STALL_TIMEOUT,
        metavar="SECONDS",
        help="name a rank as stalled when it logs no progress for this long "
        f"(default: {DEFAULT_STALL_TIMEOUT:g}; 0 turns it off)",
    )
    parser.add_argument(
        "--on-stall",
        default="warn",
        metavar="|".join(ON_STALL),
        help="warn: show the stalled rank and its stack; cancel: also end the "
        "run, its stacks saved (default: warn)",
    )
    parser.add_argument(
        "--stop-on-nan",
        action="append",
        default=[],
        metavar="METRIC",
        help="fail the run when METRIC becomes NaN or inf (repeatable)",
    )
    parser.add_argument(
        "--system-interval",
        type=float,
        default=DEFAULT_SYSTEM_INTERVAL,
        metavar="SECONDS",
        help="how often each rank samples its CPU, memory and GPU figures "
        f"(default: {DEFAULT_SYSTEM_INTERVAL:g}; 0 turns it off)",
    )
    parser.add_argument(
        "--no-autolog",
        dest="autolog",
        action="store_false",
        help="do not capture what the frameworks the code imports report (transformers' "
        "Trainer, Accelerate, Lightning, TensorBoard's SummaryWriter); by default they "
        "report to the run",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="a rank that raises waits in pdb instead of exiting, the other ranks held "
        "meanwhile: a %%%%train cell that waits for the run offers pdb in its own input box; "
        "else attach with `jupyter-trainer debug RUN` in a terminal",
    )
    parser.add_argument(
        "--debug-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"with --debug: how long the rank waits for a debugger, and for each answer "
        f"(default: {DEFAULT_DEBUG_TIMEOUT:g}); then the run fails as it would have",
    )
    parser.add_argument(
        "--data",
        action=ParamAction,
        default=[],
        metavar="NAME=PATH",
        help="a data input: a folder, a file, or an http(s):// or fsspec URL; "
        "the code finds it at jt.data['NAME'] on every node (repeatable)",
    )
    parser.add_argument(
        "--mlflow",
        default=None,
        metavar="URI",
        help="mirror the run to this MLflow tracking URI (default: $MLFLOW_TRACKING_URI when set)",
    )
    parser.add_argument(
        "--storage",
        default=None,
        metavar="URL",
        help="upload the run's checkpoints and outputs to this URL as it goes (s3://bucket/"
        "prefix, gs://, az://, any fsspec URL; default: the target's or the workspace's)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="first run `jupyter-trainer check` on the same target, nodes, processes, "
        "backend and launcher; start the run only if every rank joins and the "
        "collectives run",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check and capture everything, then print what would be run "
        "(launcher argv and added variables, each node's command, the "
        "sbatch script); start nothing, create no run",
    )


def submit_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """``api.submit`` keyword arguments from parsed run options."""
    return {
        "name": ns.name,
        "target": ns.target,
        "nodes": ns.nodes,
        "procs": ns.procs,
        "launcher": ns.launcher,
        "backend": ns.backend,
        "env": ns.env,
        "params": ns.param,
        "source": ns.source,
        "max_restarts": ns.max_restarts,
        "hot": ns.hot,
        "stall_timeout": ns.stall_timeout,
        "on_stall": ns.on_stall,
        "stop_on_nan": ns.stop_on_nan,
        "system_interval": ns.system_interval,
        "autolog": ns.autolog,
        "debug": debug_option(ns),
        "data": ns.data,
        "mlflow": ns.mlflow,
        "storage": ns.storage,
    }


def debug_option(ns: argparse.Namespace) -> bool | float:
    """``submit``'s ``debug`` from --debug and --debug-timeout."""
    if ns.debug_timeout is not None and not ns.debug:
        raise SpecError(
            f"--debug-timeout {ns.debug_timeout:g} goes with --debug: add --debug, or leave "
            "out --debug-timeout"
        )
    return float(ns.debug_timeout) if ns.debug and ns.debug_timeout is not None else ns.debug


def cell_parser() -> OptionParser:
    parser = OptionParser(
        prog="%%train", add_help=True, description="Run this cell as a distributed training job."
    )
    add_run_options(parser)
    parser.add_argument(
        "--no-wait", action="store_true", help="return at once; the run goes on in the background"
    )
    parser.add_argument(
        "--session",
        default=None,
        metavar="NAME",
        help="run the cell on every rank of the live session NAME, in its namespace "
        "(%%train session start NAME starts one)",
    )
    parser.add_argument(
        "--form",
        action="store_true",
        help="show a launch form (target, nodes, procs, environment and one "
        "input per hyperparameter) instead of starting at once; headless "
        "(papermill) it starts at once with the notebook's values",
    )
    add_sweep_options(parser)
    return parser


def script_parser(prog: str) -> OptionParser:
    parser = OptionParser(prog=prog, description="Run a script as a distributed training job.")
    parser.add_argument("script", help="the entry script")
    add_run_options(parser)
    add_sweep_options(parser)
    return parser


def split_line(line: str) -> tuple[list[str], list[str]]:
    """Split a magic's line like a shell would, without running one; ``--`` ends options.

    A ``--sweep`` expression keeps its quotes (``--sweep opt=choice('adam', 'sgd')`` reaches
    the parser as written), unless the whole of it is quoted."""
    try:
        words = _sweep_words(line) if "--sweep" in line else shlex.split(line, posix=True)
    except ValueError as exc:
        raise SpecError(f"cannot parse options {line!r}: {exc} (check the quotes)") from exc
    if "--" in words:
        cut = words.index("--")
        return words[:cut], words[cut + 1 :]
    return words, []


def _sweep_words(line: str) -> list[str]:
    """The words of ``line``, each unquoted as a shell would, but those of ``--sweep``
    expressions, whose quotes belong to their string literals."""
    raw = _raw_words(line)
    words = []
    for k, word in enumerate(raw):
        expression = (k > 0 and raw[k - 1] == "--sweep") or word.startswith("--sweep=")
        quoted = (
            len(word) > 1
            and word[0] == word[-1]
            and word[0] in "'\""
            and len(shlex.split(word)) == 1
        )
        words.append(word if expression and not quoted else shlex.split(word)[0])
    return words


def _raw_words(line: str) -> list[str]:
    """``line`` split at whitespace outside quotes, each word as written (quotes kept)."""
    words: list[str] = []
    word, quote, started, k = "", "", False, 0
    while k < len(line):
        c = line[k]
        if quote:
            word += c
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"' and k + 1 < len(line):
                word, k = word + line[k + 1], k + 1
        elif c in "'\"":
            word, quote, started = word + c, c, True
        elif c == "\\" and k + 1 < len(line):
            word, k, started = word + c + line[k + 1], k + 1, True
        elif c.isspace():
            if started:
                words.append(word)
            word, started = "", False
        else:
            word, started = word + c, True
        k += 1
    if quote:
        raise ValueError("No closing quotation")
    if started:
        words.append(word)
    return words


def add_target_options(parser: argparse.ArgumentParser) -> None:
    """``target add NAME --kind KIND [--replace] KEY=VALUE ...``, in every front end."""
    parser.add_argument("name", help="the target's name, as --target NAME will use it")
    parser.add_argument(
        "--kind", required=True, help="ssh, slurm, ray, or a kind a plugin registers"
    )
    parser.add_argument("--replace", action="store_true", help="overwrite a target of this name")
    parser.add_argument(
        "settings",
        nargs="*",
        metavar="KEY=VALUE",
        help="the target's keys; VALUE in TOML or bare: hosts=[gpu1,gpu2], "
        "workdir=/scratch/jt, gpus_per_node=8, env={NCCL_SOCKET_IFNAME=eth0}",
    )
