"""``%%environment NAME`` and ``%environment``: parse, call the environment API, print."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, line_cell_magic, magics_class

from ... import environment
from ...environment.definition import KEYS
from ..commands.env import add_env_verbs
from ..commands.options import HelpRequested, OptionParser, split_line
from ..commands.parser import CommandParser
from ..commands.table import parse_command, run_command

if TYPE_CHECKING:
    from ...environment.definition import EnvDefinition

# argparse formats usage with %: "%%" is one "%"
USAGE = """\
%%%%environment NAME [--build]      define NAME from the cell's YAML
       %(prog)s NAME [options]      define NAME from options (%(prog)s NAME --help lists them)
       %(prog)s [VERB] [NAME]       list, show, export, build or prune environments"""

DESCRIPTION = (
    "Named environments for runs: a run uses one with %%train --env NAME (or NAME@VERSION). "
    'The cell\'s YAML has the keys {keys}, for example python: "3.11", pip: [pkg==1.2], '
    "env: {{VAR: value}}, inherit: true."
)


def _define_parser(prog: str, *, flags: bool) -> OptionParser:
    """What defines an environment: the cell form's line, or the line form's options (each
    sets the YAML key its help names)."""
    parser = OptionParser(
        prog=prog,
        usage="%(prog)s NAME [options]" if flags else "%(prog)s NAME [--build]",
        description="Each option sets the YAML key named in brackets." if flags else None,
    )
    parser.add_argument("name", metavar="NAME")
    parser.add_argument(
        "--build", action="store_true", help="build the environment now, so the first run reuses it"
    )
    if flags:
        parser.add_argument(
            "--pip", nargs="+", action="extend", default=[], metavar="REQ", help="packages (pip)"
        )
        parser.add_argument("--requirements", metavar="PATH", help="a requirements file (pip)")
        parser.add_argument("--python", metavar="VERSION", help="the Python version (python)")
        parser.add_argument(
            "--var",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="an environment variable of the ranks, repeatable (env)",
        )
        parser.add_argument(
            "--inherit",
            action="store_true",
            help="layer on the notebook kernel's packages (inherit)",
        )
        parser.add_argument("--image", metavar="REF", help="the container image (image)")
    return parser


def _verbs_parser() -> CommandParser:
    """``%environment``'s verbs: those of ``jupyter-trainer env``, from the same parsers."""
    parser = CommandParser(
        prog="%environment",
        usage=USAGE,
        description=DESCRIPTION.format(keys=", ".join(KEYS)),
    )
    actions = parser.add_subparsers(
        dest="action", metavar="VERB", parser_class=CommandParser, prog=parser.prog
    )
    add_env_verbs(actions)
    return parser


def _help() -> str:
    """What ``%environment`` alone with ``--help`` shows: the verbs, then the options that
    define one."""
    options = _define_parser("%environment", flags=True).format_help()
    return _verbs_parser().format_help() + "\n" + options


def _verbs() -> set[str]:
    return {
        verb
        for action in _verbs_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
        for verb in action.choices
    }


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
        if words and words[0] in ("help", "-h", "--help"):
            print(_help())
            return None
        if not words or words[0] in _verbs():
            run_command(parse_command(_verbs_parser(), words or ["list"]), sys.stdout)
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
