"""``%%environment NAME`` and ``%environment``: parse, call the environment API, print."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, line_cell_magic, magics_class

from ... import environment
from ...api import runs as api
from ..commands.options import HelpRequested, OptionParser, split_line

if TYPE_CHECKING:
    from ...environment.definition import EnvDefinition

HELP = """\
%%environment NAME [--build]     define NAME from the cell's YAML body:
                                   python: "3.11"      inherit: true
                                   pip: [pkg==1.2, ...]  (or pip: {requirements: PATH})
                                   env: {VAR: "value"}  image: REF
%environment NAME [--pip A B ...] [--requirements PATH] [--python 3.11] [--var K=V ...]
                  [--inherit] [--image REF] [--build]      define NAME from flags
%environment                     list environments
%environment show NAME[@VERSION]  the definition, its versions, lock and build
%environment export NAME[@VERSION] [--requirements]   the lock (or the requirements) as text
%environment build NAME[@VERSION]  lock and build it now (a run would do it otherwise)
%environment prune [--dry-run]    remove built environments that no latest version and no
                                   unfinished run uses (definitions and locks stay)

A run uses one with %%train --env NAME (or NAME@VERSION)."""


def _define_parser(prog: str, *, flags: bool) -> OptionParser:
    parser = OptionParser(
        prog=prog, description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name")
    parser.add_argument(
        "--build", action="store_true", help="build the environment now, so the first run reuses it"
    )
    if flags:
        parser.add_argument("--pip", nargs="+", action="extend", default=[], metavar="REQ")
        parser.add_argument("--requirements", metavar="PATH")
        parser.add_argument("--python", metavar="VERSION")
        parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE")
        parser.add_argument(
            "--inherit", action="store_true", help="layer on the notebook kernel's packages"
        )
        parser.add_argument("--image", metavar="REF")
    return parser


def _named_parser(command: str) -> OptionParser:
    parser = OptionParser(prog=f"%environment {command}")
    parser.add_argument("name")
    if command == "export":
        parser.add_argument(
            "--requirements", action="store_true", help="the requirements as defined, not the lock"
        )
    return parser


@magics_class
class EnvironmentMagics(Magics):
    @line_cell_magic
    def environment(self, line: str, cell: str | None = None) -> Any:
        try:
            if cell is None:
                return self._line(line)
            opts = _define_parser("%%environment", flags=False).parse_args(split_line(line)[0])
            definition = environment.EnvDefinition.from_yaml(opts.name, cell, Path(os.getcwd()))
            return self._define(definition, opts.build)
        except HelpRequested as shown:
            print(shown.text)
            return None

    def _define(self, definition: EnvDefinition, build: bool) -> None:
        info = environment.define(definition, build=build)
        what = "new version" if info["new"] else "unchanged"
        plural = "s" if info["pins"] != 1 else ""
        text = (
            f"environment {info['name']} version {info['version']} ({what}): "
            f"{info['pins']} pinned package{plural}, lock {info['lock']}"
        )
        if "build" in info:
            built = info["build"]
            text += (
                f"; built in {built['build_seconds']:.1f} s"
                if built["built"]
                else "; already built"
            )
        print(text)

    def _line(self, line: str) -> None:
        words, _ = split_line(line)
        if not words or words[0] == "list":
            print(environment.environments_table(environment.list_environments()))
            return None
        if words[0] in ("help", "-h", "--help"):
            print(HELP)
            return None
        if words[0] == "prune":
            parser = OptionParser(prog="%environment prune")
            parser.add_argument(
                "--dry-run", action="store_true", help="list what would be removed, remove nothing"
            )
            opts = parser.parse_args(words[1:])
            rows = api.prune_environments(dry_run=opts.dry_run)
            print(environment.prune_text(rows, dry_run=opts.dry_run))
            return None
        if words[0] in ("show", "export", "build"):
            opts = _named_parser(words[0]).parse_args(words[1:])
            if words[0] == "show":
                print(environment.show_text(opts.name))
            elif words[0] == "export":
                print(environment.export_text(opts.name, requirements=opts.requirements), end="")
            else:
                built = environment.build_environment(opts.name)
                print(
                    f"environment {opts.name}: "
                    + (
                        f"built in {built['build_seconds']:.1f} s"
                        if built["built"]
                        else "already built"
                    )
                    + f": {built['python']}"
                )
            return None
        opts = _define_parser("%environment", flags=True).parse_args(words)
        if not (
            opts.pip or opts.requirements or opts.python or opts.var or opts.inherit or opts.image
        ):
            print(environment.show_text(opts.name))  # `%environment NAME` alone shows it
            return None
        definition = environment.from_line(
            opts.name,
            pip=opts.pip,
            requirements=opts.requirements,
            python=opts.python,
            variables=opts.var,
            inherit=opts.inherit,
            image=opts.image,
            base_dir=Path(os.getcwd()),
        )
        return self._define(definition, opts.build)
