"""``jupyter-trainer doctor``'s check of unfinished runs whose supervisor does not answer.

A supervisor that is stopped (SIGSTOP, a debugger) or hung (stuck I/O, a frozen host) is
not gone, so its run is not ``lost``; but its heartbeat grows old and the run's status can
no longer change. One finding per such run (``run-unresponsive``), reported only: whether
to let it go on or to end it is its owner's call, and the finding says how to do either.
"""

from __future__ import annotations

from ...core.errors import StoreError
from .. import ACTIVE, Store
from ..liveness import stale_words
from .report import Finding, Report


def check_stale(store: Store, report: Report) -> None:
    for run_id in store.run_ids_on_disk():
        try:
            state = store.read_state(run_id)
        except (StoreError, OSError, ValueError, KeyError, TypeError, RecursionError):
            continue  # the runs' check names a damaged or unreadable state
        if state.get("status") in ACTIVE and state.get("stale"):
            report.findings.append(
                Finding("run-unresponsive", stale_words(run_id, state["stale"]), run_id)
            )
