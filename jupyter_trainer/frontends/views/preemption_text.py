"""Words for a run's preemptions (``state["preemptions"]``, one per preempted attempt):
"preempted at step 40, resumed at step 40 on attempt 2". Shared by ``show``, the text
monitor's summary and ``jupyter-trainer preempt``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def preemptions_of(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = state.get("preemptions")
    return [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []


def step_words(step: Any) -> str:
    return f"step {step}" if isinstance(step, int) else "no complete checkpoint"


def preemption_line(entry: Mapping[str, Any]) -> str:
    """One preempted attempt: where it stopped, how it ended, where the next one began."""
    attempt = entry.get("attempt")
    where = f"attempt {attempt + 1} " if isinstance(attempt, int) else ""
    step = entry.get("step")
    words = f"{where}preempted at {step_words(step)}"
    if entry.get("killed"):
        words += f" (its ranks were killed after the {entry.get('grace', 0):g} s grace)"
    resumed = entry.get("resumed_attempt")
    if isinstance(resumed, int):
        at = entry.get("resumed_step")
        start = f"step {at}" if isinstance(at, int) else "the start"
        words += f", resumed at {start} on attempt {resumed + 1}"
    elif entry.get("ended") is None:
        words += " (its ranks are checkpointing)"
    missed = entry.get("not_announced")
    if isinstance(missed, dict) and missed:
        words += "; not told: " + ", ".join(f"rank {r} ({why})" for r, why in missed.items())
    return words


def preemption_lines(state: Mapping[str, Any]) -> list[str]:
    return [preemption_line(p) for p in preemptions_of(state)]
