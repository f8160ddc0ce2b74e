"""``%%train --session NAME`` and the ``%train session`` verbs that need the notebook: a
cell run on a live session's ranks, ``start`` (which shows the session's view), ``pull``
(whose value is the cell's) and ``push`` (of notebook variables)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from IPython.display import display

from ...api import sessions as session_api
from ...core.errors import SpecError
from ..commands.options import cell_parser
from ..commands.sessions import described, pushed_values, start_kwargs
from ..widgets import monitor_mode

# What --session leaves to the session: it was started with them.
_LAUNCH = ("target", "nodes", "procs", "launcher", "backend", "env", "source", "hot")


def run_session_cell(shell: Any, opts: argparse.Namespace, code: str, origin: dict) -> None:
    """Run the cell ``code`` on every rank of the session ``opts.session``."""
    if getattr(opts, "debug", False):
        raise SpecError(
            f"%%train --session {opts.session} --debug: a session offers no debugger. A "
            "cell's exception comes back with each rank's traceback and the ranks keep their "
            f"namespaces: look at them with %train session pull {opts.session} EXPR, or run "
            "the cell as a run of its own with %%train --debug"
        )
    defaults = cell_parser().parse_args([])
    given = [
        f"--{key.replace('_', '-')}"
        for key, value in vars(opts).items()
        if key not in ("session", "param") and value != getattr(defaults, key, value)
    ]
    if given:
        raise SpecError(
            f"%%train --session runs the cell on the session's ranks, started with their "
            f"own options: leave out {', '.join(given)} (-p KEY=VALUE may stay)"
        )
    found = session_api.session(opts.session)
    try:
        found.run(
            code,
            namespace=shell.user_ns,
            history=list(shell.user_ns.get("In", [])),
            params=dict(opts.param) if opts.param else None,
            cell=origin.get("cell"),
            first_line=2,
            stream=sys.stdout,
        )
    except KeyboardInterrupt:
        raise KeyboardInterrupt(
            f"the cell was interrupted on every rank; session {found.name!r} goes on"
        ) from None


def session_line(shell: Any, opts: argparse.Namespace, origin: dict) -> tuple[bool, Any]:
    """``(True, value)`` where this module runs the ``%train session`` verb, else
    ``(False, None)`` (the command table's handler runs it, as in the CLI)."""
    if opts.action == "start":
        started = session_api.start_session(opts.name, **start_kwargs(opts), origin=origin)
        print(described(started))
        if monitor_mode() == "widget":
            from ..widgets.widget import RunMonitor

            display(RunMonitor(started.record))
        return True, None
    if opts.action == "pull":
        found = session_api.session(opts.name)
        return True, found.pull(opts.expr, None if opts.all else opts.rank)
    if opts.action == "push":
        values = pushed_values(opts.values, shell.user_ns)
        session_api.session(opts.name).push(**values)
        print(f"pushed {', '.join(values)} to session {opts.name}")
        return True, None
    return False, None
