"""Size of the monitor widget's updates, and the kernel's responsiveness, on a huge run.

    .venv/bin/python bench/widget_update.py [--points N] [--log-mb M] [--json PATH]

A real 2-rank run (torchrun, fresh temporary JUPYTER_TRAINER_HOME) logs N points of four
metrics per rank (``jt.log(step=i, loss=..., acc=..., lr=..., grad_norm=...)``), so each of
the 8 series has N points, and prints M MB of log lines (half per rank). Then a
``RunMonitor`` widget is attached to the finished run, as ``%train attach RUN`` does, and
every comm message it sends is captured (outside a kernel the widget's comm is a dummy
whose ``send`` the bench replaces) and sized as it travels: JSON plus binary buffers.

While the widget's feeder thread reads the history, the main thread, standing in for the
kernel, sleeps 5 ms at a time and records how late it wakes up: that is how long a cell or
a comm message would wait for the feeder.

Reported: the largest update (target <= 200 KB), the final update (every chart at full
history), the chart payload for each view (x = step or wall time, per rank or mean), the
catch-up time, the number of updates and the main thread's worst and 99th-percentile delay.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import jupyter_trainer as jt  # noqa: E402

TARGET = 200 * 1024

LOGGER = """
import sys
from jupyter_trainer import runtime as jt
N = {points}
LINES = {lines}
every = max(1, N // max(1, LINES))
line = "x" * 80
for i in range(N):
    jt.log(step=i, loss=1.0 / (i + 1), acc=i / N, lr=0.1 * 0.999999 ** i, grad_norm=(i * 7919) % 1000 / 100)
    if i % 1000 == 0:
        jt.progress(i, N)
    if i % every == 0:
        print(f"rank {{jt.rank}} step {{i:>9}} {{line}}")
jt.progress(N, N)
"""


def wire_size(data: dict, buffers: list) -> int:
    return len(json.dumps(data, separators=(",", ":")).encode()) + sum(
        len(b) for b in buffers or ()
    )


def make_run(home: Path, points: int, log_mb: float) -> jt.Run:
    lines = int(log_mb * 1e6 / 2 / 112)  # per rank; a line is ~112 bytes
    started = time.monotonic()
    run = jt.submit(
        LOGGER.format(points=points, lines=lines),
        procs=2,
        launcher="torchrun",
        name="widget-bench",
        home=home,
    )
    run.wait(timeout=3600)
    logs = sum(p.stat().st_size for p in (run.path / "logs").glob("rank-*.log"))
    events = sum(p.stat().st_size for p in (run.path / "events").glob("rank-*.jsonl"))
    print(
        f"run {run.id}: {points:,} points x 4 metrics x 2 ranks ({events / 1e6:.0f} MB of events), "
        f"{logs / 1e6:.0f} MB of logs, made in {time.monotonic() - started:.0f} s"
    )
    return run


def attach_and_measure(run: jt.Run) -> dict:
    from ipywidgets.widgets.widget import _remove_buffers

    from jupyter_trainer.frontends.widgets.widget import RunMonitor

    sent: list[tuple[float, int, list[str]]] = []
    widget = RunMonitor()
    widget.comm.send = lambda data=None, metadata=None, buffers=None: sent.append(
        (time.monotonic(), wire_size(data, buffers), sorted(data.get("state", {})))
    )
    delays: list[float] = []
    started = time.monotonic()
    widget.attach(run)
    while not widget.finished.is_set():
        before = time.perf_counter()
        time.sleep(0.005)
        delays.append(time.perf_counter() - before - 0.005)
    caught_up = time.monotonic() - started
    views = {}
    for x in ("step", "time"):
        for agg in ("ranks", "mean"):
            payload = widget._feeder.feed.chart_payload({"x": x, "agg": agg, "selected": None})
            state, _, buffers = _remove_buffers({"charts": payload})
            views[f"x={x}, {agg}"] = wire_size(state, buffers)
    state, _, buffers = _remove_buffers(widget.get_state())
    widget.close()
    sizes = [size for _, size, _ in sent]
    gaps = [b[0] - a[0] for a, b in zip(sent, sent[1:])]
    delays.sort()
    return {
        "updates": len(sent),
        "largest_update": max(sizes),
        "final_update": sizes[-1],
        "median_update": statistics.median(sizes),
        "min_gap_s": min(gaps) if gaps else None,
        "full_state": wire_size(state, buffers),
        "catch_up_s": caught_up,
        "chart_views": views,
        "main_thread_max_delay_ms": 1000 * delays[-1],
        "main_thread_p99_delay_ms": 1000 * delays[int(0.99 * (len(delays) - 1))],
        "series_points": {m["name"]: m["count"] for m in widget.metrics},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000, help="points per series")
    parser.add_argument("--log-mb", type=float, default=100.0, help="MB of logs, all ranks")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jt-widget-") as tmp:
        run = make_run(Path(tmp), args.points, args.log_mb)
        r = attach_and_measure(run)
    kb = lambda n: f"{n / 1024:.1f} KB"
    print(f"\npoints per series: {r['series_points']}")
    print(
        f"updates sent while catching up and at the end: {r['updates']} "
        f"(closest two {r['min_gap_s']:.3f} s apart), history read in {r['catch_up_s']:.1f} s"
    )
    print(
        f"largest update {kb(r['largest_update'])} · final update {kb(r['final_update'])} · "
        f"median {kb(r['median_update'])} · whole widget state {kb(r['full_state'])}"
    )
    for view, size in r["chart_views"].items():
        print(f"  charts, {view:<16} {kb(size)}")
    print(
        f"main thread (the kernel) woke late by at most {r['main_thread_max_delay_ms']:.0f} ms "
        f"(99th percentile {r['main_thread_p99_delay_ms']:.1f} ms) while the history was read"
    )
    ok = r["largest_update"] <= TARGET
    print(f"\ntarget: one update <= {TARGET // 1024} KB: {'met' if ok else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(r, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
