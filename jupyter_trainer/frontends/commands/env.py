"""``env [list | show NAME | export NAME [--requirements] | build NAME | prune [--dry-run]]``:
the named environments (``%environment`` defines them in a notebook)."""

from __future__ import annotations

import argparse
from typing import TextIO

from ...api import runs as api
from ...core.errors import SpecError
from .parser import Subparsers, handles, verbs


def define_env(sub: Subparsers, name: str) -> None:
    env = sub.add_parser(name, help="list, show, export, build or prune environments")
    handles(env, cmd_list)  # no verb: list
    add_env_verbs(verbs(env, required=False))


def add_env_verbs(actions: Subparsers) -> None:
    """The verbs of ``env``, which ``%environment`` has too."""
    handles(actions.add_parser("list", help="every environment (the default)"), cmd_list)
    show = actions.add_parser("show", help="an environment's definition, versions, lock, build")
    show.add_argument("name", metavar="NAME[@VERSION]")
    handles(show, cmd_show)
    export = actions.add_parser("export", help="an environment's lock as requirements text")
    export.add_argument("name", metavar="NAME[@VERSION]")
    export.add_argument(
        "--requirements",
        action="store_true",
        help="the requirements as defined, not the lock",
    )
    handles(export, cmd_export)
    build = actions.add_parser("build", help="lock and build an environment now")
    build.add_argument("name", metavar="NAME[@VERSION]")
    handles(build, cmd_build)
    prune = actions.add_parser(
        "prune",
        help="remove the builds that no latest version and no unfinished run uses",
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="list what would be removed, remove nothing"
    )
    prune.add_argument("name", nargs="?", help=argparse.SUPPRESS)  # to say why it takes none
    handles(prune, cmd_prune)


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    from ... import environment

    print(environment.environments_table(environment.list_environments()), file=out)
    return 0


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    from ... import environment

    print(environment.show_text(args.name), file=out)
    return 0


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    from ... import environment

    out.write(environment.export_text(args.name, requirements=args.requirements))
    return 0


def cmd_build(args: argparse.Namespace, out: TextIO) -> int:
    from ... import environment

    built = environment.build_environment(args.name)
    done = f"built in {built['build_seconds']:.1f} s" if built["built"] else "already built"
    print(f"environment {args.name}: {done}: {built['python']}", file=out)
    return 0


def cmd_prune(args: argparse.Namespace, out: TextIO) -> int:
    from ... import environment

    if args.name:
        raise SpecError(
            "env prune takes no NAME: it keeps every name's latest version and what "
            "unfinished runs use"
        )
    rows = api.prune_environments(dry_run=args.dry_run)
    print(environment.prune_text(rows, dry_run=args.dry_run), file=out)
    return 0
