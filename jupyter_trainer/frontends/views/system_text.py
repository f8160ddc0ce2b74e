"""The hardware a run used, as text: a row per rank of its CPU, memory and GPU figures
(rankside/observe/system.py samples them), for ``show`` and the static summary a notebook keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.units import format_bytes
from ...store.follow import RunFollower, Series


def _values(follower: RunFollower, name: str, rank: int) -> Sequence[float]:
    series: Series | None = follower.system.get(name, {}).get(rank)
    return series.values if series is not None else ()


def _mean_peak(values: Sequence[float], unit: str = "%") -> str:
    if not values:
        return "-"
    return f"{sum(values) / len(values):.0f}{unit} / {max(values):.0f}{unit}"


def system_rows(follower: RunFollower) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """(header, rows): per rank the mean and peak CPU, the peak resident memory and, where
    the rank has a GPU, its utilisation (mean and peak), peak memory of the total and mean
    power."""
    ranks = sorted({rank for by_rank in follower.system.values() for rank in by_rank})
    gpus = any(_values(follower, "gpu_index", rank) for rank in ranks)
    header: tuple[str, ...] = ("rank", "cpu mean / peak", "memory peak")
    if gpus:
        header += ("gpu", "gpu util mean / peak", "gpu memory peak", "power mean")
    rows: list[tuple[Any, ...]] = []
    for rank in ranks:
        rss = _values(follower, "rss_bytes", rank)
        row: tuple[Any, ...] = (
            rank,
            _mean_peak(_values(follower, "cpu_percent", rank)),
            format_bytes(int(max(rss))) if rss else "-",
        )
        if gpus:
            index = _values(follower, "gpu_index", rank)
            used = _values(follower, "gpu_mem_used_bytes", rank)
            total = _values(follower, "gpu_mem_total_bytes", rank)
            power = _values(follower, "gpu_power_watts", rank)
            row += (
                f"{int(index[-1])}" if index else "-",
                _mean_peak(_values(follower, "gpu_util_percent", rank)),
                f"{format_bytes(int(max(used)))} of {format_bytes(int(total[-1]))}"
                if used and total
                else "-",
                f"{sum(power) / len(power):.0f} W" if power else "-",
            )
        rows.append(row)
    return header, rows
