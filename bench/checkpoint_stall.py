"""How long a checkpoint stalls training: ``jt.checkpoint.save`` (sharded, in the background)
against a synchronous rank-0 ``torch.save`` of the same state, in the same run.

    .venv/bin/python bench/checkpoint_stall.py [--mb 1024] [--procs 2] [--repeats 3]
                                               [--json PATH]

One run (``jt.submit(code, procs=N)``, torchrun, Gloo) holds a model state of ``--mb`` MiB
(float32 tensors of 64 MiB, the same on every rank, as DDP keeps them) and saves it
``--repeats`` times each way, alternating, after one first save of each (reported apart: it
pays for imports, the Gloo group and, async, for allocating the host buffers it reuses):

  sync:  ``jt.save_checkpoint(state, step)`` (rank 0 ``torch.save``s to a temporary file,
         fsyncs and renames it; the other ranks return at once), then a barrier: every rank
         waits for rank 0, so the stall is the time until the barrier is passed.
  async: ``jt.checkpoint.save(state, step)``: the stall is the time until it returns (the state
         is copied to host memory), slowest rank; the write is the time until
         ``jt.checkpoint.wait()`` returns (DCP's shards, its metadata and the done files,
         fsynced), slowest rank.

Target: median async stall ≤ 0.2 × median sync stall. Each rank's figures are reduced with
``all_reduce(MAX)``; rank 0 prints them. Old checkpoints are removed between rounds, untimed.
The run uses a temporary JUPYTER_TRAINER_HOME, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jupyter_trainer as jt
from jupyter_trainer.supervisor import starter

TARGET_RATIO = 0.2
RUN_TIMEOUT_S = 900

CODE = """
import json, os, shutil, time
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
mb, repeats = int(jt.params["mb"]), int(jt.params["repeats"])
torch.manual_seed(0)
state = {"model": {f"layer{i}.weight": torch.rand(16 * 2**20) for i in range(mb // 64)},
         "step": 0, "note": {"lr": 0.1}}


def slowest(*values):
    found = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(found, op=dist.ReduceOp.MAX)
    return found.tolist()


def sync(step):
    dist.barrier()
    start = time.perf_counter()
    jt.save_checkpoint(state, step, keep=1)
    dist.barrier()
    return slowest(time.perf_counter() - start)[0]


def background(step):
    dist.barrier()
    start = time.perf_counter()
    jt.checkpoint.save(state, step)
    stall = time.perf_counter() - start
    jt.checkpoint.wait()
    write = time.perf_counter() - start
    dist.barrier()
    if jt.rank == 0:
        for old in os.listdir(jt.checkpoint.root):
            if old != f"step-{step}":
                shutil.rmtree(os.path.join(jt.checkpoint.root, old))
    return slowest(stall, write)


first = sync(0), background(0)  # apart: the first of each pays for imports, the Gloo group
if jt.rank == 0:  # and (async) allocating the host buffers
    print("BENCH " + json.dumps({"way": "first", "sync": first[0], "async": first[1]}), flush=True)
for r in range(1, repeats + 1):
    first, second = (sync, background) if r % 2 else (background, sync)
    for way in (first, second):
        found = way(r)
        if jt.rank == 0:
            record = {"way": "sync", "stall": found} if way is sync else {
                "way": "async", "stall": found[0], "write": found[1]}
            print("BENCH " + json.dumps(record), flush=True)
dist.destroy_process_group()
"""


def measure(mb: int, procs: int, repeats: int) -> dict[str, Any]:
    params = {"mb": mb, "repeats": repeats}
    run = jt.submit(CODE, procs=procs, params=params, hot=False, name="checkpoint-stall")
    run.wait(timeout=RUN_TIMEOUT_S)
    records = [
        json.loads(line[len("BENCH ") :])
        for line in run.logs(0).splitlines()
        if line.startswith("BENCH ")
    ]
    sync = [r["stall"] for r in records if r["way"] == "sync"]
    stall = [r["stall"] for r in records if r["way"] == "async"]
    write = [r["write"] for r in records if r["way"] == "async"]
    (first,) = [r for r in records if r["way"] == "first"]
    return {
        "mb": mb,
        "procs": procs,
        "sync_stall_s": sync,
        "async_stall_s": stall,
        "async_write_s": write,
        "median_sync_s": statistics.median(sync),
        "median_async_stall_s": statistics.median(stall),
        "median_async_write_s": statistics.median(write),
        "ratio": statistics.median(stall) / statistics.median(sync),
        "first_sync_stall_s": first["sync"],
        "first_async_stall_s": first["async"][0],
        "first_async_write_s": first["async"][1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="state size in MiB (default 1024)")
    parser.add_argument("--procs", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="timed saves each way")
    parser.add_argument("--json", help="write the result here too")
    args = parser.parse_args(argv)
    if args.mb < 64:
        parser.error("--mb: at least 64")
    work = Path(tempfile.mkdtemp(prefix="jt-bench-ckpt-"))
    os.environ["JUPYTER_TRAINER_HOME"] = str(work / "home")
    try:
        result = measure(args.mb, args.procs, args.repeats)
    finally:
        starter.release_spare()
        shutil.rmtree(work, ignore_errors=True)
    result["machine"] = f"{platform.node()}, {os.cpu_count()} cores"
    met = result["ratio"] <= TARGET_RATIO
    print(
        f"state {result['mb']} MiB at {result['procs']} ranks: sync rank-0 torch.save stall "
        f"{result['median_sync_s']:.3f} s, jt.checkpoint.save stall "
        f"{result['median_async_stall_s']:.3f} s (background write "
        f"{result['median_async_write_s']:.3f} s): {result['ratio']:.3f}x "
        f"(target <= {TARGET_RATIO}: {'holds' if met else 'MISSED'})"
    )
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
