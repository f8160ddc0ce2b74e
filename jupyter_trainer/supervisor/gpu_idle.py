"""Ranks whose GPU sits idle while the others' work: the stall detector's "GPU idle".

A rank that hangs outside a collective (a dead data loader, a deadlock of its own) leaves its
GPU idle, while the ranks waiting for it spin in NCCL: their GPUs read 100 % utilisation at a
fraction of their power. So a GPU is *idle* when its utilisation is low and its power is a
small share of its limit, and *busy* when its utilisation is high; a rank whose GPU has been
idle for the whole stall timeout while another rank's is busy is named, even if it still
logs. The figures are the ranks' own samples (rankside/observe/system.py) in their events files.
Where NVML gives each process's share of the SM time, that share is the rank's utilisation
and power is left aside: it tells ranks that share one GPU apart.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from pathlib import Path
from typing import Any

from ..store import read_complete_lines

IDLE_UTIL = 10.0  # % of utilisation under which a GPU may be idle ...
IDLE_POWER = 0.4  # ... when it also draws under this share of its power limit (where known)
BUSY_UTIL = 50.0  # % at which another rank's GPU counts as working
KEEP = 4096  # samples kept per rank
READ_BYTES = 4 << 20  # events read per file per look
_EVENTS = re.compile(r"rank-(\d+)\.jsonl")
_SYSTEM = b'"kind": "system"'

# t, utilisation, watts, limit, and whether the utilisation is the rank's own SM share
Sample = tuple[float, float, float | None, float | None, bool]


def idle(sample: Sample) -> bool:
    _, util, watts, limit, _ = sample
    if util >= IDLE_UTIL:
        return False
    return not (watts is not None and limit and watts / limit >= IDLE_POWER)


class GpuWatch:
    """Reads the GPU samples the ranks append to their events files, from where it left off."""

    def __init__(self, events: str) -> None:
        self.events = events
        self.offsets: dict[str, int] = {}
        self.samples: dict[int, deque[Sample]] = {}

    def read(self) -> None:
        try:
            entries = list(os.scandir(self.events))
        except FileNotFoundError:
            return
        for entry in entries:
            match = _EVENTS.fullmatch(entry.name)
            if match:
                self._read(entry.path, int(match.group(1)))

    def _read(self, path: str, rank: int) -> None:
        try:
            data, self.offsets[path] = read_complete_lines(
                Path(path), self.offsets.get(path, 0), READ_BYTES
            )
        except OSError:
            return
        if _SYSTEM not in data:
            return
        for line in data.splitlines():
            if _SYSTEM not in line or b"gpu_util_percent" not in line:
                continue
            try:
                event = json.loads(line)
                values, t = event["values"], float(event["t"])
                util = float(values.get("gpu_process_sm_percent", values["gpu_util_percent"]))
            except (ValueError, KeyError, TypeError):
                continue
            watts, limit = values.get("gpu_power_watts"), values.get("gpu_power_limit_watts")
            own = "gpu_process_sm_percent" in values
            if own:  # the rank's own share: the GPU's power is not, where ranks share one
                watts = limit = None
            sample = (
                t,
                util,
                float(watts) if isinstance(watts, (int, float)) else None,
                float(limit) if isinstance(limit, (int, float)) else None,
                own,
            )
            self.samples.setdefault(rank, deque(maxlen=KEEP)).append(sample)

    def idle_ranks(self, now: float, window: float) -> dict[int, dict[str, Any]]:
        """Ranks whose every sample of the last ``window`` seconds is idle (and that have a
        sample from before it), while another rank's newest sample is busy: rank -> since
        when, and its newest utilisation, power and limit."""
        self.read()
        busy = {
            rank
            for rank, samples in self.samples.items()
            if samples and samples[-1][1] >= BUSY_UTIL and now - samples[-1][0] < window
        }
        found: dict[int, dict[str, Any]] = {}
        for rank, samples in self.samples.items():
            if not samples or not busy - {rank}:
                continue
            since = None
            for sample in reversed(samples):
                if not idle(sample):
                    break
                since = sample[0]
            if since is None or now - since < window:
                continue
            _, util, watts, limit, own = samples[-1]
            found[rank] = {
                "since": since,
                "util": util,
                **({"own": True} if own else {}),
                **({"watts": watts} if watts is not None else {}),
                **({"limit": limit} if limit else {}),
            }
        return found
