"""The bus bandwidth ``jupyter-trainer check`` reports for ``all_reduce`` on loopback, against
a bare torch ``all_reduce`` loop of the same sizes under plain torchrun.

    .venv/bin/python bench/check_busbw.py [--rounds N] [--min-bytes N] [--max-bytes N] [--json PATH]

Each round runs both, in a fresh random order, with 2 ranks and Gloo on this machine:

- the check (``jt.check(procs=2, ...)``), through the run store, the supervisor and the
  launcher, as a user runs it;
- the anchor: ``python -m torch.distributed.run --standalone --nproc-per-node 2`` of a script that
  times ``dist.all_reduce`` on the same sizes, 20 iterations after one warm-up, and prints
  nccl-tests' bus bandwidth, ``2(n-1)/n`` times bytes over time.

For each size, the ratio is the check's bus bandwidth over the anchor's (medians over the
rounds). The check should be within 10 % of the anchor where the transfer, not the per-call
overhead, dominates (64 KiB and up on loopback).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import jupyter_trainer as jt  # noqa: E402

ANCHOR = """
import json, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
n = dist.get_world_size()
out = {}
for size in json.loads(sys.argv[1]):
    buf = torch.ones(size // 4)
    dist.all_reduce(buf)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(20):
        dist.all_reduce(buf)
    seconds = (time.perf_counter() - start) / 20
    out[size] = size / seconds / 1e9 * 2 * (n - 1) / n
if dist.get_rank() == 0:
    print("BUSBW " + json.dumps(out), flush=True)
dist.destroy_process_group()
"""


def anchor(script: Path, sizes: list[int]) -> dict[int, float]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            json.dumps(sizes),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    line = next((ln for ln in done.stdout.splitlines() if "BUSBW " in ln), None)
    if line is None:
        raise SystemExit(f"the anchor printed no figures:\n{done.stdout}\n{done.stderr}")
    return {int(k): v for k, v in json.loads(line.split("BUSBW ", 1)[1]).items()}


def checked(home: Path, low: int, high: int) -> dict[int, float]:
    result = jt.check(procs=2, min_bytes=low, max_bytes=high, time_limit=60, home=home)
    if not result.ok:
        raise SystemExit(f"the check failed: {result.problems}")
    return {row["bytes"]: row["busbw_GBps"] for row in result.collectives["all_reduce"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-bytes", type=int, default=1 << 10)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="jt-bench-check-"))
    script = home / "anchor.py"
    script.write_text(ANCHOR)
    sizes = []
    size = opts.min_bytes
    while size <= opts.max_bytes:
        sizes.append(size)
        size *= 2
    ours: dict[int, list[float]] = {s: [] for s in sizes}
    bare: dict[int, list[float]] = {s: [] for s in sizes}
    try:
        for round_ in range(opts.rounds):
            order = ["check", "anchor"]
            random.shuffle(order)
            for which in order:
                found = (
                    checked(home, sizes[0], sizes[-1])
                    if which == "check"
                    else anchor(script, sizes)
                )
                for s in sizes:
                    (ours if which == "check" else bare)[s].append(found[s])
            print(f"round {round_ + 1} done ({' then '.join(order)})", flush=True)
    finally:  # the warm rank pool and the spare supervisor the checks left, then the store
        from jupyter_trainer.rankside.hotstart import stop_pools
        from jupyter_trainer.supervisor import starter

        stop_pools(home)
        starter.release_spare()
        shutil.rmtree(home, ignore_errors=True)
    rows = []
    for s in sizes:
        a, b = statistics.median(ours[s]), statistics.median(bare[s])
        rows.append({"bytes": s, "check_GBps": a, "anchor_GBps": b, "ratio": a / b})
        print(f"{s:>12} B  check {a:8.3f} GB/s  anchor {b:8.3f} GB/s  ratio {a / b:5.2f}")
    if opts.json:
        opts.json.write_text(json.dumps({"rounds": opts.rounds, "sizes": rows}, indent=1))


if __name__ == "__main__":
    main()
