"""The commands that start a run: ``submit SCRIPT``, ``rerun RUN`` and ``resume RUN``.

Each returns what it started; the front end follows it its own way (``jupyter-trainer`` on
stderr with ``--wait``, ``%train`` with its monitor unless ``--no-wait``)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ...api import runs as api
from ...core.errors import SpecError
from .check import check_before
from .options import ParamAction, add_run_options, submit_kwargs
from .parser import Starter, Subparsers, add_wait_options, origin_kwargs, starts

if TYPE_CHECKING:
    from .parser import Started


def define_submit(sub: Subparsers, name: str) -> None:
    submit = sub.add_parser(
        name,
        help="run a script as a job",
        usage="%(prog)s SCRIPT [options] [-- script args]",
    )
    submit.add_argument("script", help="the entry script")
    add_run_options(submit)
    add_wait_options(submit, "run")
    starts(submit, start_submit)


def start_submit(args: argparse.Namespace) -> Started:
    if args.check and not args.dry_run:
        check_before(args, sys.stdout)
    return api.submit(
        script=args.script,
        args=getattr(args, "script_args", []),
        dry_run=args.dry_run,
        **origin_kwargs(args),
        **submit_kwargs(args),
    )


AGAIN = {
    "rerun": "start a run again: its snapshot, environment, params and launch",
    "resume": "start a run again from its latest checkpoint",
}


def define_rerun(sub: Subparsers, name: str) -> None:
    _define_again(sub, name, start_rerun)


def define_resume(sub: Subparsers, name: str) -> None:
    _define_again(sub, name, start_resume)


def _define_again(sub: Subparsers, name: str, starter: Starter) -> None:
    again = sub.add_parser(name, help=AGAIN[name])
    again.add_argument("run")
    again.add_argument(
        "-p",
        "--param",
        action=ParamAction,
        default=[],
        metavar="KEY=VALUE",
        help="change one of the run's params (repeatable)",
    )
    again.add_argument(
        "--target", default=None, help="where to run it (default: where the run ran)"
    )
    add_wait_options(again, "run")
    starts(again, starter)


def start_rerun(args: argparse.Namespace) -> Started:
    _no_script_args(args)
    return api.rerun(args.run, args.param, args.target)


def start_resume(args: argparse.Namespace) -> Started:
    _no_script_args(args)
    return api.resume(args.run, args.param, args.target)


def _no_script_args(args: argparse.Namespace) -> None:
    if getattr(args, "script_args", None):
        raise SpecError(
            f"{args.command} takes no script arguments after `--`: the run's own "
            "arguments are part of its snapshot"
        )
