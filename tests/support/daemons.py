"""Daemons that test fixtures start (sshd, Slurm, MariaDB; PostgreSQL through a watcher,
in pg_server.py) end with the pytest process that started them, also when that process dies
without tearing its fixtures down (killed by a timeout, by SIGKILL, or by a second Ctrl-C):
otherwise they would outlive the suite and hold ports and CPU beside the next one."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def die_with_this_process() -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets SIGTERM when the calling
    process ends, and ends at once if that has already happened before it could ask."""
    parent = os.getpid()

    def arrange() -> None:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return arrange
