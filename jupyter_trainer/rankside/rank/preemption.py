"""``jt.preempted()``: whether a preemption has been announced to this rank.

A scheduler announces a preemption with a signal before it takes the nodes back: Slurm's
``--signal=USR1@SECONDS``, ``jupyter-trainer preempt RUN`` (which does the same on this
machine and on ssh hosts) and a cloud's spot-termination notice through it. The signal is
SIGUSR1 (``SIGNAL``), the one Slurm users and Lightning's auto-requeue already know. It is
handled without ending the rank: the handler only notes the time; the training loop asks
``jt.preempted()`` between steps, saves a checkpoint (``jt.checkpoint.save``) and returns.
A handler that was there before (installed by the user's code before the runtime) is
called after ours, so a framework's own handling goes on.

Standard library only (the rank side rule).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

SIGNAL = signal.SIGUSR1
ENV_OFF = "JT_PREEMPT_HANDLER"  # "0": leave SIGUSR1 to the user's code (Lightning's requeue)

_announced: float | None = None  # when this rank received the announcement (time.time())
_previous: Any = signal.SIG_DFL
_installed = False


def preempted() -> bool:
    """True once a preemption has been announced to this rank (a SIGUSR1 it received).
    Ask it between steps: save a checkpoint with ``jt.checkpoint.save`` and return."""
    return _announced is not None


def announced_at() -> float | None:
    """When the preemption was announced to this rank (seconds since the epoch), or None."""
    return _announced


def _on_signal(signum: int, frame: Any) -> None:
    global _announced
    if _announced is None:
        _announced = time.time()
        try:
            os.write(2, b"[jt] preemption announced (SIGUSR1): jt.preempted() is now True\n")
        except OSError:
            pass
    previous = _previous
    if callable(previous):
        previous(signum, frame)


def install() -> None:
    """Handle SIGUSR1 as a preemption announcement (in the main thread, once). Nothing is
    installed with ``JT_PREEMPT_HANDLER=0``, nor where SIGUSR1 is ignored."""
    global _installed, _previous
    if _installed or os.environ.get(ENV_OFF) == "0":
        return
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        current = signal.getsignal(SIGNAL)
        if current is signal.SIG_IGN:
            return
        _previous = current
        signal.signal(SIGNAL, _on_signal)
    except (ValueError, OSError) as exc:  # not the main interpreter: no handler, say why
        print(f"[jt] jt.preempted() cannot see SIGUSR1 here: {exc}", file=sys.stderr)
        return
    _installed = True
