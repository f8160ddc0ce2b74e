"""The live Python stacks of a run's ranks, for ``jupyter-trainer stack`` and ``%train stack``.

The ranks' records say where each rank runs (``host``, ``pid``); the run's target reads the
stacks there with ``py-spy dump`` (see ``Target.stacks``).
"""

from __future__ import annotations

from typing import Any

from ..core.errors import RunStateError, SpecError
from ..store import TERMINAL, Store
from ..store.attempts import current_records
from ..targets import get_target


def run_stacks(store: Store, run_id: str, rank: int | None = None) -> dict[int, str]:
    """``{rank: stack text}`` of every live rank of ``run_id`` (or of ``rank`` only)."""
    paths = store.existing(run_id)
    state = store.read_state(run_id)
    if state.get("status") in TERMINAL:
        saved = state.get("stacks") or {}
        hint = (
            " (the stacks saved when it was ended for a stall are in its state: "
            "`jupyter-trainer show RUN --json`)"
            if saved
            else ""
        )
        raise RunStateError(f"run {run_id} is {state['status']}: it has no live ranks{hint}")
    spec = store.read_spec(run_id)
    records = current_records(paths.ranks)
    if rank is not None:
        if rank not in records:
            known = ", ".join(map(str, sorted(records))) or "none yet"
            raise SpecError(f"run {run_id} has no rank {rank} (its ranks: {known})")
        records = {rank: records[rank]}
    if not records:
        raise RunStateError(
            f"run {run_id} has no rank running yet ({state.get('status')}); "
            "try again once it is running"
        )
    target = get_target(spec.target.name, store.home)
    handle: dict[str, Any] = {**(state.get("launcher") or {}), "python": state.get("python")}
    return dict(sorted(target.stacks(handle, records).items()))
