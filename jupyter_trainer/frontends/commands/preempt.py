"""``jupyter-trainer preempt RUN [--grace S]``: what a scheduler does when it takes a run's
nodes back, on this machine and on ssh hosts. Every rank is told (``jt.preempted()``), gets
the grace period to checkpoint and return, and what is left is ended; the attempt ends as
``preempted`` and the next one resumes from the newest complete checkpoint. A cloud's
spot-termination notice handler runs ``jupyter-trainer preempt RUN --grace 120``."""

from __future__ import annotations

import argparse
from typing import TextIO

from ...api import runs as api
from ...store.preemption import DEFAULT_GRACE_S
from ..views.preemption_text import preemption_line
from .parser import Subparsers, at_least, handles


def define_preempt(sub: Subparsers, name: str) -> None:
    preempt = sub.add_parser(
        name, help="preempt a run: its ranks checkpoint, and the next attempt resumes"
    )
    preempt.add_argument("run")
    preempt.add_argument(
        "--grace",
        type=at_least(0),
        default=int(DEFAULT_GRACE_S),
        metavar="SECONDS",
        help="how long the ranks get to checkpoint and return before they are killed "
        f"(default: {int(DEFAULT_GRACE_S)})",
    )
    preempt.add_argument(
        "--no-wait", action="store_true", help="ask and return, without waiting for the attempt"
    )
    handles(preempt, cmd_preempt)


def cmd_preempt(args: argparse.Namespace, out: TextIO) -> int:
    run = api.get_run(args.run)
    entry = run.preempt(grace=args.grace, wait=not args.no_wait)
    if args.no_wait:
        print(f"run {run.id}: its preemption is asked for (grace {args.grace} s)", file=out)
        return 0
    if entry is None:
        print(
            f"run {run.id} is {run.status}: its supervisor has not ended the attempt within "
            f"the grace period; `jupyter-trainer show {run.id}` tells when it has",
            file=out,
        )
        return 1
    print(f"run {run.id}: {preemption_line(entry)}", file=out)
    return 0
