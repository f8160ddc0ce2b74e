"""What the ranks leave about their attempts and their liveness, read from a run's folder.

- ``ranks/rank-<r>.json``: the rank's record in its current (latest) attempt.
- ``ranks/rank-<r>.attempt-<k>.json``: its record in the earlier attempt ``k``, moved aside
  by the boot script when the rank was started again.
- ``events/rank-<r>.beat``: its heartbeat: the last step, when it was logged, and when the
  rank last showed it was alive (``runtime._beat``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_RECORD = re.compile(r"rank-(\d+)(?:\.attempt-(\d+))?\.json")
_BEAT = re.compile(r"rank-(\d+)\.beat")


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            found = json.load(fh)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _records(
    folder: Path, pattern: re.Pattern[str], seen: bool = False
) -> Iterator[tuple[re.Match[str], dict[str, Any]]]:
    """Each JSON object in ``folder`` whose file name matches ``pattern``, with the match;
    with ``seen``, also when the file was last written here (this machine's clock)."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        record = _read(entry.path) if match else None
        if match is None or record is None:
            continue
        if seen:
            try:
                record["seen"] = entry.stat().st_mtime
            except OSError:
                continue
        yield match, record


def attempt_records(ranks_dir: Path) -> dict[int, dict[int, dict[str, Any]]]:
    """``{attempt: {rank: record}}`` over every attempt the ranks have recorded."""
    found: dict[int, dict[int, dict[str, Any]]] = {}
    for match, record in _records(ranks_dir, _RECORD):
        attempt = int(match.group(2)) if match.group(2) else record.get("attempt", 0)
        if isinstance(attempt, int):
            found.setdefault(attempt, {})[int(match.group(1))] = record
    return dict(sorted(found.items()))


def current_records(ranks_dir: Path) -> dict[int, dict[str, Any]]:
    """``{rank: record}`` of the latest attempt the ranks have recorded."""
    every = attempt_records(ranks_dir)
    return every[max(every)] if every else {}


def beats(events_dir: Path) -> dict[int, dict[str, Any]]:
    """``{rank: heartbeat}`` of every rank that has written one, with the time it reached
    this machine (``seen``)."""
    return {int(match.group(1)): beat for match, beat in _records(events_dir, _BEAT, seen=True)}
