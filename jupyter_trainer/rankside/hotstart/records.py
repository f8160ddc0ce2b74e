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
import signal
from pathlib import Path
from typing import Any

from .. import atomic, procs

RUN_RECORD = "pool-ranks.json"  # in the run folder: the ranks a pool forked for the run
POOLS_DIR = "pools"  # in the run store: <key>.sock, <key>.json, <key>.log


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
    """Live processes of the run that its pool record names: the ranks themselves (pid and
    start time match) and every process left in the run's group in the pool's session
    (the ranks' helpers, a rank's forked children)."""
    record = read_json(Path(run_dir, RUN_RECORD))
    found = set()
    for rank in (record.get("ranks") or {}).values():
        if isinstance(rank, dict) and procs.is_alive(rank.get("pid"), rank.get("start_ticks")):
            found.add(rank["pid"])
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
    """The pools of run store ``home`` that still run, from their records."""
    folder = Path(home, POOLS_DIR)
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        record = read_json(path)
        if procs.is_alive(record.get("pid"), record.get("start_ticks")):
            found.append(record)
    return found


def stop_pools(home: str | os.PathLike, grace: float = 5.0) -> list[int]:
    """End every pool of run store ``home`` (SIGTERM, then SIGKILL after ``grace``); returns
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
