"""Start a sweep's driver: ``python -m jupyter_trainer.api.sweeps.driver_start --detach SWEEP_ID``
checks that the sweep can be driven (its spec is valid, it has not ended, no other driver
holds it), then detaches into its own session and runs ``driver.SweepDriver``. Whatever
stops it before it detaches is one line on stderr, which ``start_driver`` reports."""

from __future__ import annotations

import argparse
import fcntl
import os
import sys

from ...core.errors import SpecError, TrainerError
from ...core.logs import process_log
from ...core.modes import SHARED_UMASK
from ...rankside.host import procs
from ...store import Store, read_json
from ...store.sweeps import SWEEP_TERMINAL, SweepStore


def start_driver(home: str, sweep_id: str) -> None:
    """Start the sweep's driver in its own session; returns once it has detached."""
    import subprocess

    from ...rankside.host.home import HOME_ENV

    done = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer.api.sweeps.driver_start", "--detach", sweep_id],
        env={**os.environ, HOME_ENV: str(home)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise TrainerError(
            f"the driver of sweep {sweep_id} did not start: {done.stderr.strip()[-2000:]}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_trainer.api.sweeps.driver_start")
    parser.add_argument("sweep_id")
    parser.add_argument("--detach", action="store_true")
    args = parser.parse_args(argv)
    store = Store()
    if store.settings.shared:  # what the sweep writes, the team reads
        os.umask(SHARED_UMASK)
    sweeps = SweepStore(store.home)
    paths = sweeps.existing(args.sweep_id)
    try:
        check_spec(sweeps, args.sweep_id)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    state = read_json(paths.state)
    if state["status"] in SWEEP_TERMINAL and state["status"] != "failed":
        print(f"sweep {args.sweep_id} already ended ({state['status']})", file=sys.stderr)
        return 2
    if state["status"] == "running" and not sweeps.driver_gone(state):
        print(
            f"sweep {args.sweep_id} already has a driver (pid {state['driver']['pid']})",
            file=sys.stderr,
        )
        return 2
    lock = open(paths.root / "driver.lock", "w")
    try:  # held for the driver's life (the detached child inherits it)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"sweep {args.sweep_id} already has a driver", file=sys.stderr)
        return 2
    if args.detach:
        procs.detach()
    procs.redirect_output(paths.log)
    process_log("jupyter_trainer.api.sweeps.driver")
    from .driver import SweepDriver

    return SweepDriver(store, args.sweep_id).run()


def check_spec(sweeps: SweepStore, sweep_id: str) -> None:
    """``SpecError`` naming what is wrong with the stored spec of a sweep (one written
    before a check that now refuses it), so that no driver starts that would die on it."""
    from .spec import SweepSpec

    try:
        SweepSpec.from_dict(sweeps.read_spec(sweep_id))
    except SpecError as exc:
        raise SpecError(
            f"sweep {sweep_id} cannot run: its spec ({sweeps.paths(sweep_id).spec}) "
            f"is not valid: {exc}; start a new sweep with valid options"
        ) from None


if __name__ == "__main__":
    sys.exit(main())
