"""``Run.preempt``: preempt a run as a scheduler would, on any target whose supervisor the
store reaches (this machine, ssh hosts): every rank is told (SIGUSR1, ``jt.preempted()``),
gets ``grace`` seconds to checkpoint and return, and what is left is ended; the attempt
ends as ``preempted`` and the supervisor starts the next one, which resumes from the newest
complete checkpoint. A cloud's spot-termination notice maps onto it:
``jupyter-trainer preempt RUN --grace 120`` from the notice's handler.
"""

from __future__ import annotations

import time
from typing import Any

from ..core.errors import RunStateError
from ..store import TERMINAL, Store
from ..store.preemption import DEFAULT_GRACE_S, check_grace, write_request

SETTLE_S = 30.0  # beyond the grace: the supervisor's look, the kill, the next start


def preempt(
    store: Store, run_id: str, grace: float = DEFAULT_GRACE_S, wait: bool = True
) -> dict[str, Any] | None:
    """Ask for the preemption; with ``wait``, block until the supervisor has ended the
    attempt and return its record in ``state["preemptions"]`` (None if the run ended
    otherwise, or the supervisor had not acted within the grace and ``SETTLE_S``)."""
    grace = check_grace(grace)
    state = store.read_state(run_id)
    store.check_owner(run_id, state, None, "preempt", "the run goes on")
    if state["status"] in TERMINAL:
        raise RunStateError(f"run {run_id} already ended ({state['status']}); nothing to preempt")
    before = len(state.get("preemptions", []))
    request = write_request(store.existing(run_id).root, grace, "preempted by user")
    if not wait:
        return None
    deadline = time.monotonic() + grace + SETTLE_S
    while time.monotonic() < deadline:
        state = store.read_state(run_id)
        found = state.get("preemptions", [])
        if len(found) > before and found[-1].get("requested") == request["requested"]:
            if found[-1].get("ended"):
                return dict(found[-1])
        elif state["status"] in TERMINAL:
            return None
        time.sleep(0.2)
    return None
