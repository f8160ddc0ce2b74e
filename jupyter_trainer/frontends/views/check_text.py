"""A check's result as text (``jupyter-trainer check``): who joined and how fast, the
collectives as nccl-tests prints them, the links between nodes, and the problems found.

Before a run (``--check``) the same result is told in brief: what is being checked, at once,
then one summary line, with the problems under it and the table folded away (a collapsed
section in a notebook front end; its run's record otherwise), so the run's own view is not
pushed below some seventy lines of figures."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from ...core.printable import printable

OP_TITLES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "broadcast": "broadcast"}


def size_text(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{int(nbytes)} B"


def check_plan(allocation: Mapping[str, Any], max_bytes: int) -> str:
    """What a check before a run is about to do, said before it starts (it takes seconds)."""
    where = printable(str(allocation.get("target") or "local"))
    nodes = allocation.get("nodes") or 1
    shape = f"{nodes} node{'s' if nodes != 1 else ''}"
    if allocation.get("procs"):
        shape += f" × {allocation['procs']} process{'es' if allocation['procs'] != 1 else ''}"
    backend = f", {allocation['backend']}" if allocation.get("backend") else ""
    return (
        f"checking {where} ({shape}{backend}) before the run: does every rank join, and how "
        f"fast are all_reduce, all_gather and broadcast up to {size_text(max_bytes)}"
        + (" and the links between nodes" if nodes > 1 else "")
        + "? …"
    )


def _joined_line(result: Any) -> str:
    return (
        f"check {result.run.id}: {'passed' if result.ok else 'FAILED'} · {len(result.joined)} "
        f"of {result.world_size} ranks joined"
        + (f" in {max(result.joined.values()):.2f} s" if result.joined else "")
    )


def check_summary(result: Any) -> str:
    """One line: passed or not, who joined, the largest all_reduce and the slowest link."""
    parts = [_joined_line(result)]
    rows = result.collectives.get("all_reduce") or []
    if rows:
        row = rows[-1]
        figure = (
            f"{row['busbw_GBps']:.2f} GB/s bus bandwidth"
            if result.world_size > 1
            else f"{row['algbw_GBps']:.2f} GB/s"
        )
        parts.append(
            f"all_reduce {size_text(row['bytes'])} in {row['time_us'] / 1e3:.2f} ms, {figure}"
        )
    slow = result.slowest_link
    if slow is not None:
        parts.append(
            f"slowest link node {slow['nodes'][0]} <-> node {slow['nodes'][1]} "
            f"{slow['bandwidth_GBps']:.2f} GB/s"
        )
    return " · ".join(parts)


def check_brief(result: Any) -> str:
    """The summary line, the problems found, and where the whole table is."""
    lines = [check_summary(result)]
    lines += [f"problem: {printable(problem)}" for problem in result.problems]
    lines.append(f"  (every figure: jupyter-trainer show {result.run.id})")
    return "\n".join(lines)


def check_html(result: Any) -> str:
    """The summary line with the whole table folded under it, the problems in view."""
    problems = "".join(
        f"<div style='color:var(--jp-error-color1,#c62828)'>problem: "
        f"{html.escape(printable(p))}</div>"
        for p in result.problems
    )
    return (
        f"<details><summary>{html.escape(check_summary(result))}</summary>"
        f"<pre>{html.escape(check_text(result))}</pre></details>{problems}"
    )


def check_text(result: Any) -> str:
    """``result`` is an ``api.check.CheckResult``."""
    lines = [_joined_line(result)]
    for rank, info in sorted(result.ranks.items()):
        joined = result.joined.get(rank)
        where = printable(str(info.get("interface") or "?"))
        told = [f"{k}={info[k]}" for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if k in info]
        lines.append(
            f"  rank {rank:<3} {printable(str(info.get('host', '?'))):<16} "
            f"{'joined in %.2f s' % joined if joined is not None else 'never joined':<17} "
            f"interface {where}{' (' + ', '.join(told) + ')' if told else ''} · "
            f"torch {info.get('torch')}" + (f" · NCCL {info['nccl']}" if info.get("nccl") else "")
        )
    for op, rows in result.collectives.items():
        if not rows:
            continue
        lines.append(f"{OP_TITLES.get(op, op)}:")
        lines.append(f"  {'size':>10} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}")
        for row in rows:
            lines.append(
                f"  {size_text(row['bytes']):>10} {row['time_us']:>12.1f} "
                f"{row['algbw_GBps']:>13.3f} {row['busbw_GBps']:>13.3f}"
            )
    if result.links:
        lines.append("links between nodes:")
        for row in result.links:
            a, b = row["hosts"]
            lines.append(
                f"  node {row['nodes'][0]} ({printable(a)}) <-> node {row['nodes'][1]} "
                f"({printable(b)}): {row['bandwidth_GBps']:.3f} GB/s, "
                f"latency {row['latency_us']:.1f} us"
            )
        slow = result.slowest_link
        if slow is not None and len(result.links) > 1:
            lines.append(
                f"  slowest link: node {slow['nodes'][0]} <-> node {slow['nodes'][1]} "
                f"({slow['bandwidth_GBps']:.3f} GB/s)"
            )
    elif result.ok:
        lines.append("links between nodes: none (one node)")
    for problem in result.problems:
        lines.append(f"problem: {printable(problem)}")
    return "\n".join(lines)
