"""The run view's System section, as the feeder sends it: a compact chart per figure with a
line per rank, each rank's newest figures, and the ranks whose GPU sits idle while the
others' work (rankside/observe/system.py samples the figures)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...store.follow import RunFollower, Series, downsample

# (figure, chart title, unit) charted, in this order, when the ranks report it
CHARTS = (
    ("gpu_util_percent", "GPU utilisation", "%"),
    ("gpu_process_sm_percent", "GPU SM time, own", "%"),
    ("gpu_power_watts", "GPU power", "W"),
    ("gpu_mem_used_bytes", "GPU memory", "bytes"),
    ("cpu_percent", "CPU", "%"),
    ("rss_bytes", "memory", "bytes"),
    ("disk_read_bytes_per_s", "disk read", "bytes/s"),
    ("node_net_rx_bytes_per_s", "node network in", "bytes/s"),
)
POINTS = 120  # per rank and chart
MAX_RANKS = 8  # charted: the first ranks (the table has them all)
RECENT = 3  # samples a rank's current GPU figures are the mean of
IDLE_UTIL = 10.0  # a GPU under this utilisation (%) ...
IDLE_POWER = 0.4  # ... and this share of its power limit, where known, is idle
BUSY_UTIL = 50.0  # while another rank's is at least this busy
HINT_SAMPLES = 6  # samples an input-bound hint looks at
STARVED_UTIL = 30.0  # a GPU busy less than this (%) ...
SATURATED_CPU = 90.0  # ... while its rank's processes keep a core this busy: input-bound


def samples(follower: RunFollower) -> int:
    """How many figures have been read so far (the section changes when this does)."""
    return sum(len(s) for by_rank in follower.system.values() for s in by_rank.values())


def _recent(series: Series | None) -> float | None:
    if series is None or not len(series):
        return None
    tail = series.values[-RECENT:]
    return sum(tail) / len(tail)


def own_util(system: Mapping[str, Mapping[int, Series]]) -> dict[int, Series]:
    """Each rank's GPU utilisation: its own processes' share of the SM time where NVML gives
    it (ranks that share a GPU differ there), else the GPU's utilisation."""
    return {
        **system.get("gpu_util_percent", {}),
        **system.get("gpu_process_sm_percent", {}),
    }


def idle_ranks(follower: RunFollower) -> list[int]:
    """Ranks whose GPU is idle (low utilisation and, where known, low power; or their own
    low share of the SM time) while another rank's is busy: a rank waiting on the others,
    or starved of input."""
    util = own_util(follower.system)
    power = follower.system.get("gpu_power_watts", {})
    limit = follower.system.get("gpu_power_limit_watts", {})
    own = follower.system.get("gpu_process_sm_percent", {})
    recent = {rank: _recent(series) for rank, series in util.items()}
    if not any(value is not None and value >= BUSY_UTIL for value in recent.values()):
        return []
    idle = []
    for rank, value in sorted(recent.items()):
        if value is None or value >= IDLE_UTIL:
            continue
        watts, cap = _recent(power.get(rank)), _recent(limit.get(rank))
        if rank not in own and watts is not None and cap and watts / cap >= IDLE_POWER:
            continue  # drawing power: busy in a way utilisation does not show
        idle.append(rank)
    return idle


def input_bound(system: Mapping[str, Mapping[int, Series]]) -> list[str]:
    """Ranks whose GPU is mostly idle while their CPU is saturated, over their last few
    samples (``system``: a follower's figures): they likely wait for their input (loading,
    decoding, augmenting on the CPU)."""
    util = own_util(system)
    cpu = system.get("cpu_percent", {})
    hints = []
    for rank in sorted(set(util) & set(cpu)):
        gpu_tail, cpu_tail = util[rank].values[-HINT_SAMPLES:], cpu[rank].values[-HINT_SAMPLES:]
        if len(gpu_tail) < 3 or len(cpu_tail) < 3:
            continue
        gpu_mean, cpu_mean = sum(gpu_tail) / len(gpu_tail), sum(cpu_tail) / len(cpu_tail)
        if gpu_mean < STARVED_UTIL and cpu_mean >= SATURATED_CPU:
            hints.append(
                f"rank {rank} looks input-bound: its GPU is busy {gpu_mean:.0f}% of the time "
                f"while its processes keep {cpu_mean / 100:.1f} cores busy; more data-loader "
                "workers (num_workers), or less work per sample on the CPU, may help"
            )
    return hints


def system_payload(follower: RunFollower) -> dict[str, Any]:
    t0 = float(follower.state.get("created") or 0.0)
    charts = []
    for name, title, unit in CHARTS:
        by_rank = follower.system.get(name)
        if not by_rank:
            continue
        series = []
        for rank in sorted(by_rank)[:MAX_RANKS]:
            xs, ys = downsample(by_rank[rank].times, by_rank[rank].values, POINTS)
            series.append(
                {
                    "rank": rank,
                    "x": [round(float(x) - t0, 2) for x in xs],
                    "y": [float(y) for y in ys],
                }
            )
        charts.append(
            {"name": name, "title": title, "unit": unit, "ranks": len(by_rank), "series": series}
        )
    ranks = sorted({rank for by_rank in follower.system.values() for rank in by_rank})
    latest = {
        str(rank): {
            name: by_rank[rank].last
            for name, by_rank in sorted(follower.system.items())
            if rank in by_rank and len(by_rank[rank])
        }
        for rank in ranks
    }
    return {
        "charts": charts,
        "latest": latest,
        "idle": idle_ranks(follower),
        "hints": input_bound(follower.system),
        "samples": samples(follower),
    }
