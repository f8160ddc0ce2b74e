"""What the watched facts mean for a running run: its state, and whether they end it.

``RunWatch`` (``watch.py``) finds new NaN/inf values and stalled ranks; these functions put
them in the run's state and return an outcome when one of them ends the run
(``--stop-on-nan NAME``, ``--on-stall cancel``), else None.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..core.records import StateRecord
from .watch import RunWatch

STALL_REFRESH_S = 2.0  # how often a stalled rank's "seconds" is brought up to date


def observed(state: StateRecord) -> str:
    """What the observations keep in the state, as text to compare; a stall's growing
    ``seconds`` in steps of ``STALL_REFRESH_S``, so the state follows it that often."""
    stalled = [
        {**e, "seconds": e["seconds"] // STALL_REFRESH_S} for e in state.get("stalled") or []
    ]
    return json.dumps(
        [state.get("attempts"), state.get("non_finite"), stalled, state.get("debugging")],
        sort_keys=True,
        default=str,
    )


def non_finite(
    state: StateRecord, watch: RunWatch, stop_on_nan: tuple[str, ...]
) -> dict[str, Any] | None:
    """Record the first NaN/inf value of each metric; end the run on one named by
    ``--stop-on-nan``."""
    new = watch.non_finite()
    if not new:
        return None
    state.setdefault("non_finite", {}).update(new)
    for name in stop_on_nan:
        if name in new:
            fact = new[name]
            step = "" if fact.get("step") is None else f" at step {fact['step']}"
            return {
                "error": f"{name} became {fact['value']}{step} on rank {fact['rank']}; "
                f"--stop-on-nan {name} stopped the run",
                "failed_rank": fact["rank"],
            }
    return None


def debugging(state: StateRecord, watch: RunWatch) -> None:
    """Name in the state the ranks that wait in a debugger now (``rankside/debug/debugger.py``):
    each one's rank, host, socket, since and until when, and where it stopped."""
    found = [
        {"rank": rank, "host": rec.get("host"), **rec["debugging"]}
        for rank, rec in sorted(watch.current_records().items())
        if isinstance(rec.get("debugging"), dict) and rec.get("exit_code") is None
    ]
    if found:
        state["debugging"] = found
    else:
        state.pop("debugging", None)


def stalls(
    state: StateRecord,
    watch: RunWatch,
    on_stall: str,
    log: Callable[[str], None],
) -> dict[str, Any] | None:
    """Record the ranks stalled now (logging each new set); with ``--on-stall cancel``, save
    their stacks and end the run."""
    if state["status"] != "running" or state.get("debugging"):
        return None  # the ranks a debugging rank holds are not stalled
    stalled = watch.stalled()
    names = {entry["rank"] for entry in stalled}
    was = state.get("stalled") or []
    if [e["rank"] for e in was] != sorted(names):
        for entry in stalled:
            why = "its GPU idle while the others work" if entry.get("gpu_idle") else "no progress"
            log(
                f"rank {entry['rank']} stalled: {why} for {entry['seconds']:g} s "
                f"after step {entry['last_step']}"
            )
    watch.forget_stacks({e["rank"] for e in was} - names)
    if stalled:
        state["stalled"] = stalled
    else:
        state.pop("stalled", None)
    if not stalled or on_stall != "cancel":
        return None
    records = watch.current_records()
    state["stacks"] = {str(r): text for r, text in watch.read_stacks(records).items()}
    first = stalled[0]
    step = "" if first["last_step"] is None else f" after step {first['last_step']}"
    why = "its GPU idle while the others work" if first.get("gpu_idle") else "no progress"
    return {
        "error": f"rank {first['rank']} stalled: {why} for {first['seconds']:g} s"
        f"{step}; --on-stall cancel ended the run (its stacks are saved)",
        "failed_rank": first["rank"],
        "traceback": first.get("stack"),
    }
