"""What capturing a TensorBoard ``SummaryWriter`` costs per call, against the same writer
left alone.

    .venv/bin/python bench/autolog_cost.py [--rounds N] [--calls N] [--json PATH]

Each round starts two runs of the same script (``launcher="python"``, one rank), in a fresh
random order: one with autolog on (the default), one with ``autolog=False``, the anchor. The
script times ``writer.add_scalar(tag, value, step)`` in batches of 1,000 calls and prints
the median time per call; the writer writes its event file in both. The ratio on / off is
what the capture adds to each call of the user's code, on the same machine in the same
session. The script also times ``jt.log`` alone, for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import jupyter_trainer as jt  # noqa: E402

SCRIPT = """
import statistics, sys, tempfile, time
from torch.utils.tensorboard import SummaryWriter
from jupyter_trainer import runtime as jt

calls, batch = int(sys.argv[1]), 1000
writer = SummaryWriter(tempfile.mkdtemp())
per_call, log_call = [], []
step = 0
for _ in range(calls // batch):
    start = time.perf_counter_ns()
    for _ in range(batch):
        writer.add_scalar("train/loss", 0.5, step)
        step += 1
    per_call.append((time.perf_counter_ns() - start) / batch)
for _ in range(calls // batch):
    start = time.perf_counter_ns()
    for _ in range(batch):
        jt.log(step=step, other=0.5)
        step += 1
    log_call.append((time.perf_counter_ns() - start) / batch)
writer.close()
print("add_scalar_ns", statistics.median(per_call), "jt_log_ns", statistics.median(log_call))
"""


def one(home: Path, script: Path, calls: int, autolog: bool) -> tuple[float, float]:
    run = jt.submit(
        script=str(script), args=[str(calls)], launcher="python", autolog=autolog, home=home
    )
    run.wait(timeout=600)
    found = re.search(r"add_scalar_ns (\S+) jt_log_ns (\S+)", run.logs(0))
    if not found:
        raise SystemExit(f"run {run.id} printed no timing:\n{run.logs(0)}")
    return float(found.group(1)), float(found.group(2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="jt-bench-autolog-") as tmp:
        script = Path(tmp) / "writer.py"
        script.write_text(SCRIPT)
        home = Path(tmp) / "jt-home"
        for k in range(args.rounds):
            for which in random.sample(["on", "off"], 2):
                rows[which].append(one(home, script, args.calls, which == "on"))
                scalar, log = rows[which][-1]
                print(
                    f"round {k + 1} autolog {which:3}: add_scalar {scalar:8.0f} ns/call, "
                    f"jt.log {log:6.0f} ns/call",
                    flush=True,
                )
    on = statistics.median(r[0] for r in rows["on"])
    off = statistics.median(r[0] for r in rows["off"])
    log = statistics.median(r[1] for r in rows["on"] + rows["off"])
    print(f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"add_scalar, autolog off (anchor): {off:8.0f} ns/call (median of {args.rounds} runs)")
    print(f"add_scalar, autolog on:           {on:8.0f} ns/call, ratio {on / off:.3f}")
    print(f"added per call:                   {on - off:8.0f} ns (jt.log alone: {log:.0f} ns)")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rows, "on": on, "off": off, "jt_log": log}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
