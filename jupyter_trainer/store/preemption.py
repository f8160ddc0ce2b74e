"""A run's preemption request (``preempt.request`` in its folder): what ``jupyter-trainer
preempt RUN --grace S`` and ``Run.preempt`` leave for the run's supervisor, which announces
the preemption to every rank, waits up to the grace period, ends the attempt and starts the
next one. The supervisor takes the request (reads and removes it) when it acts on it.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from ..core.errors import SpecError
from .records import read_json, write_json_atomic

REQUEST = "preempt.request"
DEFAULT_GRACE_S = 30.0
MAX_GRACE_S = 24 * 3600.0


def check_grace(grace: Any) -> float:
    """``grace`` as seconds, or ``SpecError`` naming the fix."""
    if isinstance(grace, bool) or not isinstance(grace, (int, float)):
        raise SpecError(f"grace must be a number of seconds, not {grace!r}")
    if not math.isfinite(grace) or not 0 <= grace <= MAX_GRACE_S:
        raise SpecError(
            f"grace must be between 0 and {MAX_GRACE_S:.0f} seconds, not {grace!r}; "
            "a spot instance's notice gives about 120"
        )
    return float(grace)


def write_request(root: Path, grace: float, reason: str) -> dict[str, Any]:
    """Leave the request in the run's folder ``root``; returns it."""
    request = {"requested": time.time(), "grace": check_grace(grace), "reason": reason}
    write_json_atomic(root / REQUEST, request)
    return request


def take_request(root: Path) -> dict[str, Any] | None:
    """The request, removed from the folder; None when there is none. A request that cannot
    be read is taken with the default grace: someone asked for a preemption."""
    path = root / REQUEST
    try:
        found: Any = read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        found = {}
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    request = found if isinstance(found, dict) else {}
    try:
        grace = check_grace(request.get("grace", DEFAULT_GRACE_S))
    except SpecError:
        grace = DEFAULT_GRACE_S
    requested = request.get("requested")
    return {
        "requested": requested if isinstance(requested, float) else time.time(),
        "grace": grace,
        "reason": str(request.get("reason") or "preempted"),
    }
