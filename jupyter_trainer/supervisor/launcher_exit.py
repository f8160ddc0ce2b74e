"""What a run's launcher leaves when it ends: the moment it exited, whether a signal killed
it, and the last words of its log. The supervisor hands them to ``verdict``."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from . import attribution
from .verdict import TRACEBACK_TAIL


class LauncherExit:
    def __init__(self, log_path: Path, launcher: str) -> None:
        self.log_path = log_path
        self.launcher = launcher
        self.at: float | None = None  # when the launcher exited, if this process saw it

    def time(self, handle: dict[str, Any] | None) -> None:
        """Note the moment the launcher exits, when it is this process's child (the local
        target): a thread waits for it with ``WNOWAIT``, so ``poll`` still reaps it. Ranks
        that die because their launcher died die after this time; the poll loop alone would
        see the exit up to a poll later, after some of them."""
        self.at = None
        pid = (handle or {}).get("pid")
        if not isinstance(pid, int) or pid <= 0:
            return
        flags = os.WEXITED | os.WNOWAIT
        try:
            if os.waitid(os.P_PID, pid, flags | os.WNOHANG) is not None:
                self.at = time.time()
                return
        except ChildProcessError:
            return  # not our child: the launcher runs elsewhere

        def wait() -> None:
            try:
                os.waitid(os.P_PID, pid, flags)
            except ChildProcessError:
                pass  # reaped by poll() meanwhile: it has exited just now
            self.at = time.time()

        threading.Thread(target=wait, name="launcher-exit", daemon=True).start()

    def death(self, outcome: dict[str, Any]) -> attribution.Death | None:
        """The launcher, if a signal killed it while the ranks ran. Under ``--launcher
        python`` the launcher is rank 0 itself, whose own record speaks for it."""
        if "launcher_exit" not in outcome or self.launcher == "python":
            return None
        seen = [t for t in (self.at, outcome.get("launcher_seen_exit")) if t is not None]
        return attribution.launcher_death(outcome["launcher_exit"], min(seen, default=None))

    def log_tail(self, chars: int = TRACEBACK_TAIL) -> str | None:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - chars))
                return fh.read().decode(errors="replace") or None
        except FileNotFoundError:
            return None
