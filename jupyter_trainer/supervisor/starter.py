"""Start a run's supervisor, and keep one warm for the next run.

``python -m jupyter_trainer.supervisor --detach -`` imports what a run needs, then reads the
run id from its stdin. ``submit`` takes one before it writes the run (so the interpreter
starts while the snapshot is captured), hands it the id once the run exists, and then keeps
a fresh one waiting for the next ``submit`` from this process: a notebook that runs cells
one after another finds its supervisor already started. A waiting supervisor holds no run;
it is used only while this process's environment, working directory and run store are the
ones it was started with, and it exits when told to or when this process ends (its stdin
closes).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading

from ..core.errors import LaunchError
from ..store import HOME_ENV

SPARE_ENV = "JT_SPARE_SUPERVISOR"  # "0": start a supervisor for each run only, keep none


class SupervisorStarter:
    """One supervisor interpreter, started for the run store ``home`` and the target
    ``target`` (whose code it imports while it waits)."""

    def __init__(self, home: str, target: str) -> None:
        self.home, self.target, self.cwd = home, target, os.getcwd()
        self.env = {**os.environ, HOME_ENV: home}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_trainer.supervisor",
                "--detach",
                f"--target={target}",
                "-",
            ],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def fits(self, home: str, target: str) -> bool:
        """Whether this (waiting) supervisor would run a run of ``target`` in ``home`` exactly
        as a new one started now would."""
        return (
            self.proc.poll() is None
            and home == self.home
            and target == self.target
            and os.getcwd() == self.cwd
            and {**os.environ, HOME_ENV: home} == self.env
        )

    def start(self, run_id: str) -> None:
        """Hand it ``run_id``; returns once it has detached into its own session."""
        try:
            _, err = self.proc.communicate(run_id + "\n", timeout=60)
        except subprocess.TimeoutExpired:
            self.abandon()
            err = "it did not detach within 60 s"
        if self.proc.returncode != 0:
            raise LaunchError(f"the supervisor of run {run_id} did not start: {err.strip()}")

    def abandon(self) -> None:
        """End it without a run."""
        self.proc.kill()
        self.proc.communicate()


_lock = threading.Lock()
_spare: SupervisorStarter | None = None


def take(home: str, target: str) -> SupervisorStarter:
    """A supervisor for the next run: the waiting one if it fits, else a new one."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None:
        if spare.fits(home, target):
            return spare
        spare.abandon()
    return SupervisorStarter(home, target)


def give_back(starter: SupervisorStarter) -> None:
    """``starter`` was not needed (the run was refused): keep it for the next run."""
    global _spare
    with _lock:
        kept = _spare is None and starter.proc.poll() is None and spares_wanted()
        if kept:
            _spare = starter
    if not kept:
        starter.abandon()


def keep_spare(home: str, target: str) -> None:
    """Start a supervisor that waits for this process's next run."""
    global _spare
    if not spares_wanted():
        return
    with _lock:
        if _spare is None:
            _spare = SupervisorStarter(home, target)


def release_spare() -> None:
    """End the waiting supervisor, if there is one."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None:
        spare.abandon()


_one_shot = False


def no_spare() -> None:
    """This process starts one run or sweep and ends (a command line): keep no supervisor
    waiting after it, since none would be used."""
    global _one_shot
    _one_shot = True


def spares_wanted() -> bool:
    return not _one_shot and os.environ.get(SPARE_ENV, "1") != "0"


atexit.register(release_spare)
