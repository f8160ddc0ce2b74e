"""A run's restarts, stalled ranks and NaN/inf values in words: the warnings a text monitor
prints as they happen (``HealthNotes``) and the lines of the end-of-run summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...core.printable import printable
from ...core.units import fmt_clock, fmt_duration, fmt_seconds
from ...supervisor.stack_text import where_words
from .health import (
    attempt_label,
    attempts_of,
    debugging_of,
    non_finite_of,
    restarts_shown,
    stack_head,
    stalled_of,
    watch_settings,
)

STALL_WARNINGS = 8  # stalled ranks warned of one by one at a time; the others in one line


def gpu_idle_words(idle: Mapping[str, Any]) -> str:
    """``its GPU is idle (2% utilisation, 60 W of 700 W) while the others work``; where the
    figure is the rank's own share of the SM time (NVML), ``its GPU work has stopped (its
    processes had 0% of the SM time) while the others work``."""
    if idle.get("own"):
        return (
            f"its GPU work has stopped (its processes had {idle.get('util', 0):.0f}% of the "
            "SM time) while the others work"
        )
    parts = [f"{idle.get('util', 0):.0f}% utilisation"]
    if isinstance(idle.get("watts"), (int, float)):
        limit = f" of {idle['limit']:.0f} W" if isinstance(idle.get("limit"), (int, float)) else ""
        parts.append(f"{idle['watts']:.0f} W{limit}")
    return f"its GPU is idle ({', '.join(parts)}) while the others work"


def stall_lines(entry: dict[str, Any], stack_lines: int = 12) -> list[str]:
    """A stalled rank's warning and the first lines of its stack."""
    step = entry.get("last_step")
    line = (
        f"WARNING: rank {entry['rank']} stalled for {fmt_seconds(entry.get('seconds') or 0)}"
        + (f" after step {step}" if step is not None else " before its first step")
        + (f" on {entry['host']}" if entry.get("host") else "")
        + (f" (no progress since {fmt_clock(entry['since'])})" if entry.get("since") else "")
    )
    if isinstance(entry.get("frame"), dict):  # the innermost frame of the user's own code
        line += f", in {where_words(entry['frame'])}"
    if entry.get("waiting"):
        line += ": it waits in a collective for a peer"
    if isinstance(entry.get("gpu_idle"), dict):
        line += f"; {gpu_idle_words(entry['gpu_idle'])}"
    stack = entry.get("stack")
    return [line] + ["    " + row for row in stack_head(stack, stack_lines)] if stack else [line]


def non_finite_line(fact: dict[str, Any], stop_on_nan: Sequence[str] = ()) -> str:
    """ "loss became nan at step 15 on rank 0"."""
    step = fact.get("step")
    line = (
        f"{printable(str(fact['metric']))} became {fact.get('value', 'nan')}"
        + (f" at step {step}" if step is not None else "")
        + f" on rank {fact.get('rank')}"
    )
    return line + (" (--stop-on-nan fails the run)" if fact["metric"] in stop_on_nan else "")


def attempt_lines(state: Mapping[str, Any], max_restarts: int) -> list[str]:
    """Each attempt: when it started, how long it ran and how it ended."""
    attempts = attempts_of(state)
    if not restarts_shown(attempts, max_restarts):
        return []
    total = f" of {max_restarts + 1} allowed" if max_restarts else ""
    lines = [f"attempts: {len(attempts)}{total}"]
    for i, a in enumerate(attempts):
        last = i == len(attempts) - 1
        end = a.get("end") or (state.get("ended") if last else None)
        ran = fmt_duration(end - a["start"]) if end and a.get("start") else "?"
        if a.get("failed_rank") is not None or a.get("error"):
            who = (
                f"rank {a['failed_rank']} failed" if a.get("failed_rank") is not None else "failed"
            )
            outcome = who + (f": {a['error']}" if a.get("error") else "")
        else:
            outcome = state.get("status", "?") if last else "ended"
        started = fmt_clock(a["start"]) if a.get("start") else "?"
        lines.append(f"  attempt {a['attempt'] + 1}: started {started}, ran {ran}, {outcome}")
    return lines


