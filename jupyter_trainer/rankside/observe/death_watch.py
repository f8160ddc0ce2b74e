"""How a rank's death is witnessed: the watcher forked beside each rank, and the evidence a
failing rank takes of the failures around it. Part of the rank side: ``boot.py`` uses it,
inside a run's snapshot (``code/_jt/jupyter_trainer/rankside/observe/death_watch.py``) or installed. Standard
library only.

``attribution`` (on the supervisor's side) reads what is recorded here: ``exited``, the
``signal`` or ``exit_status`` of a rank that recorded no exit, ``after_exit`` of one that did
and then died otherwise, ``peers_gone`` and ``orphaned``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

from jupyter_trainer.rankside.host import atomic

_PR_SET_PDEATHSIG = 1
_DEATH_SIGNAL = signal.SIGUSR2
_STATUS_EXIT_CODE_FIELD = 52  # of /proc/PID/stat: the wait status of a zombie (Linux >= 3.5)
_ORPHAN_CHECK_S = 0.5  # how often the watcher checks that the rank's launcher still exists
_ORPHAN_GRACE_S = 5.0  # SIGTERM -> SIGKILL for a rank whose launcher is gone
_PF_EXITING = 0x4  # of /proc/PID/stat's flags: the process has begun to exit
_CGROUPS = "/sys/fs/cgroup"  # cgroup v2's hierarchy
_V1_MEMORY = "/sys/fs/cgroup/memory"  # cgroup v1's memory hierarchy


def launcher_chain(run_id: str) -> list[int]:
    """This rank's parent and the ancestors above it that belong to the run (they carry its
    ``JT_RUN_ID``): the launcher and its helpers (horovodrun's shells and middlemen, say)."""
    chain = [os.getppid()]
    needle = f"JT_RUN_ID={run_id}".encode()
    while run_id and len(chain) < 16:
        try:
            with open(f"/proc/{chain[-1]}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    break
        except OSError:
            break
        parent = _parent_of(chain[-1])
        if parent in (None, 0, 1) or parent in chain:
            break
        chain.append(parent)
    return chain


def failure_evidence(ranks_dir: str, rank: int, launchers: list[int]) -> dict[str, Any]:
    """What this failing rank can see for itself of the failures around it.

    ``peers_gone``: the ranks on this host whose processes had already ended, or were ending,
    when this rank failed. A rank killed by SIGKILL is only timed by its watcher, a moment
    after the kernel closed its sockets, and a peer may raise "connection closed" in between;
    this is the proof, free of any clock, that the peer went first. ``orphaned``: this rank's
    launcher, or a process between it and this rank, had already gone. Only peers of this
    rank's attempt (as its own record says) count: a peer's record may still be its earlier
    attempt's, whose process is gone because torchrun is starting it again.
    """
    found: dict[str, Any] = {}
    if os.getppid() != launchers[0] or any(_ending(pid) for pid in launchers):
        found["orphaned"] = True
    host = hostname()
    attempt = (read_record(os.path.join(ranks_dir, f"rank-{rank}.json")) or {}).get("attempt", 0)
    gone = []
    try:
        names = os.listdir(ranks_dir)
    except OSError:
        names = []
    for name in names:
        match = re.fullmatch(r"rank-(\d+)\.json", name)
        if not match or int(match.group(1)) == rank:
            continue
        try:
            with open(os.path.join(ranks_dir, name), encoding="utf-8") as f:
                peer = json.load(f)
        except (OSError, ValueError):
            continue
        pid = peer.get("pid")
        if peer.get("attempt", 0) != attempt or peer.get("host") != host:
            continue
        if isinstance(pid, int) and _ending(pid):
            gone.append(int(match.group(1)))
    if gone:
        found["peers_gone"] = sorted(gone)
    return found


_PF_EXITING = 0x4


def _stat(pid: int) -> list[str] | None:
    """Fields 3 on of /proc/PID/stat (``[0]`` is the state, ``[1]`` the parent), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses


def _ending(pid: int) -> bool:
    """True when ``pid`` has ended or is in the kernel's exit path (PF_EXITING)."""
    fields = _stat(pid)
    return fields is None or fields[0] in ("Z", "X", "x") or bool(int(fields[6]) & _PF_EXITING)


@contextlib.contextmanager
def records_locked(folder: str) -> Iterator[None]:
    """Hold the lock of a ranks folder (``flock`` on the folder itself) while a record is read
    and written again.

    A rank that torchrun starts again moves its earlier attempt's record aside and writes its
    own, while the earlier attempt's watcher may still be adding the end it saw: without
    turns, the watcher reads the old record and writes it back over the new one, or finds it
    gone and records nothing. Where the file system cannot lock, nothing is held."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def watch_death(record_path: str, attempt: int = 0) -> None:
    """Fork a watcher that records when this rank's process ended, however it ended.

    A rank killed by SIGKILL (the out-of-memory killer, ``kill -9``) runs no code of its own,
    so its record would say nothing and a peer's later "connection closed" exception would
    look like the first failure. The watcher is a child forked here, before the entry runs:
    ``PR_SET_PDEATHSIG`` makes the kernel signal it the moment this process exits, whatever
    ends it, with no polling. Being a child (not a process the supervisor or a node agent
    polls by pid) makes it work the same under every launcher and on every target, local,
    ssh or Slurm, since it writes beside the rank's record, on the rank's node, and the
    record travels back as it always does. A launcher only waits on its own children, the
    ranks, so it never waits on this one.

    On the signal it writes ``exited`` (the time) into the record (or into the copy of it
    kept as ``rank-<r>.attempt-<attempt>.json``, once a restarted rank has moved it aside; see
    ``records_locked``); when the rank recorded no
    ``exit_code`` itself, also the ``signal`` or ``exit_status`` if the dead rank can still be
    read as a zombie. Then it exits at once. It ignores SIGTERM, SIGINT and SIGHUP, which
    launchers and the supervisor send to a whole process group, so it outlives its rank and
    records the end; SIGKILL still ends it.

    It also ends a rank whose launcher is gone (SIGTERM, then SIGKILL; checked every
    ``_ORPHAN_CHECK_S``): mpirun, say, can die without ending its ranks.
    """
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        print(f"[jt] cannot watch the rank for its death: {exc}", file=sys.stderr)
        return
    if pid:
        return
    try:
        _death_watcher(record_path, parent, attempt)
    finally:
        os._exit(0)


def _death_watcher(record_path: str, parent: int, attempt: int) -> None:
    import ctypes

    signal.pthread_sigmask(signal.SIG_BLOCK, [_DEATH_SIGNAL])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.closerange(3, 1 << 16)  # hold none of the launcher's pipes or the rank's sockets
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(_DEATH_SIGNAL), 0, 0, 0) != 0:
        return
    # The rank may have died before prctl: then this process already has a new parent. The
    # signal also comes when a thread of the rank that was our parent ends and we move to a
    # sibling thread; only a parent other than the rank's process means the rank is gone.
    launcher = _parent_of(parent)
    stop: list[float] = []  # when the rank was sent SIGTERM
    peak = 0  # the rank's peak resident memory, as last read
    cgroup = memory_cgroup(parent)  # its memory cgroup, as last read (a zombie has none)
    # OOM kills counted before the rank could have been one: of each memory cgroup it was
    # seen in, and of the node (where no cgroup can be read)
    kills = {folder: oom_kills(folder) for folder in (cgroup, None)}
    while os.getppid() == parent:
        signal.sigtimedwait([_DEATH_SIGNAL], _ORPHAN_CHECK_S)
        peak = max(peak, _peak_rss(parent))
        seen = memory_cgroup(parent)
        if seen and not _exiting(parent):  # an exiting rank has left its cgroup already
            cgroup = seen
            if cgroup not in kills:
                kills[cgroup] = oom_kills(cgroup)
        if launcher in (None, 0, 1) or _parent_of(parent) in (launcher, None):
            continue
        # The rank's launcher is gone: nothing will stop this rank any more (mpirun can end
        # on SIGTERM without ending its ranks). End it as its launcher would have.
        if not stop:
            stop.append(time.monotonic())
            _signal(parent, signal.SIGTERM)
        elif time.monotonic() - stop[0] > _ORPHAN_GRACE_S:
            _signal(parent, signal.SIGKILL)
    exited = time.time()
    status = _zombie_status(parent)
    kept = f"{record_path[: -len('.json')]}.attempt-{attempt}.json"
    with records_locked(os.path.dirname(record_path)):
        for path in (record_path, kept):
            record = read_record(path)
            if record is not None and record.get("pid") == parent:
                _record_end(path, record, exited, status, cgroup, kills, peak)
                return


def read_record(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _record_end(
    record_path: str,
    record: dict[str, Any],
    exited: float,
    status: int | None,
    cgroup: str | None,
    kills: dict[str | None, int | None],
    peak: int,
) -> None:
    """Write into the dead rank's record when it ended, and how, as far as can be seen."""
    record["exited"] = exited
    if record.get("exit_code") is None and status:  # 0 is also what an unreadable one shows
        if status & 0x7F:
            record["signal"] = _signal_name(status & 0x7F)
        else:
            record["exit_status"] = status >> 8
    # A warm pool reaps its ranks at once: no status to read, but the OOM count still moves.
    if record.get("exit_code") is None and (not status or status & 0x7F == signal.SIGKILL):
        oom = out_of_memory(cgroup, kills)
        if oom is not None:
            record["oom"] = {**oom, **({"rss_peak_bytes": peak} if peak else {})}
    elif record.get("exit_code") == 0 and status:
        # The rank's code finished and it recorded so, then its process died otherwise: in
        # native teardown (a C++ destructor or exit handler that aborts, say).
        record["after_exit"] = (
            {"signal": _signal_name(status & 0x7F)}
            if status & 0x7F
            else {"exit_status": status >> 8}
        )
    write_json(record_path, record)


def out_of_memory(folder: str | None, kills: dict[str | None, int | None]) -> dict[str, Any] | None:
    """How the OOM killer ended a rank killed by SIGKILL whose memory cgroup was ``folder``,
    or None when it did not: the kernel counts an OOM kill in the victim's own cgroup,
    whether that cgroup's limit or the node's memory ran out, so the cgroup's count moving
    since ``kills`` (the counts before) is the proof. Where no cgroup can be read, the
    node's count moving is taken instead (another process may have been the one killed).

    ``cgroup`` (the cgroup's name), with its ``limit_bytes`` and ``peak_bytes``, when that
    limit is below the node's memory; else ``node``, with ``node_mem_total_bytes``."""
    key = folder if folder is not None and kills.get(folder) is not None else None
    before, after = kills.get(key), oom_kills(key)
    if before is None or after is None or after <= before:
        return None
    total = _meminfo_total()
    found: dict[str, Any] = {}
    if folder is not None:
        for name, files in (
            ("limit_bytes", ("memory.max", "memory.limit_in_bytes")),
            ("peak_bytes", ("memory.peak", "memory.max_usage_in_bytes")),
        ):
            value = next((v for v in (_read_int(folder, f) for f in files) if v), None)
            if value is not None:
                found[name] = value
    if folder is not None and found.get("limit_bytes", 1 << 62) < (total or 1 << 62):
        v1 = folder.startswith(_V1_MEMORY + "/")
        return {"cgroup": folder[len(_V1_MEMORY if v1 else _CGROUPS) :], **found}
    return {"node": True, **({"node_mem_total_bytes": total} if total else {})}


def memory_cgroup(pid: int) -> str | None:
    """The folder of ``pid``'s memory cgroup under /sys/fs/cgroup (v2, or v1's memory
    hierarchy), or None."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = _V1_MEMORY + path.rstrip("/")
        elif controllers == "" and os.path.exists(f"{_CGROUPS}/cgroup.controllers"):
            folder = _CGROUPS + path.rstrip("/")
        else:
            continue
        if os.path.isdir(folder):
            return folder
    return None


def oom_kills(folder: str | None) -> int | None:
    """Processes the OOM killer ended: in the memory cgroup ``folder`` itself (v2's
    ``memory.events.local``, v1's ``memory.oom_control``), or on the node (``/proc/vmstat``)."""
    paths = (
        ("/proc/vmstat",)
        if folder is None
        else tuple(
            f"{folder}/{name}"
            for name in ("memory.events.local", "memory.events", "memory.oom_control")
        )
    )
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def _peak_rss(pid: int) -> int:
    """``VmHWM`` of ``pid`` in bytes; 0 once it is gone (a zombie has no memory left)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _read_int(folder: str, name: str) -> int | None:
    try:
        with open(f"{folder}/{name}", encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):  # "max" in memory.max: no limit
        return None


def _meminfo_total() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _exiting(pid: int) -> bool:
    """Whether ``pid`` is gone or has begun to exit (``PF_EXITING`` in its flags): a rank
    killed by SIGKILL leaves its cgroup before its watcher is told."""
    fields = _stat(pid)
    return fields is None or fields[0] in ("Z", "X") or bool(int(fields[6]) & _PF_EXITING)


def _parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def _zombie_status(pid: int) -> int | None:
    """The wait status of ``pid`` if it is still an unreaped zombie, else None."""
    fields = _stat(pid)
    if fields is None or fields[0] != "Z" or len(fields) < _STATUS_EXIT_CODE_FIELD - 2:
        return None
    return int(fields[_STATUS_EXIT_CODE_FIELD - 3])


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def hostname() -> str:
    return os.uname().nodename  # socket.gethostname(), without importing socket


def write_json(path: str, record: dict[str, Any]) -> None:
    atomic.write_json_atomic(path, record)
