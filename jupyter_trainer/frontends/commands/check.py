"""``check [TARGET] [--nodes N] [--procs P] [--backend B] [--launcher L]``: every rank of the
allocation joins, and the collectives and the links between nodes are timed."""

from __future__ import annotations

import argparse
import json
from typing import Any, Protocol, TextIO

from ...core.errors import TargetError
from .parser import Subparsers, handles

BEFORE_A_RUN_BYTES = 16 << 20  # --check measures up to this size, to stay quick...
BEFORE_A_RUN_STEP = 4  # ...and every fourth size doubling (each size is timed for 50 ms+)


def define_check(sub: Subparsers, name: str) -> None:
    check = sub.add_parser(
        name,
        help="prove that every rank joins and the network runs at speed, before a run",
        description="Start the real launcher on TARGET's allocation, by the same path as a "
        "run, and report every rank that joined and its time to rendezvous; all_reduce, "
        "all_gather and broadcast from --min-bytes to --max-bytes with algorithm and bus "
        "bandwidth as nccl-tests defines them; the latency and bandwidth of each link "
        "between nodes; the interface each rank used. A rank that has not joined within "
        "--time-limit seconds is named with the reason its record gives, and the check is "
        "canceled. The check is kept as a run (tag kind=check): `diff` compares two.",
    )
    check.add_argument("target", nargs="?", default=None, help="a target (default: local)")
    check.add_argument("--nodes", type=int, default=1)
    check.add_argument("--procs", type=int, default=None, help="processes per node")
    check.add_argument("--backend", default=None, help="gloo or nccl (default: the target's)")
    check.add_argument("--launcher", default=None, help="torchrun (default), mpirun, ...")
    check.add_argument("--env", default=None, help="a named environment to check in")
    check.add_argument("--min-bytes", type=int, default=8)
    check.add_argument("--max-bytes", type=int, default=256 << 20)
    check.add_argument(
        "--time-limit", type=float, default=60.0, help="seconds for every rank to join"
    )
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    handles(check, cmd_check)


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    from ...api.check import check
    from ..views.check_text import check_text

    result = check(
        **allocation(args),
        min_bytes=args.min_bytes,
        max_bytes=args.max_bytes,
        time_limit=args.time_limit,
    )
    if args.json:
        payload = {
            "run": result.run.id,
            "ok": result.ok,
            "world_size": result.world_size,
            "ranks": result.ranks,
            "joined": result.joined,
            "collectives": result.collectives,
            "links": result.links,
            "slowest_link": result.slowest_link,
            "problems": result.problems,
        }
        print(json.dumps(payload, indent=1), file=out)
    else:
        print(check_text(result), file=out)
    return 0 if result.ok else 1


def allocation(ns: argparse.Namespace) -> dict[str, Any]:
    """What a check needs of a run's options: where, how many, which backend and launcher."""
    keys = ("target", "nodes", "procs", "backend", "launcher", "env")
    return {key: getattr(ns, key) for key in keys}


class CheckShown(Protocol):
    """Where a check before a run is shown: what it checks at once, then its result."""

    def started(self, plan: str) -> None: ...

    def ended(self, result: Any) -> None: ...


def check_before(ns: argparse.Namespace, out: TextIO, shown: CheckShown | None = None) -> None:
    """``--check``: the check on the allocation the run would get, said at once and then in
    brief (to ``out``, or ``shown`` in a notebook front end); raises ``TargetError`` when it
    fails, so that the run is not started."""
    from ...api.check import check
    from ..views.check_text import check_brief, check_plan

    plan = check_plan(allocation(ns), BEFORE_A_RUN_BYTES)
    if shown is None:
        print(plan, file=out, flush=True)
    else:
        shown.started(plan)
    result = check(**allocation(ns), max_bytes=BEFORE_A_RUN_BYTES, step=BEFORE_A_RUN_STEP)
    if shown is None:
        print(check_brief(result), file=out, flush=True)
    else:
        shown.ended(result)
    if not result.ok:
        first = result.problems[0] if result.problems else "see the check above"
        raise TargetError(
            f"check {result.run.id} failed, so the run was not started: {first} "
            f"(`jupyter-trainer show {result.run.id}` has the check's record)"
        )
