"""``diff RUN_A RUN_B [--json]``: what differs between two runs."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from ...api import runs as api
from .parser import Subparsers, handles


def define_diff(sub: Subparsers, name: str) -> None:
    diff = sub.add_parser(
        name,
        help="what differs between two runs",
        description="Params, launch and target, environment packages, code (a unified diff "
        "of the snapshots) and each metric's final, min and max, side by side.",
    )
    diff.add_argument("a", metavar="RUN_A")
    diff.add_argument("b", metavar="RUN_B")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    handles(diff, cmd_diff)


def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    found = api.diff(args.a, args.b)
    print(json.dumps(found.to_dict(), indent=1) if args.json else found.text(), file=out)
    return 0
