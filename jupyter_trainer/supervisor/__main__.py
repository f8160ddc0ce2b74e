"""``python -m jupyter_trainer.supervisor [--detach] RUN_ID``: drive one run (``run.py``).

With ``-`` for the run id, the process imports what a run of ``--target`` needs first, then
reads the run id from stdin once the caller has written the run (``starter.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import environment
from ..core.logs import process_log
from ..core.modes import SHARED_UMASK
from ..rankside.host import procs
from ..store import Store
from ..targets import get_target
from .run import Supervisor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_trainer.supervisor")
    parser.add_argument("run_id", help="the run, or - to read it from stdin once ready")
    parser.add_argument("--detach", action="store_true")
    parser.add_argument("--target", help="the run's target, to load its code while waiting")
    args = parser.parse_args(argv)
    store = Store()
    if store.settings.shared:  # what the run and its ranks write, the team reads
        os.umask(SHARED_UMASK)
    if args.run_id == "-":
        _warm_up(store, args.target)
        args.run_id = sys.stdin.readline().strip()
        if not args.run_id:  # the caller abandoned the run before it existed
            return 0
    paths = store.existing(args.run_id)
    if args.detach:
        procs.detach()
    procs.redirect_output(paths.supervisor_log)
    process_log("jupyter_trainer.supervisor")
    return Supervisor(store, args.run_id).run()


def _warm_up(store: Store, target: str | None) -> None:
    """Import what the run will need (the environment stages, the target's module) while
    the caller is still writing the run."""
    try:
        environment.realize  # noqa: B018 (loads the module)
        if target:
            get_target(target, store.home).warm_up()
    except Exception:  # the run itself reports any problem, in its state
        pass


if __name__ == "__main__":
    sys.exit(main())
