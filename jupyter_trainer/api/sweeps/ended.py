"""When a trial is over: its run's state is final *and* its supervisor, the last of the
run's processes to go, has exited.

A run's state becomes final once its ranks are gone, but its supervisor still releases
the target (and may mirror the run to MLflow) before it exits. A sweep counts a trial as
ended only after that, so that a sweep that says it has ended has nothing left running.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from ...core.errors import RunNotFound
from ...rankside.host import procs
from ...store import TERMINAL, Store


def still_running(process: dict[str, Any] | None) -> bool:
    """Whether the process a state records (``{"pid", "host", "start_ticks"}``: a run's
    supervisor, a sweep's driver) still runs. One on another host cannot be seen from here:
    the final state it wrote is taken as its end."""
    process = process or {}
    return process.get("host") == socket.gethostname() and procs.is_alive(
        process.get("pid"), process.get("start_ticks")
    )


def is_over(state: Mapping[str, Any]) -> bool:
    """Whether the run of this state has ended and left no process."""
    return state["status"] in TERMINAL and not still_running(state.get("supervisor"))


def run_over(store: Store, run_id: str) -> bool:
    """Whether the run ``run_id`` has ended and left no process (a deleted run has)."""
    try:
        return is_over(store.read_state(run_id))
    except RunNotFound:
        return True
