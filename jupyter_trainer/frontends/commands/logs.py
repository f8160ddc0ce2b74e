"""``logs RUN [-f] [--rank R] [--tail N]``: a run's per-rank logs, followed or not."""

from __future__ import annotations

import argparse
import time
from typing import TextIO

from ...api import runs as api
from ...store import TERMINAL
from .parser import Subparsers, at_least, handles


def define_logs(sub: Subparsers, name: str) -> None:
    logs = sub.add_parser(name, help="a run's per-rank logs")
    logs.add_argument("run")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the run ends"
    )
    logs.add_argument("--rank", type=int, default=None, help="only this rank (default: all)")
    logs.add_argument(
        "--tail",
        type=at_least(0),
        default=None,
        metavar="N",
        help="start with the last N lines of each rank (default: all)",
    )
    handles(logs, cmd_logs)


def cmd_logs(args: argparse.Namespace, out: TextIO) -> int:
    run = api.get_run(args.run)
    store = run.store
    offsets: dict[int, int] = {}
    if args.rank is not None:
        run.check_rank(args.rank)
    prefixed = args.rank is None and run.spec.launch.world_size > 1
    while True:
        # read before the logs, so nothing written after it is missed; only when following,
        # so that a run whose state is damaged still shows its logs (and while following, a
        # state its supervisor is writing again reads as unfinished)
        finished = (
            not args.follow or (run.store.current_state(run.id) or {}).get("status") in TERMINAL
        )
        ranks = [args.rank] if args.rank is not None else store.ranks(run.id)
        prefix = "[rank {}] " if prefixed else ""
        for rank in ranks:
            if rank not in offsets:
                offsets[rank] = (
                    0 if args.tail is None else store.log_tail_offset(run.id, rank, args.tail)
                )
            offsets[rank] = _print_log(run, rank, offsets[rank], prefix, out, ended=finished)
        if not args.follow or finished:
            return 0
        time.sleep(0.25)


def _print_log(run: api.Run, rank: int, offset: int, prefix: str, out: TextIO, ended: bool) -> int:
    """Print ``rank``'s log from ``offset`` to what is written of it now, a piece of at
    most 16 MiB at a time (a line of a rank that has ``ended`` needs no end); the offset
    after it."""
    while True:
        text, after = run.store.read_log(run.id, rank, offset, ended=ended)
        if after == offset:
            return offset
        if prefix:
            text = "".join(prefix.format(rank) + line for line in text.splitlines(True))
        out.write(text)
        out.flush()
        offset = after
