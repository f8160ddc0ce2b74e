"""The analysis of a run's Flight Recorder dumps (``Run.collectives()``) as text, for ``show``
and ``jupyter-trainer hang``: the verdict, each rank's last collective, the mismatches, the
stragglers, and the stack of each rank it names, the user's frames first."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...core.printable import printable, terminal_safe
from ...supervisor.collectives import DUMPS, analyse, clock, read_dumps, read_stacks


def worth_showing(found: dict[str, Any] | None) -> bool:
    """Whether the analysis says more than "nothing is wrong" (a dump at the code's end)."""
    return found is not None and bool(found["behind"] or found["mismatches"] or found["stragglers"])


def verdict_line(found: dict[str, Any]) -> str:
    return "collectives: " + terminal_safe(str(found["verdict"]))


def collectives_lines(found: dict[str, Any], stacks: bool = True) -> list[str]:
    """The verdict, then a line per rank, then the named ranks' stacks."""
    lines = [terminal_safe(str(found["verdict"]))]
    if found.get("dumped"):
        lines.append(f"(from the ranks' Flight Recorder dumps of {clock(found['dumped'])})")
    for rank, entry in sorted(found["ranks"].items(), key=lambda item: int(item[0])):
        op = entry.get("op")
        where = f"{op} #{entry.get('seq')}" if op else "no collective recorded"
        host = f" on {printable(str(entry['host']))}" if entry.get("host") else ""
        mark = " (behind)" if int(rank) in found["behind"] else ""
        lines.append(f"  rank {rank}: {where}, {entry.get('state')}{host}{mark}")
    for mismatch in found["mismatches"][1:4]:
        lines.append(
            f"  also: ranks {', '.join(str(r) for r in mismatch['ranks'])} differ at "
            f"{mismatch['usual']['op']} #{mismatch['seq']} ({mismatch['kind']})"
        )
    for straggler in found["stragglers"]:
        lines.append(
            f"  straggler: rank {straggler['rank']}, {straggler['late_s'] * 1000:.0f} ms late on "
            f"average over {straggler['collectives']} collectives"
        )
    if stacks:
        for rank, entry in sorted(found["stacks"].items()):
            text = str(entry.get("stack") or "").rstrip("\n")
            if text:
                lines.append(f"rank {rank}'s stack:")
                lines.append(terminal_safe(text))
    return lines


def run_collectives(run_dir: Path) -> dict[str, Any] | None:
    """``Run.collectives()`` of the run in ``run_dir``."""
    return analyse(read_dumps(run_dir), read_stacks(run_dir))


_PAYLOADS: dict[str, tuple[Any, dict[str, Any] | None]] = {}  # run folder -> (files, payload)
_PAYLOADS_KEPT = 64


def collectives_payload(run_dir: Path | None) -> dict[str, Any] | None:
    """What the run view shows of the analysis (its verdict line), or None when it says
    nothing is wrong; analysed again only when a dump or the saved stacks change."""
    if run_dir is None:
        return None
    folder = Path(run_dir) / DUMPS
    try:
        files = tuple(sorted((e.name, e.stat().st_mtime_ns) for e in os.scandir(folder)))
    except OSError:
        return None
    key = str(run_dir)
    cached = _PAYLOADS.get(key)
    if cached is not None and cached[0] == files:
        return cached[1]
    found = run_collectives(run_dir)
    payload = None
    if found is not None and worth_showing(found):
        payload = {
            "verdict": found["verdict"],
            "behind": found["behind"],
            "op": found["op"],
            "seq": found["seq"],
        }
    if len(_PAYLOADS) >= _PAYLOADS_KEPT:
        _PAYLOADS.pop(next(iter(_PAYLOADS)))
    _PAYLOADS[key] = (files, payload)
    return payload
