"""``debug RUN [--rank R] [--wait SECONDS]``: pdb, in this terminal, on a rank that waits in a
debugger (it raised in a run started with ``--debug``, or stopped at ``jt.breakpoint``)."""

from __future__ import annotations

import argparse
from typing import TextIO

from ...api import runs as api
from .parser import Subparsers, handles


def define_debug(sub: Subparsers, name: str) -> None:
    debug = sub.add_parser(
        name,
        help="attach pdb to a rank that waits in a debugger (--debug, jt.breakpoint)",
        description="Attach this terminal to the pdb of a rank of RUN that waits in a "
        "debugger: one that raised in a run started with --debug (a post-mortem), or one "
        "stopped at jt.breakpoint(). On an ssh or Slurm node it is reached over the target's "
        "own transport. `q` ends the post-mortem (the run then fails); `c` lets a rank at a "
        "breakpoint go on.",
    )
    debug.add_argument("run")
    debug.add_argument(
        "--rank", type=int, default=None, help="the rank (default: the lowest that waits)"
    )
    debug.add_argument(
        "--wait",
        type=float,
        default=0.0,
        help="seconds to wait for a rank to wait in a debugger (default: 0, ask now)",
    )
    handles(debug, cmd_debug)


def cmd_debug(args: argparse.Namespace, out: TextIO) -> int:
    from ...api.debug import terminal

    run = api.get_run(args.run)
    if args.rank is not None:
        run.check_rank(args.rank)
    with run.debug(rank=args.rank, wait=max(0.0, args.wait)) as session:
        print(f"[attached to {session.where}]", file=out, flush=True)
        terminal(session)
    return 0
