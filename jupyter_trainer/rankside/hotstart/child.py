"""What a rank forked by a pool does before it is the rank: become what torchrun's worker
would be (process group, death with the pool, stdio, environment, working directory,
``sys.argv``, fresh random state, torch's thread count), then run the snapshot's boot.py as ``__main__``."""

from __future__ import annotations

import atexit
import ctypes
import os
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Iterable
from typing import Any

from ..host import procs

_PR_SET_PDEATHSIG = 1
STORE_FD_ENV = "JT_STORE_LISTEN_FD"  # rank 0: the listening socket the pool bound for its store


def _die_with_pool(pool: int) -> None:
    """SIGKILL this rank the moment the pool (its parent) dies, whatever kills the pool."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != pool:  # the pool died before prctl took effect
        os._exit(128 + signal.SIGKILL)


def _fresh_random_state() -> None:
    """A forked rank would share the pool's random state; a new interpreter seeds anew."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            numpy.random.seed()
        except Exception:
            pass


def _threads_as_set() -> None:
    """torch read ``OMP_NUM_THREADS`` when the pool imported it; a new interpreter would
    read the rank's value (1 where several ranks share a node), so apply it now."""
    torch = sys.modules.get("torch")
    wanted = os.environ.get("OMP_NUM_THREADS", "")
    if torch is not None and wanted.isdigit() and int(wanted) > 0:
        torch.set_num_threads(int(wanted))


def _python_shutdown() -> None:
    """What the interpreter does before it ends, as ``python boot.py`` would: join the
    rank's non-daemon threads, then run the atexit handlers the rank registered."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()


def run_rank(
    request: dict[str, Any], rank: dict[str, Any], pool: int, pgid: int, close_fds: Iterable[int]
) -> None:
    """Never returns: the forked child ends with ``os._exit`` and the rank's exit code."""
    code = 1
    try:
        os.setpgid(0, pgid or 0)
        _die_with_pool(pool)
        # what the rank starts stays below it while it lives, whatever session it makes,
        # and comes to the pool, which ends it with the run, when the rank ends
        procs.become_subreaper()
        atexit._clear()  # the pool's handlers are not the rank's
        for fd in close_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        # Like torchrun's worker: stdout and stderr are the launcher's log until boot.py
        # sends them to logs/rank-<r>.log.
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.environ.clear()
        os.environ.update(rank["env"])
        os.chdir(request["cwd"])
        boot = request["argv"][0]
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(boot))  # as for ``python boot.py``
        _fresh_random_state()
        _threads_as_set()
        try:
            runpy.run_path(boot, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        _python_shutdown()
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code & 0xFF if code >= 0 else 1)
