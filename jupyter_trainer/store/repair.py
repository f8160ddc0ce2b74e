"""What ``jupyter-trainer doctor --fix`` does with a run whose record is damaged.

- ``state.json`` missing or unreadable: while the run's supervisor runs, nothing (the
  supervisor writes its state again within seconds). Otherwise the state is rebuilt from
  the run's index row: its status if that is final, else ``lost``; its creation, start, end
  and failed rank; ``rebuilt`` says so. The damaged file is kept beside it as
  ``state.json.damaged-<UTC stamp>``.
- ``spec.json`` missing or unreadable: a spec is what was asked, and only the supervisor
  that holds it can write it again. Once that is gone, the run folder is moved aside to
  ``<home>/damaged/<run-id>``, logs and outputs included, and its index row dropped, so
  that every other command works again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import RecordDamaged, StoreError
from ..core.modes import make_top
from ..core.records import STATE_SCHEMA
from . import liveness
from .records import DAMAGED_DIR, TERMINAL, RunPaths, write_json_atomic


@dataclass(frozen=True)
class Damage:
    """One damaged record, as doctor reports it."""

    message: str
    fix: str | None  # what --fix does; None: nothing to do
    repair: Callable[[], Any] | None = None
    done: str | None = None  # what --fix did


def damage(store: Any, run_id: str, exc: RecordDamaged) -> Damage:
    """The finding for run ``run_id`` whose record ``exc`` names."""
    paths = store.paths(run_id)
    what = f"{exc.path} {exc.problem}"
    if liveness.supervisor_running(paths):
        return Damage(f"{what}; its supervisor runs and writes it again", None)
    if exc.path == str(paths.spec):
        dest = store.home / DAMAGED_DIR / run_id
        return Damage(
            what,
            f"move the run aside to {dest}",
            lambda: set_aside(store, run_id),
            f"moved aside to {dest}",
        )
    kept = f"state.json.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    return Damage(
        what,
        "rebuild it from the run's index row",
        lambda: rebuild_state(store, run_id, kept),
        f"rebuilt from the index row; the damaged file is kept as {kept}",
    )


def rebuild_state(store: Any, run_id: str, kept: str) -> dict[str, Any]:
    """Write a state for run ``run_id`` from its index row (see the module's docstring)."""
    paths = store.paths(run_id)
    try:
        row = store.index.row(run_id)
    except StoreError:
        row = None
    row = row or {}
    created = row.get("created") or _created(paths)
    status = row.get("status") if row.get("status") in TERMINAL else "lost"
    ended = row.get("ended") if status != "lost" else None
    ended = ended or liveness.last_seen(paths, {"created": created, "updated": row.get("updated")})
    state: dict[str, Any] = {
        "schema": STATE_SCHEMA,
        "run_id": run_id,
        "status": status,
        "created": created,
        "ended": ended,
        "stages": {},
    }
    if row.get("started"):
        state["stages"]["running"] = {"start": row["started"], "end": ended}
    if row.get("failed_rank") is not None:
        state["failed_rank"] = row["failed_rank"]
    if status in ("failed", "lost"):
        said = row.get("status") or "nothing of it"
        state["error"] = (
            f"the run's state.json was damaged ({kept}) and its supervisor had "
            f"ended; rebuilt from the index, which says {said}; the error it "
            "recorded is lost, see supervisor.log and logs/"
        )
    state["rebuilt"] = {
        "at": time.time(),
        "from": "index row" if row else "run folder",
        "damaged": kept,
    }
    if os.path.lexists(paths.state):
        os.replace(paths.state, paths.root / kept)
    write_json_atomic(paths.state, state)
    store.reindex(run_id)
    return state


def set_aside(store: Any, run_id: str) -> None:
    """Move run ``run_id`` to ``<home>/damaged/<run-id>`` and drop its index row."""
    paths = store.paths(run_id)
    dest = store.home / DAMAGED_DIR / run_id
    make_top(dest.parent, store.settings.shared)  # a top folder like runs/: members share it
    os.rename(paths.root, dest)
    store.index.delete(run_id)


def _created(paths: RunPaths) -> float:
    """When the run was created, without its state: its spec's time, else its folder's."""
    for path in (paths.spec, paths.root):
        try:
            return path.stat().st_mtime
        except OSError:
            continue
    return time.time()
