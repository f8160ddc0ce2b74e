"""``session`` and ``sessions``: live sessions, for ``jupyter-trainer`` and ``%train``.

``session start NAME`` starts ranks that stay alive; ``session run NAME`` runs code on them
(``%%train --session NAME`` runs a cell); ``pull`` and ``push`` move values; ``interrupt``,
``save``, ``restart`` and ``stop`` act on the session; ``sessions`` lists this user's."""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from ...api import sessions as session_api
from ...api.session_restart import restarted_text
from ...core.errors import SpecError
from ...core.spec import BACKENDS, LAUNCHERS
from ..views.text import columns
from .parser import Subparsers, at_least, handles, verbs


def define_session(sub: Subparsers, name: str) -> None:
    session = sub.add_parser(
        name,
        help="a live session: ranks that stay alive across cells (start, run, pull, ...)",
        description="A live session keeps its ranks, their process group and what its cells "
        "built alive between cells: %%train --session NAME runs a cell on every rank. "
        "See docs/sessions.md.",
    )
    actions = verbs(session, required=True)
    start = actions.add_parser("start", help="start a session's ranks and join them")
    start.add_argument("name", metavar="NAME")
    add_session_options(start)
    handles(start, cmd_start)
    run = actions.add_parser("run", help="run code on every rank of a session")
    run.add_argument("name", metavar="NAME")
    code = run.add_mutually_exclusive_group(required=True)
    code.add_argument("file", nargs="?", default=None, metavar="FILE", help="a file of code")
    code.add_argument("-c", dest="code", default=None, metavar="CODE", help="the code itself")
    handles(run, cmd_run)
    pull = actions.add_parser("pull", help="the value of an expression on a rank")
    pull.add_argument("name", metavar="NAME")
    pull.add_argument("expr", metavar="EXPR")
    which = pull.add_mutually_exclusive_group()
    which.add_argument("--rank", type=at_least(0), default=0, help="the rank (default: 0)")
    which.add_argument("--all", action="store_true", help="every rank's value, as a list")
    handles(pull, cmd_pull)
    push = actions.add_parser("push", help="set values in every rank's namespace")
    push.add_argument("name", metavar="NAME")
    push.add_argument(
        "values",
        nargs="+",
        metavar="VAR|KEY=VALUE",
        help="KEY=VALUE sets KEY to a Python literal; in a notebook, a bare VAR sends the "
        "notebook's variable",
    )
    handles(push, cmd_push)
    for verb, helped in (
        ("interrupt", "interrupt the cell a session's ranks are running"),
        (
            "restart",
            "start a session again (every namespace is new), or with --rank R "
            "bring back a rank that died (the others keep their namespaces)",
        ),
        ("stop", "end a session: its ranks exit"),
    ):
        act = actions.add_parser(verb, help=helped)
        act.add_argument("name", metavar="NAME")
        if verb == "restart":
            act.add_argument(
                "--rank",
                type=at_least(0),
                action="append",
                default=None,
                metavar="R",
                help="a rank that died, to bring back alone (repeatable); its namespace "
                "starts empty",
            )
        handles(act, cmd_act)
    save = actions.add_parser("save", help="a run that replays the session's cells")
    save.add_argument("name", metavar="NAME")
    save.add_argument("--as", dest="run_name", default=None, metavar="RUN_NAME")
    save.add_argument("--wait", action="store_true", help="follow the run to its end")
    handles(save, cmd_save)


def add_session_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="local", help="where the ranks run (default: local)")
    parser.add_argument("--nodes", type=at_least(1), default=1, help="number of nodes")
    parser.add_argument("--procs", type=at_least(1), default=1, help="ranks per node")
    parser.add_argument("--launcher", default="torchrun", metavar="|".join(LAUNCHERS))
    parser.add_argument("--backend", default=None, metavar="|".join(BACKENDS))
    parser.add_argument("--env", default=None, metavar="NAME", help="a named environment")
    parser.add_argument(
        "--hot",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fork the ranks from a warm pool (the default where a run would be hot); "
        "--no-hot: torchrun starts them",
    )
    parser.add_argument(
        "--stop-on-nan",
        action="append",
        default=[],
        metavar="METRIC",
        help="end the session when a cell logs METRIC as NaN or inf (repeatable)",
    )
    parser.add_argument(
        "--idle",
        type=float,
        default=session_api.DEFAULT_IDLE,
        metavar="SECONDS",
        help="end the session after this long without a cell (default: 3600)",
    )


