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
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import RecordDamaged, RunStateError, StoreError
from ..core.records import PidRecord, StateRecord
from ..core.units import fmt_duration
from ..rankside.host import procs
from .owners import verified_owner
from .records import ACTIVE, RunPaths, read_json_object, read_supervisor, write_json_atomic

# A run still "created" this long after creation never got a supervisor.
CREATED_GRACE_S = 60.0
# How often a live supervisor touches ``supervisor.alive``.
HEARTBEAT_S = 1.0
# A live supervisor whose heartbeat is this old is stopped (SIGSTOP) or hung: the run's
# status cannot change until it goes on, so readers and ``doctor`` say so.
UNRESPONSIVE_S = 60.0
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


def as_read(paths: RunPaths, state: StateRecord) -> StateRecord:
    """``state`` as readers are told it: its ``owner`` is the kernel's owner of the run's
    folder (``verified_owner``: the record only claims one), and ``stale`` is added when
    the run is unfinished and its supervisor, though not known to be gone, has not touched
    its heartbeat for ``UNRESPONSIVE_S`` (the heartbeat's age in seconds, the supervisor's
    pid and host, and whether it is stopped)."""
    owner = verified_owner(state.get("owner"), paths.root)
    if owner is not None:
        state["owner"] = owner
    sup = state.get("supervisor")
    if state.get("status") not in ACTIVE or not isinstance(sup, dict):
        return state
    try:
        age = time.time() - paths.heartbeat.stat().st_mtime
    except OSError:
        return state
    if age < UNRESPONSIVE_S:
        return state
    stale = {"heartbeat_age": round(age, 1), "pid": sup.get("pid"), "host": sup.get("host")}
    if sup.get("host") == socket.gethostname() and isinstance(sup.get("pid"), int):
        stale["stopped"] = _process_state(sup["pid"]) == "T"
    return {**state, "stale": stale}


def stale_words(run_id: str, stale: Mapping[str, Any]) -> str:
    """``unresponsive: ...``: what a ``stale`` entry (``with_staleness``) of run ``run_id``
    means, and what to do about it."""
    pid, host = stale.get("pid"), stale.get("host") or "its host"
    ago = fmt_duration(float(stale.get("heartbeat_age") or 0))
    if stale.get("stopped"):
        why = (
            f"it is stopped (SIGSTOP or a debugger): `kill -CONT {pid}` on {host} lets it go "
            f"on, `kill {pid}` ends it"
        )
    else:
        why = (
            f"it is hung (stuck I/O, a frozen host): `py-spy dump --pid {pid}` on {host} "
            f"shows where; `kill {pid}` ends it"
        )
    return (
        f"unresponsive: its supervisor (pid {pid} on {host}) has not shown it is alive for "
        f"{ago} (m:ss), so the run's status cannot change; {why} (the run is then lost and "
        f"its ranks are ended; `jupyter-trainer cancel {run_id}` works once it answers)"
    )


def _process_state(pid: int) -> str | None:
    """The kernel's one-letter state of ``pid`` (``R``, ``S``, ``T`` for stopped, ...)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :][:1] or None


def last_seen(paths: RunPaths, state: Mapping[str, Any]) -> float:
    """When the run's supervisor was last known alive: its heartbeat, else its last state
    write, else the run's creation."""
    times = [state.get("updated") or 0.0, state.get("created") or 0.0]
    try:
        times.append(paths.heartbeat.stat().st_mtime)
    except OSError:
        pass
    return max(times)


class CancelPaths(Protocol):
    """A run's or a sweep's folder, as far as a cancel request goes."""

    @property
    def root(self) -> Path: ...

    @property
    def cancel_request(self) -> Path: ...


def write_cancel_request(
    paths: CancelPaths,
    reason: str,
    elsewhere: Callable[[], object] | None = None,
    what: str = "the run",
) -> None:
    """Write ``cancel.request`` of a run (or, with ``what``, a sweep). On a full disk, an
    empty one (it needs no data blocks): the supervisor or driver reads that as a cancel
    without a reason (``read_cancel_request``). Where the folder refuses this user (an
    admin cancelling another user's run), ``elsewhere()`` leaves the request in the
    workspace instead (``requests``)."""
    try:
        write_json_atomic(paths.cancel_request, {"requested": time.time(), "reason": reason})
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):  # another user's run, as an admin
            if elsewhere is None:
                raise StoreError(
                    f"cannot ask for the cancel of {what} in {paths.root}: only its owner "
                    f"may write there ({exc.strerror})"
                ) from None
            try:
                elsewhere()
                return
            except OSError as again:
                raise StoreError(
                    f"cannot ask for the cancel of {what} in {paths.root}: only its owner "
                    f"may write there ({exc.strerror}), and the workspace's requests folder "
                    f"refused it too ({again}); make that folder writable by the team's group"
                ) from None
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise StoreError(
                f"cannot ask for the cancel of {what} in {paths.root}: {exc.strerror or exc}"
            ) from None
        try:
            paths.cancel_request.touch()
        except OSError as again:
            raise StoreError(
                f"cannot ask for the cancel of {what} in {paths.root}: {again.strerror or again}"
            ) from None


def read_cancel_request(path: Path) -> dict[str, Any] | None:
    """The cancel request at ``path``, None when there is none; one that cannot be read
    (empty, written on a full disk) is a cancel without a reason."""
    try:
        return read_json_object(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"reason": "canceled"} if path.exists() else None


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
    # Only processes of the user who owns the run's folder, by the kernel: its records
    # (pool-ranks.json, written by whoever owns the folder) may name anyone's.
    try:
        owner: int | None = os.lstat(paths.root).st_uid
    except OSError:
        owner = None

    def leftovers() -> list[int]:
        found = leftover_pids(run_id, paths.root) if owner is not None else []
        return [pid for pid in found if _uid_of(pid) == owner]

    left = leftovers()
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
    left = procs.wait_gone(leftovers, STOP_GRACE_S)
    if left:
        procs.signal_pids(left, signal.SIGKILL)
        procs.wait_gone(leftovers, STOP_GRACE_S)
    return "lost"


def _uid_of(pid: int) -> int | None:
    """The user a process runs as, by the kernel (the owner of ``/proc/PID``)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def pid_record(pid: int | None = None) -> PidRecord:
    """This process as a supervisor's record of itself."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "host": socket.gethostname(), "start_ticks": procs.start_ticks(pid)}
