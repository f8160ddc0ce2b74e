"""How long a preemption takes on this machine: from the signal to the checkpoint complete on
disk, and from the requeue to the first step after the resume.

    .venv/bin/python bench/preemption.py [--mb 256] [--procs 2] [--repeats 3] [--json PATH]

Each round is one run (``jt.submit(code, procs=N)``, torchrun, Gloo) that trains a model
whose state is ``--mb`` MiB (float32 tensors of 16 MiB, the same on every rank, as DDP keeps
them), with a checkpoint every 20 steps. Once it has saved its first checkpoint the bench
preempts it (``Run.preempt(grace=60)``, what ``jupyter-trainer preempt`` does): the ranks
agree on the step (``all_reduce(MAX)`` of ``jt.preempted()``), save it with
``jt.checkpoint.save``, wait for it, and return; the next attempt loads it and trains on.
From the run's record (``state["preemptions"]``) and its events:

  signal → checkpoint complete: from the SIGUSR1 the supervisor sent every rank
      (``announced``) to the last done file of the checkpoint the attempt left
      (``checkpoint_done``: then it is complete on disk, every shard fsynced);
  signal → attempt ended: to the moment the supervisor saw the launcher gone;
  requeue → first step: from the start of the next attempt (``requeued``) to its first
      ``jt.progress`` after ``jt.checkpoint.load`` (rank 0's event), which includes torchrun's
      start, the ranks' imports, the rendezvous and the load.

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
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jupyter_trainer as jt

CODE = """
import time
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
tensors = max(1, int(jt.params["mb"]) // 16)
state = {"model": {f"w{i}": torch.zeros(4 << 20) for i in range(tensors)}, "step": 0}
start = jt.checkpoint.load(state) or 0
for step in range(start + 1, start + 10_000):
    for value in state["model"].values():
        value.add_(1.0)
    state["step"] = step
    jt.progress(step)
    stop = torch.tensor(int(jt.preempted()))
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    if stop or step % 20 == 0:
        jt.checkpoint.save(state, step)
    if stop:
        jt.checkpoint.wait()
        break
    if jt.attempt and step > start + 5:
        break
    time.sleep(0.05)
jt.checkpoint.wait()
dist.destroy_process_group()
"""


def first_step_after(run_dir: Path, attempt: int) -> float | None:
    """The time of rank 0's first progress event in ``attempt`` (its events follow an
    attempt line in events/rank-0.jsonl)."""
    seen = 0
    try:
        lines = (run_dir / "events" / "rank-0.jsonl").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("kind") == "attempt":
            seen = int(event["attempt"])
        elif seen == attempt and event.get("kind") == "progress":
            return float(event["t"])
    return None


def one_round(mb: int, procs: int) -> dict[str, Any]:
    run = jt.submit(CODE, procs=procs, params={"mb": mb}, name="preempt-bench", hot=False)
    folder = run.path / "checkpoints" / "dcp"
    deadline = time.monotonic() + 300
    while not any((folder / f"step-{s}" / "done.0").exists() for s in (20, 40)):
        if time.monotonic() > deadline or run.status not in (
            "created",
            "preparing",
            "queued",
            "running",
        ):
            raise SystemExit(f"no first checkpoint: {run.status} {run.logs(0)[-2000:]}")
        time.sleep(0.1)
    entry = run.preempt(grace=60)
    run.wait(timeout=300)
    if entry is None:
        raise SystemExit("the supervisor did not end the attempt")
    first = first_step_after(run.path, entry["resumed_attempt"])
    return {
        "step": entry["step"],
        "signal_to_complete_s": entry["checkpoint_done"] - entry["announced"],
        "signal_to_ended_s": entry["ended"] - entry["announced"],
        "requeue_to_first_step_s": (first - entry["requeued"]) if first else None,
        "killed": entry["killed"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="jt-preempt-bench-")
    os.environ["JUPYTER_TRAINER_HOME"] = home
    try:
        rounds = [one_round(args.mb, args.procs) for _ in range(args.repeats)]
    finally:
        shutil.rmtree(home, ignore_errors=True)
    result: dict[str, Any] = {
        "mb": args.mb,
        "procs": args.procs,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "rounds": rounds,
    }
    for key in ("signal_to_complete_s", "signal_to_ended_s", "requeue_to_first_step_s"):
        values = [r[key] for r in rounds if isinstance(r[key], float)]
        result[f"median_{key}"] = statistics.median(values) if values else None
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
