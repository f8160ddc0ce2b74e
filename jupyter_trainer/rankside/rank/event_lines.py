"""How a rank's events become JSON lines: the values made JSON-safe, each event one line.

The runtime buffers an event as a tuple ``(kind, t, a, b)`` — ``(METRIC, t, step, values)``,
``(PROGRESS, t, done, total)`` or ``(TAG, t, None, tags)`` — and its flusher thread turns it into one line of
``events/rank-<r>.jsonl`` here. A rank started again after a restart (attempt 1, 2, ...)
appends to the same file, and the first line it writes says so (``attempt_line``): every
line after it, up to the next such line, is of that attempt, so readers can tell the
attempts apart while the file keeps everything each attempt wrote. Standard library only:
this file is copied into every run's snapshot with the runtime.
"""

from __future__ import annotations

import json
import math
from typing import Any

METRIC = "metric"
PROGRESS = "progress"
TAG = "tag"

Event = tuple[str, float, Any, Any]

_keys: dict[Any, str] = {}  # metric name -> its JSON form


def number(value: Any) -> Any:
    """A JSON-safe form of ``value``: int/float kept, ``.item()``/``float()`` tried, else str.

    Non-finite floats become the strings "nan", "inf", "-inf" (JSON has no such numbers;
    ``float()`` reads them back).
    """
    kind = type(value)
    if kind is int:
        return value
    if kind is float:
        return value if math.isfinite(value) else repr(value)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        item = getattr(value, "item", None)
        if item is not None:
            try:
                value = item()
            except Exception:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value)
            except Exception:
                return str(value)
    if isinstance(value, int):
        return int(value)
    value = float(value)
    return value if math.isfinite(value) else repr(value)


def step_number(step: Any) -> int | None:
    """A step as a whole number (a 0-d tensor or numpy integer included), or None."""
    if step is None:
        return None
    if type(step) is int:
        return int(step)
    value = number(step)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _json_number(value: Any) -> str:
    kind = type(value)
    if kind is float and value - value == 0.0:  # finite: repr is valid JSON
        return repr(value)
    if kind is int:
        return repr(value)
    return json.dumps(number(value))


def encode(event: Event) -> str:
    """One buffered event as its line of the events file."""
    kind, t, a, b = event
    if kind is METRIC:
        parts = []
        for name, value in b.items():
            key = _keys.get(name)
            if key is None:
                key = _keys[name] = json.dumps(str(name))
            parts.append(f"{key}: {_json_number(value)}")
        step = "null" if a is None else repr(a) if type(a) is int else json.dumps(step_number(a))
        return (
            f'{{"kind": "metric", "t": {t!r}, "step": {step}, "values": {{{", ".join(parts)}}}}}\n'
        )
    if kind is TAG:
        tags = {str(k): "" if v is None else str(v) for k, v in b.items()}
        return json.dumps({"kind": "tag", "t": t, "values": tags}) + "\n"
    total = None if b is None else number(b)
    return (
        f'{{"kind": "progress", "t": {t!r}, "done": {json.dumps(number(a))}, '
        f'"total": {json.dumps(total)}}}\n'
    )


def attempt_line(t: float, attempt: int) -> bytes:
    """The line a rank of attempt ``attempt`` (1 or later) writes before its first event."""
    return b'{"kind": "attempt", "t": %r, "attempt": %d}\n' % (t, attempt)


def error_line(t: float, exc: Exception) -> str:
    """The line that stands for an event that could not be encoded."""
    return json.dumps({"kind": "error", "t": t, "error": f"{type(exc).__name__}: {exc}"}) + "\n"


def outside_line(step: Any, metrics: dict[str, Any]) -> str:
    """What ``log`` prints outside a run: ``[jt] step 3 loss=0.25``."""
    parts = ["[jt]"]
    if step is not None:
        parts.append(f"step {step_number(step)}")
    for key, value in metrics.items():
        value = number(value)
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)
