"""Incremental reading of a run's events: what every reader (API, monitors, CLI) builds on.

A ``RunFollower`` keeps a byte offset per rank and reads only what was appended since the
last ``poll()``, so following a live run costs the new bytes, not the whole history.
"""

from __future__ import annotations

import math
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from .store import TERMINAL, Store


@dataclass
class Series:
    """One metric of one rank: parallel arrays of step (NaN when not given), value, time."""

    steps: array = field(default_factory=lambda: array("d"))
    values: array = field(default_factory=lambda: array("d"))
    times: array = field(default_factory=lambda: array("d"))

    def append(self, step: Any, value: float, t: float) -> None:
        self.steps.append(float(step) if isinstance(step, (int, float)) else math.nan)
        self.values.append(value)
        self.times.append(t)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def last(self) -> float:
        return self.values[-1]


@dataclass
class Progress:
    done: float
    total: float | None
    t: float


class RunFollower:
    """Reads a run's events incrementally into per-rank metric series and progress."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.offsets: dict[int, int] = {}
        self.series: dict[str, dict[int, Series]] = {}
        self.progress: dict[int, Progress] = {}
        self.events_read = 0
        self.state: dict[str, Any] = {}

    def poll(self) -> bool:
        """Read what was appended since the last call; True if anything new arrived."""
        self.state = self.store.read_state(self.run_id)
        new = 0
        for rank in self.store.ranks(self.run_id):
            offset = self.offsets.get(rank, 0)
            events, self.offsets[rank] = self.store.read_events(self.run_id, rank, offset)
            for event in events:
                self._ingest(rank, event)
            new += len(events)
        self.events_read += new
        return new > 0

    def _ingest(self, rank: int, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        t = event.get("t", 0.0)
        if kind == "metric":
            for name, value in event.get("values", {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    by_rank = self.series.setdefault(name, {})
                    by_rank.setdefault(rank, Series()).append(event.get("step"), float(value), t)
        elif kind == "progress":
            self.progress[rank] = Progress(event.get("done", 0), event.get("total"), t)

    @property
    def finished(self) -> bool:
        return self.state.get("status") in TERMINAL

    def overall_progress(self) -> Progress | None:
        """The least advanced rank's progress: the run is as far along as its slowest rank."""
        if not self.progress:
            return None
        return min(self.progress.values(), key=lambda p: (p.done / p.total) if p.total else p.done)

    def latest(self, rank: int | None = None) -> dict[str, float]:
        """Each metric's newest value (of ``rank``, or rank 0 when present, else any rank)."""
        out = {}
        for name, by_rank in self.series.items():
            pick = rank if rank is not None else (0 if 0 in by_rank else min(by_rank))
            if pick in by_rank and len(by_rank[pick]):
                out[name] = by_rank[pick].last
        return out

    def follow(self, interval: float = 0.25, timeout: float | None = None):
        """Yield after each poll until the run ends (one final poll included)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.poll()
            yield self
            if self.finished:
                return
            if deadline is not None and time.monotonic() > deadline:
                return
            time.sleep(interval)


def elapsed(state: dict[str, Any], now: float | None = None) -> float:
    """Seconds from the run's creation to its end (or now)."""
    start = state.get("created", 0.0)
    end = state.get("ended") or (now or time.time())
    return max(0.0, end - start)
