"""The commands of Azure ML SDK v1 users:

- ``azureml check PATH`` lists every v1 call of a notebook or of a folder of scripts and
  notebooks, and what it will do here (``azureml/check.py``), before anything runs. It exits
  with 1 when a call would be refused.
- ``azureml run SCRIPT [ARGS...]`` runs a v1 training script here, outside any run, as v1
  tutorials' ``!python train.py`` dry run did: its ``azureml.core.run.Run.get_context()`` is
  an offline run that prints what it logs. ``azureml path`` prints the folder of that script
  side, for ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from ...core.printable import printable
from ..views.text import columns
from .parser import Subparsers, handles, verbs


def define_azureml(sub: Subparsers, name: str) -> None:
    noun = sub.add_parser(
        name,
        help="Azure ML SDK v1 notebooks and scripts: check what will run, run a script locally",
    )
    nouns = verbs(noun, required=True)
    check = nouns.add_parser(
        "check",
        help="every v1 call of a notebook or a folder: works, works differently, or refused",
    )
    check.add_argument("path", help="a notebook, a Python file, or a folder of them")
    check.add_argument("--json", action="store_true", help="print the findings as JSON")
    check.add_argument(
        "--refused", action="store_true", help="list only the calls that would be refused"
    )
    handles(check, cmd_azureml_check)
    path = nouns.add_parser(
        "path", help="the folder of v1's script side (azureml.core.run), for PYTHONPATH"
    )
    handles(path, cmd_azureml_path)
    run = nouns.add_parser(
        "run",
        help="run a v1 training script here, outside any run (v1's `python train.py` dry run)",
    )
    run.add_argument("script", help="the training script")
    run.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    handles(run, cmd_azureml_run)


def script_side() -> Path:
    """The folder that holds the ``azureml`` package a v1 script imports inside a run."""
    from ...rankside import HERE

    return HERE / "azureml_v1"


def cmd_azureml_path(args: argparse.Namespace, out: TextIO) -> int:
    print(script_side(), file=out)
    return 0


def cmd_azureml_run(args: argparse.Namespace, out: TextIO) -> int:
    """The script, with this interpreter and v1's script side first on its path; what it
    prints goes to ``out`` (the terminal, or the notebook under ``%train``)."""
    script = Path(args.script).expanduser()
    if not script.is_file():
        print(f"no script {args.script}: give the path of a v1 training script", file=out)
        return 2
    paths = [str(script_side()), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    with subprocess.Popen(
        [sys.executable, str(script), *args.args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as child:
        for line in child.stdout or ():
            out.write(line)
            out.flush()
    return child.returncode


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
