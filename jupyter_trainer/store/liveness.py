"""Whether a run's supervisor still runs, told from the run's records, and asking it to
cancel the run, even when the run's ``state.json`` is damaged.

A reader finds the supervisor in the state (``state["supervisor"]``) or, when the state
cannot be read, in the supervisor's own pid record (``supervisor.pid``, written when it
starts). Both hold its pid, host and start time in clock ticks, so a reused pid is not
taken for it. ``supervisor.alive`` is touched every ``HEARTBEAT_S`` while it lives: a
reader that finds it gone dates the run's end to the last touch.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..core.errors import RecordDamaged, RunStateError, StoreError
from ..core.records import PidRecord
from ..rankside import procs
from .records import ACTIVE, RunPaths, read_supervisor, write_json_atomic

# A run still "created" this long after creation never got a supervisor.
CREATED_GRACE_S = 60.0
# How often a live supervisor touches ``supervisor.alive``.
HEARTBEAT_S = 1.0
STOP_GRACE_S = 3.0  # SIGTERM -> SIGKILL, for processes of a run whose supervisor is gone


def supervisor_gone(state: Mapping[str, Any]) -> bool:
    """True when the supervisor the state names has ended (on this host; another host's
    supervisor is taken to run)."""
    sup = state.get("supervisor")
    if not sup:
        return time.time() - float(state.get("created", 0)) > CREATED_GRACE_S
    return _gone(sup)


def supervisor_running(paths: RunPaths) -> bool:
    """True while the supervisor named by the run's pid record runs (when the state cannot
    be read, this is how a reader finds it)."""
    record = read_supervisor(paths)
    return record is not None and not _gone(record)


def _gone(sup: dict[str, Any]) -> bool:
    if sup.get("host") != socket.gethostname():
        return False
    return not procs.is_alive(sup.get("pid"), sup.get("start_ticks"))


def last_seen(paths: RunPaths, state: Mapping[str, Any]) -> float:
    """When the run's supervisor was last known alive: its heartbeat, else its last state
    write, else the run's creation."""
    times = [state.get("updated") or 0.0, state.get("created") or 0.0]
    try:
        times.append(paths.heartbeat.stat().st_mtime)
    except OSError:
        pass
    return max(times)


def write_cancel_request(
    paths: RunPaths, reason: str, elsewhere: Callable[[], object] | None = None
) -> None:
    """Write ``cancel.request``. On a full disk, an empty one (it needs no data blocks):
    the supervisor reads that as a cancel without a reason. Where the run's folder refuses
    this user (an admin cancelling another user's run), ``elsewhere()`` leaves the request
    in the workspace instead (``requests``)."""
    try:
        write_json_atomic(paths.cancel_request, {"requested": time.time(), "reason": reason})
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):  # another user's run, as an admin
            if elsewhere is None:
                raise StoreError(
                    f"cannot ask for the cancel of the run in {paths.root}: only its owner "
                    f"may write there ({exc.strerror})"
                ) from None
            try:
                elsewhere()
                return
            except OSError as again:
                raise StoreError(
                    f"cannot ask for the cancel of the run in {paths.root}: only its owner "
                    f"may write there ({exc.strerror}), and the workspace's requests folder "
                    f"refused it too ({again}); make that folder writable by the team's group"
                ) from None
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise StoreError(
                f"cannot ask for the cancel of the run in {paths.root}: {exc.strerror or exc}"
            ) from None
        try:
            paths.cancel_request.touch()
        except OSError as again:
            raise StoreError(
                f"cannot ask for the cancel of the run in {paths.root}: {again.strerror or again}"
            ) from None


def cancel_damaged(
    paths: RunPaths,
    damaged: RecordDamaged,
    indexed: str | None,
    reason: str,
    elsewhere: Callable[[], object] | None = None,
) -> str:
    """Cancel a run whose state cannot be read: through its supervisor while that runs
    (found by its pid record), else by ending what is left of its processes here. Returns
    the status to report: the index row's, or ``lost`` when no supervisor was left."""
    if supervisor_running(paths):
        write_cancel_request(paths, reason, elsewhere)
        return indexed or "running"
    from ..rankside.hotstart import leftover_pids

    run_id = paths.root.name
    left = leftover_pids(run_id, paths.root)
    if not left:
        if indexed is not None and indexed not in ACTIVE:
            raise RunStateError(
                f"run {run_id} already ended ({indexed}, by the index); "
                f"nothing to cancel. {damaged}"
            ) from None
        raise RunStateError(
            f"run {run_id} has no supervisor and no process left; nothing to cancel. {damaged}"
        ) from None
    procs.signal_pids(left, signal.SIGTERM)
    left = procs.wait_gone(lambda: leftover_pids(run_id, paths.root), STOP_GRACE_S)
    if left:
        procs.signal_pids(left, signal.SIGKILL)
        procs.wait_gone(lambda: leftover_pids(run_id, paths.root), STOP_GRACE_S)
    return "lost"


def pid_record(pid: int | None = None) -> PidRecord:
    """This process as a supervisor's record of itself."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "host": socket.gethostname(), "start_ticks": procs.start_ticks(pid)}
