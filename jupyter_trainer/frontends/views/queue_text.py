"""Why a queued run waits, in words: the scheduler's reason, its expected start and the
run's place among the pending jobs (what ``squeue`` says on Slurm)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ...core.units import fmt_duration


def waiting_words(queue: Mapping[str, Any], now: float) -> str:
    """Why a queued job waits and, as far as the scheduler knows, when it should start and
    where it stands: ``job 42 waiting: Resources; expected to start at 13:05 (in 12:00);
    1st of 3 pending in partition gpu`` (Slurm), ``waiting: ...; 2nd of 2 pending in queue
    team-a`` (Kueue)."""
    job = queue.get("job_id")
    text = f"{f'job {job} ' if job is not None else ''}waiting: {queue['reason']}"
    start_at = queue.get("start_at")
    if isinstance(start_at, (int, float)):
        when = time.strftime("%H:%M", time.localtime(start_at))
        if start_at - now > 86400:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(start_at))
        text += f"; expected to start at {when}"
        text += f" (in {fmt_duration(start_at - now)})" if start_at > now else ""
    position, pending = queue.get("position"), queue.get("pending")
    if isinstance(position, int) and isinstance(pending, int):
        text += f"; {ordinal(position)} of {pending} pending"
        text += f" in partition {queue['partition']}" if queue.get("partition") else ""
        text += f" in queue {queue['local_queue']}" if queue.get("local_queue") else ""
    return text


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