def start_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "procs": args.procs,
        "nodes": args.nodes,
        "target": args.target,
        "launcher": args.launcher,
        "backend": args.backend,
        "env": args.env,
        "idle": args.idle,
        "hot": args.hot,
        "stop_on_nan": args.stop_on_nan,
    }


def define_sessions(sub: Subparsers, name: str) -> None:
    listing = sub.add_parser(name, help="your running live sessions")
    listing.add_argument("--json", action="store_true", help="one JSON object per session")
    handles(listing, cmd_sessions)


def cmd_start(args: argparse.Namespace, out: TextIO) -> int:
    started = session_api.start_session(args.name, **start_kwargs(args))
    print(described(started), file=out)
    return 0


def described(session: session_api.Session) -> str:
    ranks = session.world_size
    return (
        f"session {session.name} ready: {ranks} rank{'s' if ranks > 1 else ''} "
        f"(run {session.id}); run a cell on it with %%train --session {session.name}"
    )


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    if args.code is not None:
        code = args.code
    elif args.file == "-":
        code = sys.stdin.read()
    else:
        with open(args.file, encoding="utf-8") as f:
            code = f.read()
    session_api.session(args.name).run(code, stream=out)
    return 0


def cmd_pull(args: argparse.Namespace, out: TextIO) -> int:
    value = session_api.session(args.name).pull(args.expr, None if args.all else args.rank)
    print(repr(value), file=out)
    return 0


def pushed_values(words: list[str], namespace: Mapping[str, Any] | None) -> dict[str, Any]:
    """``push``'s words as values: ``KEY=VALUE`` a Python literal (or the string itself),
    a bare ``VAR`` the variable of ``namespace`` (a notebook's)."""
    values: dict[str, Any] = {}
    for word in words:
        key, eq, text = word.partition("=")
        if not key.isidentifier():
            raise SpecError(f"push {word!r}: give VAR or KEY=VALUE, KEY a Python name")
        if eq:
            try:
                values[key] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                values[key] = text
        elif namespace is None:
            raise SpecError(f"push {word}: outside a notebook, give {word}=VALUE")
        elif key not in namespace:
            raise SpecError(f"push {word}: the notebook has no variable {word!r}")
        else:
            values[key] = namespace[key]
    return values


def cmd_push(args: argparse.Namespace, out: TextIO) -> int:
    values = pushed_values(args.values, None)
    session_api.session(args.name).push(**values)
    print(f"pushed {', '.join(values)} to session {args.name}", file=out)
    return 0


def cmd_act(args: argparse.Namespace, out: TextIO) -> int:
    found = session_api.session(args.name)
    if args.action == "interrupt":
        found.interrupt()
        print(f"session {args.name}: interrupt sent to every rank", file=out)
    elif args.action == "restart" and args.rank:
        found.restart(rank=args.rank, stream=out)
        print(restarted_text(found, found.restarts()[-1]), file=out)
    elif args.action == "restart":
        print(described(found.restart()), file=out)
    else:
        status = found.stop()
        print(f"session {args.name} stopped (run {found.id}: {status})", file=out)
    return 0


def cmd_save(args: argparse.Namespace, out: TextIO) -> int:
    run = session_api.session(args.name).save(args.run_name, wait=args.wait)
    print(
        f"session {args.name} saved as run {run.id}; `jupyter-trainer rerun {run.id}` replays it",
        file=out,
    )
    return 0


def cmd_sessions(args: argparse.Namespace, out: TextIO) -> int:
    rows = []
    for live in session_api.sessions():
        spec = live.record.spec
        stages = live.record.state.get("stages") or {}
        started = (stages.get("running") or {}).get("start") or 0
        rows.append(
            {
                "name": live.name,
                "run": live.id,
                "ranks": live.world_size,
                "target": spec.target.name,
                "status": live.status,
                "cells": live.files.count(),
                "dead_ranks": sorted(live.dead()),
                "restarted_ranks": [r for e in live.restarts() for r in e.get("ranks", [])],
                "age_s": round(time.time() - started, 1) if started else None,
            }
        )
    if args.json:
        for row in rows:
            print(json.dumps(row), file=out)
        return 0
    if not rows:
        print("no live sessions; start one with `session start NAME --procs N`", file=out)
        return 0
    head = ["NAME", "RUN", "RANKS", "TARGET", "STATUS", "REQUESTS"]
    keys = ["name", "run", "ranks", "target", "status", "cells"]
    print(columns(head, [[r[k] for k in keys] for r in rows]), file=out)
    return 0
