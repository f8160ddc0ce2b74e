"""What every monitor says about a run's data inputs: where they came from, and, while the
run is ``preparing``, how far staging has got on each node (bytes of the total, rate, and
whether the node had the input already)."""

from __future__ import annotations

from typing import Any

from ...core.units import format_bytes

SAID_EVERY_S = 2.0  # how often the text monitor repeats a node's progress


def staging_rows(state: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per input and node from ``state["staging"]`` (what the supervisor keeps)."""
    record = state.get("staging") or {}
    rows = []
    for name, nodes in sorted((record.get("data") or {}).items()):
        for node, rec in sorted(nodes.items()):
            rows.append(
                {
                    "input": name,
                    "node": node,
                    "state": rec.get("state"),
                    "bytes": rec.get("bytes", 0),
                    "total": rec.get("total", 0),
                    "rate": rec.get("rate"),
                    "rate_text": rec.get("rate_text"),
                    "files": rec.get("files"),
                    "tool": rec.get("tool"),
                    "transferred": rec.get("transferred"),
                    "seconds": rec.get("seconds"),
                }
            )
    return rows


def staging_text(row: dict[str, Any]) -> str:
    """ "data train to n1: 25.0 MiB of 50.0 MiB, 31.2MB/s" and its ends."""
    head = f"data {row['input']} to {row['node']}"
    if row["state"] == "cached":
        return f"{head}: in the node's cache already, nothing sent"
    if row["state"] == "sent":
        rate = f", {format_bytes(row['rate'])}/s" if row.get("rate") else ""
        return (
            f"{head}: {row['files']} file(s), {format_bytes(row['transferred'] or 0)} sent "
            f"in {row['seconds']} s with {row['tool']}{rate}"
        )
    rate = f", {row['rate_text']}" if row.get("rate_text") else ""
    return f"{head}: {format_bytes(row['bytes'])} of {format_bytes(row['total'])}{rate}"


def inputs_line(spec: Any) -> str | None:
    """The run's data inputs, for summaries: name, source, size, files, hash."""
    inputs = getattr(spec, "data", ()) or ()
    if not inputs:
        return None
    return "data: " + "; ".join(
        f"{d.name} = {d.source} ({format_bytes(d.size)}, {d.files} "
        f"file{'s' if d.files != 1 else ''}, {d.hash[:12]})"
        for d in inputs
    )


class StagingNotes:
    """The text monitor's staging lines: each node's end once, its progress every
    ``SAID_EVERY_S`` while it sends."""

    def __init__(self) -> None:
        self.said: dict[tuple[str, str], tuple[str, float]] = {}

    def news(self, state: dict[str, Any], now: float) -> list[str]:
        lines = []
        for row in staging_rows(state):
            key = (row["input"], row["node"])
            last = self.said.get(key)
            done = row["state"] in ("sent", "cached")
            if last is not None and (
                last[0] == row["state"] if done else now - last[1] < SAID_EVERY_S
            ):
                continue
            self.said[key] = (row["state"], now)
            lines.append(staging_text(row))
        return lines
