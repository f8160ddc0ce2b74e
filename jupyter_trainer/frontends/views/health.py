"""A run's restarts, stalled ranks and first NaN/inf values, as every view shows them.

The supervisor records them in ``state.json`` (``attempts``, ``stalled``, ``stacks``,
``non_finite``) and the spec says what was asked for (``launch.max_restarts``, ``watch``).
The widget, the Lab view, the runs list and the text monitor all read them through here,
so they agree on what "attempt 2 of 3" or "stalled for 42 s" means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .queue_text import waiting_words

STACK_CHARS = (
    20_000  # of one rank's stack in a payload: its head (py-spy prints the innermost frame first)
)
STALLED_STACKS = 8  # ranks whose stacks a payload carries; the others are named without
STACK_LINE = "Thread "  # where a py-spy dump's frames begin, after its process header


def watch_settings(spec: Any | None) -> dict[str, Any]:
    """What the run asked to be watched for: restarts, the stall timeout, NaN stops (the
    defaults for a spec that says nothing of them)."""
    watch = getattr(spec, "watch", None)
    return {
        "max_restarts": int(getattr(getattr(spec, "launch", None), "max_restarts", 0) or 0),
        "stall_timeout": getattr(watch, "stall_timeout", None),
        "on_stall": getattr(watch, "on_stall", None),
        "stop_on_nan": list(getattr(watch, "stop_on_nan", ()) or ()),
    }


def attempts_of(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's attempts in order (attempt 0 is the first start)."""
    found = [
        a
        for a in state.get("attempts") or ()
        if isinstance(a, dict) and isinstance(a.get("attempt"), int)
    ]
    return sorted(found, key=lambda a: a["attempt"])


def restarts_shown(attempts: list[dict[str, Any]], max_restarts: int) -> bool:
    """Whether attempts are worth naming: restarts were allowed, or one happened."""
    return bool(attempts) and (max_restarts > 0 or len(attempts) > 1)


def attempt_label(attempts: list[dict[str, Any]], max_restarts: int) -> str | None:
    """ "attempt 2/3" for the latest attempt (of ``max_restarts`` + 1), or None."""
    if not restarts_shown(attempts, max_restarts):
        return None
    n = attempts[-1]["attempt"] + 1
    return f"attempt {n}/{max_restarts + 1}" if max_restarts else f"attempt {n}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def stalled_of(state: Mapping[str, Any], now: float) -> list[dict[str, Any]]:
    """The stalled ranks, with ``seconds`` counted from ``since`` up to ``now`` while the run
    runs (up to its end once it ended). Ranks that do not wait on a peer come first: when
    one rank hangs, the others stall waiting for it in a collective."""
    running = state.get("status") == "running"
    end = now if running else _number(state.get("ended"))
    out = []
    for entry in state.get("stalled") or ():
        if not isinstance(entry, dict) or not isinstance(entry.get("rank"), int):
            continue
        since = _number(entry.get("since"))
        seconds = _number(entry.get("seconds"))
        if since is not None and end is not None:
            seconds = max(0.0, end - since)
        out.append({**entry, "seconds": seconds, "waiting": bool(entry.get("waiting"))})
    return sorted(out, key=lambda e: (e["waiting"], e["rank"]))


def non_finite_of(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The first NaN/inf of each metric, in the order they happened."""
    facts = state.get("non_finite") or {}
    out = [{"metric": str(name), **fact} for name, fact in facts.items() if isinstance(fact, dict)]
    return sorted(out, key=lambda f: (_number(f.get("t")) or 0.0, f["metric"]))


def clip_stack(stack: Any, chars: int = STACK_CHARS) -> str | None:
    """The head of a stack dump, at most ``chars`` characters, cut at a line."""
    if not isinstance(stack, str) or not stack:
        return None
    if len(stack) <= chars:
        return stack
    head = stack[:chars].rsplit("\n", 1)[0]
    return f"{head}\n… {len(stack) - len(head):,} more characters (the whole dump is in the run's state.json)"


def stack_head(stack: str, lines: int = 12) -> list[str]:
    """The first ``lines`` lines of a stack dump from its first thread on (the process
    header before it says nothing about where the rank is)."""
    rows = [line.rstrip() for line in stack.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(rows) if line.startswith(STACK_LINE)), 0)
    return rows[start : start + lines]


def debugging_of(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ranks of a running run that wait in a debugger (``--debug``, ``jt.breakpoint``):
    rank, host, where it stopped, since and until when, and whether someone is attached."""
    if state.get("status") != "running":
        return []
    return [
        {
            "rank": e.get("rank"),
            "host": e.get("host"),
            "where": e.get("where"),
            "since": e.get("since"),
            "until": e.get("until"),
            "attached": bool(e.get("attached")),
        }
        for e in state.get("debugging") or ()
        if isinstance(e, dict)
    ]


def health_payload(state: dict[str, Any], spec: Any, now: float) -> dict[str, Any]:
    """What a view shows of restarts, stalls and NaN/inf: always the same keys, empty
    when there is nothing to say."""
    settings = watch_settings(spec)
    stalled = stalled_of(state, now)
    for i, entry in enumerate(stalled):
        entry["stack"] = clip_stack(entry.get("stack")) if i < STALLED_STACKS else None
    out = {
        **settings,
        "attempts": attempts_of(state),
        "stalled": stalled,
        "non_finite": non_finite_of(state),
        "debugging": debugging_of(state),
    }
    stacks = state.get("stacks")
    if isinstance(stacks, dict) and stacks:
        ranks = sorted(stacks, key=lambda r: int(r) if str(r).isdigit() else math.inf)
        out["stacks"] = {str(r): clip_stack(stacks[r]) for r in ranks[:STALLED_STACKS]}
    return out


def list_fields(state: Mapping[str, Any], spec: Any | None, now: float) -> dict[str, Any]:
    """The runs list's share of it: the latest attempt, the allowed restarts and the
    stalled ranks of a running run (rank, last step, seconds), without their stacks."""
    attempts = attempts_of(state)
    stalled = [
        {
            "rank": e["rank"],
            "last_step": e.get("last_step"),
            "seconds": e["seconds"],
            "waiting": e["waiting"],
        }
        for e in stalled_of(state, now)
    ]
    queue = state.get("queue") or {}
    waiting = state.get("status") == "queued" and queue.get("reason")
    return {
        "attempt": attempts[-1]["attempt"] if attempts else None,
        "max_restarts": watch_settings(spec)["max_restarts"],
        "stalled": stalled if state.get("status") == "running" else [],
        "debugging": [e["rank"] for e in debugging_of(state)],
        "waiting": waiting_words(queue, now) if waiting else None,
    }
