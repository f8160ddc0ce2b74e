"""What a pool writes down, and the leftover checks that read it.

A rank forked by a pool shows the pool's *initial* environment in ``/proc/PID/environ``
(``os.environ`` changes after fork are invisible there), so ``JT_RUN_ID`` cannot find it.
The pool therefore records each run's ranks (pid, start time, process group, session) in
the run folder before the ranks run any code of the run, and ``leftover_pids`` adds what
that record names to what ``procs.pids_with_env`` finds. Every leftover check (the local
target's, the test suite's) goes through ``leftover_pids``.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import stat
from pathlib import Path
from typing import Any

from ..host import atomic, procs

RUN_RECORD = "pool-ranks.json"  # in the run folder: the ranks a pool forked for the run
POOLS_DIR = "pools"  # in the user's folder of the store: <key>.sock, <key>.json, <key>.log


class PoolUnavailable(Exception):
    """The pool cannot run these ranks; the message says why (the run falls back to
    torchrun with it)."""


def own_pools(path: str | os.PathLike, *, make: bool = True) -> Path:
    """``path``, a folder of pools that only this user may use: made (0700) if missing and
    ``make``, else ``PoolUnavailable`` saying why not. A pool's socket in someone else's
    folder could be theirs (it would run these ranks as them, with these ranks' variables),
    and a pool's record there could name any process to signal. ``core.trust.own_folder``
    is the same rule; this copy stays in the standard library for the nodes."""
    folder = Path(path)
    try:
        if make:
            folder.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass
        found = os.lstat(folder)
    except OSError as exc:
        raise PoolUnavailable(f"the pool folder {folder} cannot be made ({exc})") from None
    if stat.S_ISLNK(found.st_mode) or not stat.S_ISDIR(found.st_mode):
        raise PoolUnavailable(f"the pool folder {folder} is not a folder (a link or a file)")
    if found.st_uid != os.geteuid():
        raise PoolUnavailable(
            f"the pool folder {folder} belongs to {_user(found.st_uid)}, not to you "
            f"({_user(os.geteuid())}): a pool there is not yours to use; ask them or the "
            "workspace's administrator to remove it"
        )
    if stat.S_IMODE(found.st_mode) != 0o700:
        try:
            os.chmod(folder, 0o700)
        except OSError as exc:
            raise PoolUnavailable(
                f"the pool folder {folder} cannot be made private ({exc})"
            ) from None
    return folder


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def write_json(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    atomic.write_json_atomic(path, record)


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def recorded_pids(run_dir: str | os.PathLike) -> list[int]:
    """Live processes of the run that its pool record names: the ranks themselves and what
    they left behind outside the run's group (``left_behind``: pid and start time match),
    and every process left in the run's group in the pool's session (the ranks' helpers,
    a rank's forked children)."""
    record = read_json(Path(run_dir, RUN_RECORD))
    found = set()
    named = [*(record.get("ranks") or {}).values(), *(record.get("left_behind") or [])]
    for one in named:
        if isinstance(one, dict) and procs.is_alive(one.get("pid"), one.get("start_ticks")):
            found.add(one["pid"])
    pgid, session = record.get("pgid"), record.get("session")
    if isinstance(pgid, int) and pgid > 0 and isinstance(session, int):
        found.update(procs.pids_in_group(pgid, session))
    found.discard(os.getpid())
    return sorted(found)


def leftover_pids(run_id: str, run_dir: str | os.PathLike | None = None) -> list[int]:
    """Every live process of run ``run_id``, however its ranks were started: those that
    carry its ``JT_RUN_ID`` and, for a run whose ranks a pool forked, those its record
    in ``run_dir`` names."""
    found = set(procs.pids_with_env("JT_RUN_ID", run_id))
    if run_dir is not None:
        found.update(recorded_pids(run_dir))
    return sorted(found)


def live_pools(home: str | os.PathLike) -> list[dict[str, Any]]:
    """This user's pools under ``home`` (their folder of the store) that still run, from
    their records; none when the pool folder is missing or not theirs."""
    try:
        folder = own_pools(Path(home, POOLS_DIR), make=False)
    except PoolUnavailable:
        return []
    found = []
    for path in sorted(folder.glob("*.json")):
        record = read_json(path)
        if procs.is_alive(record.get("pid"), record.get("start_ticks")):
            found.append(record)
    return found


def stop_pools(home: str | os.PathLike, grace: float = 5.0) -> list[int]:
    """End every pool of this user under ``home`` (SIGTERM, then SIGKILL after ``grace``); returns
    the pids that had to be killed. A pool's ranks die with it (``PR_SET_PDEATHSIG``)."""
    pools = live_pools(home)
    for record in pools:
        procs.signal_pids([record["pid"]], signal.SIGTERM)

    def alive() -> list[int]:
        return [r["pid"] for r in pools if procs.is_alive(r["pid"], r.get("start_ticks"))]

    left = procs.wait_gone(alive, grace)
    procs.signal_pids(left, signal.SIGKILL)
    procs.wait_gone(alive, 5.0)
    return left
