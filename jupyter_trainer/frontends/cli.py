"""``jupyter-trainer`` (also ``jupyter trainer``): submit, list, follow and cancel runs."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..api import runs as api
from ..api.dry_run import DryRun
from ..api.start import one_start_per_process
from ..api.sweeps.handle import Sweep
from ..core.errors import RunFailed, TrainerError
from .commands.options import HelpRequested
from .commands.parser import CommandParser
from .commands.table import add_commands, is_start, parse_command, run_command, start_command
from .views import TextMonitor
from .views.text import source_line

if TYPE_CHECKING:
    from .commands.parser import Started

# What a run or sweep canceled by Ctrl-C while this command followed it records as its reason.
CTRL_C_REASON = "interrupted with Ctrl-C while jupyter-trainer followed it"


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog="jupyter-trainer",
        description="Distributed PyTorch training runs: submit, list, follow, cancel, rerun, "
        "compare.",
        epilog="`jupyter-trainer COMMAND --help` shows a command's options (and a noun's verbs).",
    )
    add_commands(
        parser.add_subparsers(
            dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
        )
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    try:
        args = parse_command(build_parser(), argv)
        if is_start(args):
            one_start_per_process()
            return started(args, start_command(args, script_args))
        return run_command(args, sys.stdout)
    except HelpRequested as shown:
        print(shown.text, end="")
        return 0
    except RunFailed as exc:
        print(f"jupyter-trainer: {exc}", file=sys.stderr)
        return 1
    except TrainerError as exc:
        print(f"jupyter-trainer: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader of stdout went away (`| head`): say nothing more, as `ls | head` does;
        # stdout points at /dev/null so that Python's own flush at exit raises no more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # 128 + SIGPIPE, as a shell reports it


def started(args: argparse.Namespace, what: Started) -> int:
    """What a starting command started: a run's or a sweep's id on stdout, then, with
    ``--wait``, follow it on stderr; a dry run's text on stdout, alone, so it can be piped to
    another tool."""
    if isinstance(what, DryRun):
        print(what.header, end="", file=sys.stderr, flush=True)
        print(what.text, end="", flush=True)
        return 0
    print(what.id, flush=True)
    if isinstance(what, api.Run):
        if args.command == "submit":
            source = source_line(what.spec)
            if source:
                print(source, file=sys.stderr, flush=True)
        return follow(what) if args.wait else 0
    return follow_sweep(what) if args.wait else 0


def follow_sweep(sweep: Sweep) -> int:
    """Follow ``sweep`` on stderr to its end, a line each time it changes; Ctrl-C cancels it."""
    import time

    from .views.sweep_text import sweep_line, sweep_text

    shown = None
    try:
        while True:
            state = sweep.state
            if state["status"] not in ("created", "running"):
                break
            line = sweep_line(state, sweep.sweeps.read_spec(sweep.id))
            if line != shown:
                print(line, file=sys.stderr, flush=True)
                shown = line
            time.sleep(1.0)
    except KeyboardInterrupt:
        print(f"interrupted: canceling sweep {sweep.id}", file=sys.stderr)
        sweep.cancel(reason=CTRL_C_REASON)
        raise
    print(sweep_text(sweep), file=sys.stderr)
    return 0 if sweep.status == "completed" else 1


def follow(run: api.Run) -> int:
    """Follow ``run`` on stderr to its end; Ctrl-C cancels it. Raises if it did not complete."""
    try:
        monitor = TextMonitor(run, out=sys.stderr)
        monitor.follow()
    except KeyboardInterrupt:
        print(f"interrupted: canceling run {run.id}", file=sys.stderr)
        run.cancel(wait=True, timeout=15, reason=CTRL_C_REASON)
        raise
    print(monitor.summary(), file=sys.stderr)
    run.raise_for_status()
    return 0


if __name__ == "__main__":
    sys.exit(main())
