"""The commands of Azure ML SDK v1 users: ``azureml check PATH`` lists every v1 call of a
notebook or of a folder of scripts and notebooks, and what it will do here (``azureml/check.py``),
before anything runs. It exits with 1 when a call would be refused."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TextIO

from ...core.printable import printable
from ..views.text import columns
from .parser import Subparsers, handles, verbs


def define_azureml(sub: Subparsers, name: str) -> None:
    noun = sub.add_parser(name, help="Azure ML SDK v1 notebooks and scripts: check what will run")
    check = verbs(noun, required=True).add_parser(
        "check",
        help="every v1 call of a notebook or a folder: works, works differently, or refused",
    )
    check.add_argument("path", help="a notebook, a Python file, or a folder of them")
    check.add_argument("--json", action="store_true", help="print the findings as JSON")
    check.add_argument(
        "--refused", action="store_true", help="list only the calls that would be refused"
    )
    handles(check, cmd_azureml_check)


def cmd_azureml_check(args: argparse.Namespace, out: TextIO) -> int:
    from ...azureml.check import REFUSED, check_path, summary

    findings = check_path(Path(args.path).expanduser())
    counts = summary(findings)
    if args.refused:
        findings = [f for f in findings if f.verdict == REFUSED]
    if args.json:
        print(
            json.dumps({"findings": [f.as_dict() for f in findings], "summary": counts}, indent=1),
            file=out,
        )
        return 1 if counts[REFUSED] else 0
    if not findings:
        print(f"no Azure ML SDK v1 call in {args.path}", file=out)
        return 0
    rows = [
        (f"{printable(f.path)}:{f.line}", printable(f.name), f.verdict, printable(f.note))
        for f in findings
    ]
    print(columns(("where", "v1 call", "here", "what to know"), rows), file=out)
    print(
        f"\n{counts['works']} work, {counts['works differently']} work differently, "
        f"{counts['refused']} refused (docs/azureml.md)",
        file=out,
    )
    return 1 if counts[REFUSED] else 0
