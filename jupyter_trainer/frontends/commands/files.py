"""The commands of a run's outputs: ``files RUN`` and ``download RUN PATTERN DEST``."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from ...api import runs as api
from ...core.printable import printable
from ...core.units import format_bytes
from ..views.text import columns
from .checks import checked, count
from .parser import Subparsers, handles


def define_files(sub: Subparsers, name: str) -> None:
    files = sub.add_parser(name, help="the files of a run's outputs/, with their sizes")
    files.add_argument("run")
    files.add_argument("--json", action="store_true", help="print JSON rows (path, size)")
    handles(files, cmd_files)


def cmd_files(args: argparse.Namespace, out: TextIO) -> int:
    found = api.get_run(args.run).files()
    if args.json:
        print(json.dumps([f.to_dict() for f in found], indent=1), file=out)
    elif not found:
        print(f"run {args.run} has no outputs", file=out)
    else:
        print(
            columns(("SIZE", "PATH"), [(format_bytes(f.size), printable(f.path)) for f in found]),
            file=out,
        )
        print(f"{count(len(found), 'file')}, {format_bytes(sum(f.size for f in found))}", file=out)
    return 0


def define_download(sub: Subparsers, name: str) -> None:
    download = checked(
        sub.add_parser(
            name,
            help="copy files of a run's outputs/ into a folder",
            description="Copy the files of the run's outputs/ that PATTERN names into DEST, each "
            "at its path under outputs/. PATTERN is a path relative to outputs/, a folder "
            "(every file under it) or a glob: '*.pt', 'checkpoints/**/*.pt'. Quote it "
            "so the shell does not expand it.",
        )
    )
    download.add_argument("run")
    download.add_argument("pattern")
    download.add_argument("dest", help="a folder (made if missing)")
    handles(download, cmd_download)


def cmd_download(args: argparse.Namespace, out: TextIO) -> int:
    for path in api.get_run(args.run).download(args.pattern, args.dest):
        print(printable(str(path)), file=out)
    return 0
