"""The commands of targets: ``targets`` (the list) and ``target add NAME --kind KIND
[--team]``."""

from __future__ import annotations

import argparse
from typing import TextIO

from ..views.text import targets_table
from .options import add_target_options
from .parser import Subparsers, handles, verbs


def define_targets(sub: Subparsers, name: str) -> None:
    handles(sub.add_parser(name, help="list the targets runs can go to"), cmd_targets)


def cmd_targets(args: argparse.Namespace, out: TextIO) -> int:
    from ...targets import configured_targets

    print(targets_table(configured_targets()), file=out)
    return 0


def define_target(sub: Subparsers, name: str) -> None:
    target = sub.add_parser(name, help="add a target to targets.toml")
    add = verbs(target, required=True).add_parser(
        "add", help="validate a target and save it in targets.toml"
    )
    add_target_options(add)
    add.add_argument(
        "--team",
        action="store_true",
        help="in a workspace: save it in the team's targets.toml, which every member uses "
        "(the workspace's administrator only); without it a target is your own",
    )
    handles(add, cmd_target_add)


def cmd_target_add(args: argparse.Namespace, out: TextIO) -> int:
    from ...targets.registry import add_target, parse_settings

    path = add_target(
        args.name,
        args.kind,
        replace=args.replace,
        team=args.team,
        **parse_settings(args.settings),
    )
    print(f"target {args.name!r} saved in {path}", file=out)
    return 0
