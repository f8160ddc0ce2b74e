"""``workspace import STORE``: copy a personal store's runs, sweeps and models into the
workspace (``$JUPYTER_TRAINER_HOME``)."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from ...api.workspace import import_store
from .parser import Subparsers, handles, verbs


def define_workspace(sub: Subparsers, name: str) -> None:
    parser = sub.add_parser(
        name,
        help="the shared workspace: import a personal store into it",
        description="A workspace is the run store at $JUPYTER_TRAINER_HOME; a team shares one "
        "with its index on PostgreSQL (JUPYTER_TRAINER_INDEX, or index in its config.toml).",
    )
    actions = verbs(parser, required=True)
    imported = actions.add_parser(
        "import",
        help="copy a personal store's runs, sweeps and models into this workspace",
        description="Copy every run, sweep and model version of STORE that the workspace lacks, "
        "keeping ids, version numbers and lineage. A second import changes nothing; runs "
        "still running are skipped; STORE is only read.",
    )
    imported.add_argument("store", help="the personal store's folder, like ~/.jupyter_trainer")
    imported.add_argument("--json", action="store_true", help="print what was done as JSON")
    handles(imported, cmd_import)


def cmd_import(args: argparse.Namespace, out: TextIO) -> int:
    report = import_store(args.store)
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.text(), file=out)
    return 0
