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
        for rank in ranks:
            first = rank not in offsets
            text, offsets[rank] = store.read_log(run.id, rank, offsets.get(rank, 0))
            lines = text.splitlines(True)
            if first and args.tail is not None:
                lines = lines[len(lines) - args.tail :] if args.tail else []
            if lines:
                prefix = f"[rank {rank}] " if prefixed else ""
                out.write("".join(prefix + line for line in lines))
                out.flush()
        if not args.follow or finished:
            return 0
        time.sleep(0.25)
