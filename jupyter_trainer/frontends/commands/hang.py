"""``jupyter-trainer hang RUN``: why a running run hangs. Every rank, on every node, dumps its
Flight Recorder into the run folder; the supervisor reads the stacks of the ranks the
analysis names; the verdict (``rank 2 is behind: it never entered all_reduce #58 ...``),
each rank's last collective and the named ranks' stacks are printed (docs/hangs.md)."""

from __future__ import annotations

import argparse
import json
import time
from typing import TextIO

from ...api import runs as api
from ...supervisor import collectives
from ...supervisor.collective_watch import ask
from ..views.collectives_text import collectives_lines
from .parser import Subparsers, at_least, handles

DEFAULT_WAIT_S = 20


def define_hang(sub: Subparsers, name: str) -> None:
    hang = sub.add_parser(
        name, help="why a run hangs: every rank's collectives dumped, the rank behind named"
    )
    hang.add_argument("run")
    hang.add_argument(
        "--wait",
        type=at_least(1),
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        help=f"how long to wait for every rank's dump (default: {DEFAULT_WAIT_S})",
    )
    hang.add_argument("--json", action="store_true", help="print the analysis as JSON")
    handles(hang, cmd_hang)


def cmd_hang(args: argparse.Namespace, out: TextIO) -> int:
    run = api.get_run(args.run)
    if run.status == "running":
        _dump(run, args.wait)
    found = run.collectives()
    if found is None:
        print(
            f"run {run.id} is {run.status} and no rank has dumped its collectives "
            + (
                f"within {args.wait} s: is torch.distributed's process group made yet? "
                f"`jupyter-trainer stack {run.id}` shows where each rank is"
                if run.status == "running"
                else f"(only a running run's ranks can); `jupyter-trainer show {run.id}` says "
                "how it ended"
            ),
            file=out,
        )
        return 1
    if args.json:
        print(json.dumps(found, indent=1, default=str), file=out)
    else:
        print("\n".join(collectives_lines(found)), file=out)
    return 0


def _dump(run: api.Run, within: float) -> None:
    """Ask every rank for a dump; wait until each live rank has written it and the supervisor
    has saved the named ranks' stacks, or ``within`` seconds."""
    request = ask(run.path, "hang")
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and run.status == "running":
        records = run.store.rank_records(run.id)
        live = {r for r, rec in records.items() if rec.get("exit_code") is None}
        dumps = collectives.read_dumps(run.path)
        if live and all((dumps.get(r) or {}).get("why") == request for r in live):
            saved = run.path / collectives.DUMPS / collectives.STACKS_FILE
            try:
                if json.loads(saved.read_text(encoding="utf-8")).get("request") == request:
                    return
            except (OSError, ValueError, AttributeError):
                pass
        time.sleep(0.2)