def health_summary(state: Mapping[str, Any], spec: Any, stacks: bool = True) -> list[str]:
    """The end summary's lines on restarts, NaN/inf and the stacks of a stall."""
    settings = watch_settings(spec)
    lines = attempt_lines(state, settings["max_restarts"])
    facts = non_finite_of(state)
    if facts:
        lines.append(
            "non-finite values: "
            + "; ".join(non_finite_line(f, settings["stop_on_nan"]) for f in facts)
        )
    saved = state.get("stacks") or {}
    if stacks and isinstance(saved, dict):
        for rank, stack in sorted(saved.items(), key=lambda kv: str(kv[0]).zfill(8)):
            if isinstance(stack, str) and stack:
                lines.append(f"stack of rank {rank} when the run was ended for a stall:")
                lines += ["    " + row for row in stack_head(stack)]
    return lines


class HealthNotes:
    """What the text monitor has said about restarts, stalls and NaN/inf: each once."""

    def __init__(self, spec: Any = None, run_id: str = "RUN") -> None:
        self.settings = watch_settings(spec)
        self.run_id = run_id
        self.attempts_said = 1  # the first attempt is the run's start: nothing to say
        self.stalls: dict[int, Any] = {}  # rank -> since, of the stalls said and not over
        self.non_finite: set[str] = set()
        self.debugging: set[tuple[Any, Any]] = set()  # (rank, since) of the waits said

    def news(self, state: dict[str, Any], now: float) -> list[str]:
        """Lines about what happened since the last call."""
        lines = []
        attempts = attempts_of(state)
        for i in range(self.attempts_said, len(attempts)):
            lines.append(restart_line(attempts[: i + 1], self.settings["max_restarts"]))
        self.attempts_said = max(self.attempts_said, len(attempts))
        if state.get("status") == "running":
            stalled = {e["rank"]: e for e in stalled_of(state, now)}
            new = [
                e
                for rank, e in stalled.items()
                if rank not in self.stalls or self.stalls[rank] != e.get("since")
            ]
            for entry in new[:STALL_WARNINGS]:  # a rank that waits for a peer: its top frames
                lines += stall_lines(entry, 3 if entry["waiting"] else 12)
            if len(new) > STALL_WARNINGS:
                lines.append(
                    f"WARNING: {len(new) - STALL_WARNINGS} more ranks stalled: ranks "
                    + ", ".join(str(e["rank"]) for e in new[STALL_WARNINGS:])
                )
            for rank, since in self.stalls.items():
                if rank not in stalled:
                    lines.append(
                        f"rank {rank} makes progress again"
                        + (f" after {fmt_seconds(now - since)}" if since else "")
                    )
            self.stalls = {rank: entry.get("since") for rank, entry in stalled.items()}
        for entry in debugging_of(state):
            if (entry["rank"], entry["since"]) not in self.debugging:
                self.debugging.add((entry["rank"], entry["since"]))
                lines.append(debugging_line(entry, self.run_id))
        for fact in non_finite_of(state):
            if fact["metric"] not in self.non_finite:
                self.non_finite.add(fact["metric"])
                lines.append(non_finite_line(fact, self.settings["stop_on_nan"]))
        return lines


def debugging_line(entry: Mapping[str, Any], run_id: str) -> str:
    """A rank waiting in a debugger, and how to attach to it."""
    until = f" until {fmt_clock(entry['until'])}" if entry.get("until") else ""
    return (
        f"DEBUGGING: {entry.get('where') or 'rank ' + str(entry['rank'])} (on "
        f"{entry.get('host') or '?'}): it waits{until}; attach in a terminal with "
        f"`jupyter-trainer debug {run_id}` (the kernel waiting for the run is busy: in a "
        f"notebook, the cell that waits offers pdb itself, or use `%train debug {run_id}` "
        "from another notebook)"
    )


def restart_line(attempts: list[dict[str, Any]], max_restarts: int) -> str:
    """ "restarting every rank after rank 1 failed: ... (attempt 2/3)" for the last attempt."""
    before = attempts[-2]
    why = (
        f"rank {before['failed_rank']} failed"
        if before.get("failed_rank") is not None
        else "a failure"
    )
    why += f": {before['error']}" if before.get("error") else ""
    return f"restarting every rank after {why} ({attempt_label(attempts, max_restarts)})"
