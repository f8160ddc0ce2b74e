"""``doctor [--fix] [--no-hash] [--json]``: check (and repair) the run store."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from ...api import runs as api
from .parser import Subparsers, handles


def define_doctor(sub: Subparsers, name: str) -> None:
    doctor = sub.add_parser(
        name,
        help="check the run store: index, lost runs, changed snapshots, the model "
        "registry and the data caches",
        description="Report where the index, the runs' states and their snapshots disagree "
        "with the run folders, where models.db and the versions' lineage.json "
        "disagree with the model folders or their files, and what is broken in "
        "the data input caches; change nothing unless --fix is given. Exits 1 "
        "while problems remain.",
    )
    doctor.add_argument(
        "--fix",
        action="store_true",
        help="rebuild a broken index, rewrite stale rows, record lost runs, "
        "remove what a cut-short registration, deletion or download left "
        "and broken data cache entries",
    )
    doctor.add_argument(
        "--no-hash",
        action="store_true",
        help="do not hash every snapshot and model file (faster on large stores)",
    )
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")
    handles(doctor, cmd_doctor)


def cmd_doctor(args: argparse.Namespace, out: TextIO) -> int:
    report = api.doctor(fix=args.fix, hashes=not args.no_hash)
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.text(), file=out)
    return 1 if report.unresolved else 0
