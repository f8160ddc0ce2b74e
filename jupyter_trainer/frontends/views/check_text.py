"""A check's result as text (``jupyter-trainer check``): who joined and how fast, the
collectives as nccl-tests prints them, the links between nodes, and the problems found."""

from __future__ import annotations

from typing import Any

from ...core.printable import printable

OP_TITLES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "broadcast": "broadcast"}


def size_text(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{int(nbytes)} B"


def check_text(result: Any) -> str:
    """``result`` is an ``api.check.CheckResult``."""
    run = result.run
    lines = [
        f"check {run.id}: {'passed' if result.ok else 'FAILED'} · {len(result.joined)} of "
        f"{result.world_size} ranks joined"
        + (f" in {max(result.joined.values()):.2f} s" if result.joined else "")
    ]
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
