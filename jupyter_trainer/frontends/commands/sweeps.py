"""The commands of sweeps: ``sweeps`` (the list) and ``sweep start SCRIPT | show ID |
resume ID | cancel ID``.

``sweep SCRIPT ...`` (no verb) is ``sweep start SCRIPT ...``, and ``sweep-show ID`` (and
``-resume``, ``-cancel``) the same as ``sweep show ID``: ``table.ALIASES`` resolves those
spellings before parsing, so they work and ``--help`` shows only the verbs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from ...api.sweeps import functions as api
from ...core.errors import SpecError
from ..views.sweep_text import sweep_json, sweep_text
from .check import check_before
from .options import add_run_options, submit_kwargs
from .parser import Subparsers, add_wait_options, handles, origin_kwargs, starts, verbs
from .sweep_options import add_sweep_options, is_sweep, sweep_kwargs

if TYPE_CHECKING:
    from .parser import Started

VERBS = ("start", "show", "resume", "cancel")


def define_sweeps(sub: Subparsers, name: str) -> None:
    sweeps = sub.add_parser(name, help="list sweeps, newest first")
    sweeps.add_argument("--json", action="store_true", help="print JSON rows")
    handles(sweeps, cmd_sweeps)


def cmd_sweeps(args: argparse.Namespace, out: TextIO) -> int:
    from ..views.sweep_text import sweeps_table

    found = api.sweeps()
    if args.json:
        rows = [
            {
                "id": s.id,
                "status": (state := s.state)["status"],
                "trials": len(state["trials"]),
                "trials_total": state.get("trials_total"),
                "best": state.get("best"),
                "created": state["created"],
            }
            for s in found
        ]
        print(json.dumps(rows, indent=1), file=out)
    else:
        print(sweeps_table(found), file=out)
    return 0


def define_sweep(sub: Subparsers, name: str) -> None:
    sweep = sub.add_parser(name, help="start a hyperparameter sweep, or show, resume or cancel one")
    actions = verbs(sweep, required=True)
    start = actions.add_parser(
        "start",
        help="run a script as a hyperparameter sweep",
        usage="%(prog)s SCRIPT --sweep KEY=EXPR [...] [options] [-- script args]",
    )
    start.add_argument("script", help="the entry script; it reads each KEY as jt.params[KEY]")
    add_run_options(start)
    add_sweep_options(start)
    add_wait_options(start, "sweep")
    starts(start, start_sweep)

    show = actions.add_parser("show", help="a sweep's trials")
    show.add_argument("sweep")
    show.add_argument(
        "--json",
        action="store_true",
        help="print the sweep's spec, status, best and every trial as JSON",
    )
    handles(show, cmd_show)
    resume = actions.add_parser("resume", help="start the driver of an interrupted sweep again")
    resume.add_argument("sweep")
    handles(resume, cmd_resume)
    cancel = actions.add_parser("cancel", help="cancel a sweep and its running trials")
    cancel.add_argument("sweep")
    handles(cancel, cmd_cancel)


def start_sweep(args: argparse.Namespace) -> Started:
    if not is_sweep(args):
        raise SpecError(
            "sweep start needs a search space: --sweep KEY=EXPR "
            "(repeatable) or --sweep-file FILE.yaml"
        )
    if args.check and not args.dry_run:
        check_before(args, sys.stdout)
    return api.sweep(
        script=args.script,
        args=getattr(args, "script_args", []),
        **origin_kwargs(args),
        **sweep_kwargs(args),
        **submit_kwargs(args),
    )


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    sweep = api.get_sweep(args.sweep)
    print(json.dumps(sweep_json(sweep), indent=1) if args.json else sweep_text(sweep), file=out)
    return 0


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    sweep = api.get_sweep(args.sweep).resume()
    print(f"sweep {sweep.id} {sweep.status}: {len(sweep.state['trials'])} trials kept", file=out)
    return 0


def cmd_cancel(args: argparse.Namespace, out: TextIO) -> int:
    sweep = api.get_sweep(args.sweep)
    sweep.cancel()
    print(f"sweep {sweep.id} {sweep.status}", file=out)
    return 0
