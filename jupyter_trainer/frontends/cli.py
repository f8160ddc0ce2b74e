"""``jupyter-trainer`` (also ``jupyter trainer``): submit, list, follow and cancel runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..api import runs as api
from ..api.sweeps import functions as sweep_api
from ..core.errors import RunFailed, TrainerError
from .commands.options import HelpRequested, add_run_options, add_sweep_options, parse_with_settings
from .commands.sweeps import sweep_words
from .commands.table import CommandParser, add_commands, run_command, start_again
from .views import TextMonitor
from .views.text import source_line

# What a run or sweep canceled by Ctrl-C while this command followed it records as its reason.
CTRL_C_REASON = "interrupted with Ctrl-C while jupyter-trainer followed it"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="jupyter-trainer",
        description="Distributed PyTorch training runs: submit, list, follow, cancel, rerun, "
        "compare.",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
    )

    submit = sub.add_parser(
        "submit",
        help="run a script as a job",
        usage="jupyter-trainer submit SCRIPT [options] [-- script args]",
    )
    submit.add_argument("script", help="the entry script")
    add_run_options(submit)
    submit.add_argument(
        "--wait", action="store_true", help="follow the run to its end; exit non-zero if it fails"
    )

    sweep = sub.add_parser(
        "sweep",
        help="run a script as a hyperparameter sweep (and: sweep show|resume|cancel ID)",
        usage="jupyter-trainer sweep SCRIPT --sweep KEY=EXPR [...] [options] [-- script args]\n"
        "       jupyter-trainer sweep show [--json] | resume | cancel SWEEP",
    )
    sweep.add_argument("script", help="the entry script; it reads each KEY as jt.params[KEY]")
    add_run_options(sweep)
    add_sweep_options(sweep)
    sweep.add_argument(
        "--wait", action="store_true", help="follow the sweep to its end; exit non-zero if it fails"
    )

    add_commands(sub)

    env = sub.add_parser(
        "env",
        help="list, show, export, build or prune environments",
        usage="jupyter-trainer env [list | show NAME | export NAME "
        "[--requirements] | build NAME | prune [--dry-run]]",
    )
    env.add_argument(
        "action", nargs="?", default="list", choices=("list", "show", "export", "build", "prune")
    )
    env.add_argument("name", nargs="?", help="NAME or NAME@VERSION")
    env.add_argument(
        "--requirements",
        action="store_true",
        help="export: the requirements as defined, not the lock",
    )
    env.add_argument(
        "--dry-run", action="store_true", help="prune: list what would be removed, remove nothing"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    try:
        args = parse_with_settings(build_parser(), sweep_words(argv))
        args.script_args = script_args
        if args.command in COMMANDS:
            return COMMANDS[args.command](args)
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


def cmd_submit(args: argparse.Namespace) -> int:
    from .commands.options import submit_kwargs

    if args.dry_run:  # stdout: only what would be run, so it can be piped to another tool
        shown = api.submit(
            script=args.script, args=args.script_args, dry_run=True, **submit_kwargs(args)
        )
        print(shown.header, end="", file=sys.stderr, flush=True)
        print(shown.text, end="", flush=True)
        return 0
    run = api.submit(script=args.script, args=args.script_args, **submit_kwargs(args))
    print(run.id, flush=True)
    source = source_line(run.spec)
    if source:
        print(source, file=sys.stderr, flush=True)
    return follow(run) if args.wait else 0


def cmd_again(args: argparse.Namespace) -> int:
    """``rerun`` and ``resume``: the new run's id on stdout, then, with ``--wait``, as submit."""
    run = start_again(args, args.script_args)
    print(run.id, flush=True)
    return follow(run) if args.wait else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..core.errors import SpecError
    from .commands.options import is_sweep, submit_kwargs, sweep_kwargs

    if not is_sweep(args):
        raise SpecError(
            "jupyter-trainer sweep needs a search space: --sweep KEY=EXPR "
            "(repeatable) or --sweep-file FILE.yaml"
        )
    sweep = sweep_api.sweep(
        script=args.script, args=args.script_args, **sweep_kwargs(args), **submit_kwargs(args)
    )
    print(sweep.id, flush=True)
    return follow_sweep(sweep) if args.wait else 0


def follow_sweep(sweep) -> int:
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


def cmd_env(args: argparse.Namespace) -> int:
    from .. import environment

    if args.dry_run and args.action != "prune":
        print("jupyter-trainer env: --dry-run goes with prune", file=sys.stderr)
        return 2
    if args.action == "list":
        print(environment.environments_table(environment.list_environments()))
        return 0
    if args.action == "prune":
        if args.name:
            print(
                "jupyter-trainer env prune takes no NAME: it keeps every name's latest "
                "version and what unfinished runs use",
                file=sys.stderr,
            )
            return 2
        rows = api.prune_environments(dry_run=args.dry_run)
        print(environment.prune_text(rows, dry_run=args.dry_run))
        return 0
    if not args.name:
        print(f"jupyter-trainer env {args.action}: give the environment's NAME", file=sys.stderr)
        return 2
    if args.requirements and args.action != "export":
        print("jupyter-trainer env: --requirements goes with export", file=sys.stderr)
        return 2
    if args.action == "show":
        print(environment.show_text(args.name))
    elif args.action == "export":
        sys.stdout.write(environment.export_text(args.name, requirements=args.requirements))
    else:
        built = environment.build_environment(args.name)
        print(
            ("built in %.1f s: " % built["build_seconds"] if built["built"] else "already built: ")
            + built["python"]
        )
    return 0


COMMANDS = {
    "submit": cmd_submit,
    "rerun": cmd_again,
    "resume": cmd_again,
    "env": cmd_env,
    "sweep": cmd_sweep,
}


if __name__ == "__main__":
    sys.exit(main())
