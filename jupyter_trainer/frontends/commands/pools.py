"""``pools``: the warm rank pools of the run store, for ``jupyter-trainer`` and ``%train``.
``pools`` lists them; ``pools --stop`` ends them (a running run's ranks die with their pool,
so it refuses while a pool serves a run, unless ``--force``)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Collection
from typing import Any, TextIO

from ...core.errors import SpecError
from ...core.units import format_bytes
from ...nodes.hotstart.local import pools_home
from ...rankside.host.home import default_home
from ...rankside.hotstart.records import live_pools, stop_pools
from ...store import ACTIVE, Store
from ..views.text import columns
from .parser import Subparsers, handles


def resident_bytes(pid: int) -> int | None:
    """What a process holds in memory now (VmRSS), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def pool_rows() -> list[dict[str, Any]]:
    """Each live pool: pid, interpreter, preloaded modules, age, memory, idle limit."""
    rows = []
    for record in live_pools(pools_home()):
        started = record.get("started")
        rows.append(
            {
                "pid": record["pid"],
                "key": record.get("key"),
                "python": record.get("python"),
                "modules": record.get("modules") or [],
                "skipped": record.get("skipped") or {},
                "refused": record.get("refused"),
                "idle_s": record.get("idle_s"),
                "age_s": round(time.time() - started, 1) if started else None,
                "rss": resident_bytes(record["pid"]),
            }
        )
    return rows


def serving(pids: Collection[int], allocations: Collection[str] = ()) -> list[str]:
    """The active runs whose ranks one of the pools ``pids`` forked, or that run in one of
    the held Slurm ``allocations``."""
    store = Store(default_home())
    found = []
    for status in ACTIVE:
        for row in store.list_runs(status=status, limit=1000):
            hot = (store.read_state(row["id"]).get("launcher") or {}).get("hot") or {}
            held = hot.get("allocation") in allocations
            if hot.get("used") and (hot.get("pool") in pids or held):
                found.append(row["id"])
    return found


def define_pools(sub: Subparsers, name: str) -> None:
    pools = sub.add_parser(
        name,
        help="the warm rank pools that hot runs fork their ranks from",
        description="List the warm rank pools of the run store (one per interpreter, "
        "environment and module set; each exits after its idle time), or end them.",
    )
    pools.add_argument(
        "--stop",
        action="store_true",
        help="end every pool now (the next hot run starts a fresh one)",
    )
    pools.add_argument(
        "--force",
        action="store_true",
        help="with --stop: also end pools whose ranks are running (those runs fail)",
    )
    pools.add_argument("--json", action="store_true", help="print JSON rows")
    handles(pools, cmd_pools)


def cmd_pools(args: argparse.Namespace, out: TextIO) -> int:
    from ...targets.slurm.hold import held_allocations, release

    rows, held = pool_rows(), held_allocations(pools_home())
    if args.stop:
        if args.json:
            raise SpecError("pools: --json lists the pools; leave it out with --stop")
        busy = serving({r["pid"] for r in rows}, {h["job_id"] for h in held})
        if busy and not args.force:
            raise SpecError(
                f"pools: a pool is running the ranks of {', '.join(busy)}; wait for "
                "those runs or cancel them, or add --force (they fail)"
            )
        release([h["job_id"] for h in held])
        killed = stop_pools(pools_home())
        print(
            f"stopped {len(rows)} pool{'' if len(rows) == 1 else 's'}"
            + (f" ({len(killed)} needed SIGKILL)" if killed else "")
            + (
                f" and released {len(held)} held Slurm allocation"
                f"{'' if len(held) == 1 else 's'} ({', '.join(h['job_id'] for h in held)})"
                if held
                else ""
            ),
            file=out,
        )
        return 0
    if args.json:
        print(json.dumps(rows + [{"slurm_allocation": h} for h in held], indent=1), file=out)
        return 0
    for h in held:
        print(
            f"held Slurm allocation: job {h['job_id']} ({h['name']}) {h['state']} for "
            f"{h['elapsed']} on {h['nodes'] or '?'}",
            file=out,
        )
    if not rows:
        print("no warm rank pool is running", file=out)
    else:
        body = [
            (
                r["pid"],
                _age(r["age_s"]),
                format_bytes(r["rss"]) if r["rss"] else "?",
                f"{r['idle_s']:g} s" if r["idle_s"] is not None else "?",
                r["python"],
                ", ".join(r["modules"]) + (" (refuses: CUDA)" if r["refused"] else ""),
            )
            for r in rows
        ]
        print(columns(("PID", "AGE", "MEMORY", "IDLE EXIT", "PYTHON", "MODULES"), body), file=out)
    return 0


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
