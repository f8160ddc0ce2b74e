"""How fast a ``RunFollower`` reads a run's events: the cost under every monitor and the API.

    .venv/bin/python bench/follower_ingest.py [--events N] [--ranks R] [--repeats K] [--json PATH]

A real run (``--launcher torchrun``, R ranks, in a fresh temporary JUPYTER_TRAINER_HOME)
logs N metric events per rank with ``jt.log(step=i, loss=..., acc=...)`` plus one
``jt.progress`` every 1000 steps, exactly as a training loop would; the run's
``events/rank-<r>.jsonl`` files are what gets read. Then, K times each:

- full:    a fresh ``RunFollower(...).poll()`` reads the whole history at once;
- stepped: a fresh follower reads it with ``poll(max_bytes=4 MiB)`` calls until it has
           caught up, as the widget's feeder does (so it can publish between steps).

Reported: events/s (metric and progress events, i.e. lines) and MB/s for the best and the
median repeat. Target: >= 200,000 events/s. The number depends on the machine and on its
load (the bench prints the load average); close other work before running it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import jupyter_trainer as jt  # noqa: E402
from jupyter_trainer.store.follow import RunFollower  # noqa: E402

TARGET = 200_000

LOGGER = """
from jupyter_trainer import runtime as jt
N = {events}
for i in range(N):
    jt.log(step=i, loss=1.0 / (i + 1), acc=i / N)
    if i % 1000 == 0:
        jt.progress(i, N)
jt.progress(N, N)
"""


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def make_run(home: Path, events: int, ranks: int) -> jt.Run:
    started = time.monotonic()
    run = jt.submit(
        LOGGER.format(events=events),
        procs=ranks,
        launcher="torchrun",
        name="ingest-bench",
        home=home,
    )
    run.wait(timeout=3600)
    print(
        f"logged {events:,} events x {ranks} ranks in {time.monotonic() - started:.1f} s "
        f"(run {run.id})"
    )
    return run


def measure(run: jt.Run, stepped: bool) -> tuple[float, int, int]:
    follower = RunFollower(run.store, run.id)
    started = time.perf_counter()
    if stepped:
        while True:
            follower.poll(max_bytes=4 << 20)
            if not follower.behind:
                break
    else:
        follower.poll()
    seconds = time.perf_counter() - started
    return seconds, follower.events_read, sum(follower.offsets.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="metric events per rank")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jt-ingest-") as tmp:
        run = make_run(Path(tmp), args.events, args.ranks)
        results = {}
        for mode in ("full", "stepped"):
            rates, mbs = [], []
            for _ in range(args.repeats):
                seconds, events, size = measure(run, mode == "stepped")
                rates.append(events / seconds)
                mbs.append(size / seconds / 1e6)
            results[mode] = {
                "events": events,
                "bytes": size,
                "best_events_per_s": max(rates),
                "median_events_per_s": statistics.median(rates),
                "best_mb_per_s": max(mbs),
                "median_mb_per_s": statistics.median(mbs),
            }
    print(f"\nload average {loadavg()} · {os.cpu_count()} CPUs · Python {sys.version.split()[0]}")
    print(
        f"{'read':<8} {'events':>11} {'MB':>7} {'best ev/s':>11} {'median ev/s':>12} {'median MB/s':>12}"
    )
    for mode, r in results.items():
        print(
            f"{mode:<8} {r['events']:>11,} {r['bytes'] / 1e6:>7.1f} {r['best_events_per_s']:>11,.0f} "
            f"{r['median_events_per_s']:>12,.0f} {r['median_mb_per_s']:>12.1f}"
        )
    ok = results["full"]["median_events_per_s"] >= TARGET
    print(f"\ntarget >= {TARGET:,} events/s: {'met' if ok else 'NOT met'} (median, full read)")
    if args.json:
        args.json.write_text(json.dumps({"loadavg": loadavg(), "results": results}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
