"""What capturing ``mlflow.log_metric`` and ``wandb.log`` costs per call, against the same
calls left alone.

    .venv/bin/python bench/tracker_capture.py [--rounds N] [--mlflow-calls N] [--wandb-calls N]
                                              [--json PATH]

Each round starts three runs of the same script (``launcher="python"``, one rank), in a
fresh random order: ``off`` (``autolog=False``: the bare calls, the anchor), ``both`` (the
default: captured, and the tracker still gets them) and ``here`` (``JUPYTER_TRAINER_TRACKERS=here``:
captured only). MLflow logs into a SQLite store of the round (``MLFLOW_TRACKING_URI``), W&B
offline (``WANDB_MODE=offline``, its files in the round's folder). The script times
``mlflow.log_metric("loss", v, step=i)`` and ``wandb.log({"loss": v})`` in batches after one
warm-up call and prints the median time per call of each.
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
import statistics, sys, time
import mlflow, wandb

ml_calls, wb_calls = int(sys.argv[1]), int(sys.argv[2])


def timed(call, calls, batch):
    call(-1)  # warm-up: MLflow makes its run, W&B its first history row
    out = []
    for k in range(calls // batch):
        start = time.perf_counter_ns()
        for i in range(batch):
            call(k * batch + i)
        out.append((time.perf_counter_ns() - start) / batch)
    return statistics.median(out)


with mlflow.start_run():
    ml = timed(lambda i: mlflow.log_metric("loss", 0.5, step=i + 1), ml_calls, 25)
run = wandb.init(project="bench")
wb = timed(lambda i: wandb.log({"loss": 0.5}), wb_calls, 250)
run.finish()
print("mlflow_ns", ml, "wandb_ns", wb, flush=True)
"""
MODES = ("off", "both", "here")


def one(home: Path, folder: Path, script: Path, mode: str, calls: tuple[int, int]) -> list[float]:
    folder.mkdir(parents=True)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"
    os.environ["WANDB_DIR"] = str(folder)
    os.environ["JUPYTER_TRAINER_TRACKERS"] = "here" if mode == "here" else "both"
    run = jt.submit(
        script=str(script),
        args=[str(c) for c in calls],
        launcher="python",
        autolog=mode != "off",
        system_interval=0,
        home=home,
    )
    run.wait(timeout=600)
    found = re.search(r"mlflow_ns (\S+) wandb_ns (\S+)", run.logs(0))
    if not found:
        raise SystemExit(f"run {run.id} printed no timing:\n{run.logs(0)}")
    return [float(found.group(1)), float(found.group(2))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mlflow-calls", type=int, default=200)
    parser.add_argument("--wandb-calls", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ["WANDB_MODE"] = "offline"  # this script's own environment, for its runs
    os.environ["WANDB_SILENT"] = "true"
    rows: dict[str, list[list[float]]] = {m: [] for m in MODES}
    calls = (args.mlflow_calls, args.wandb_calls)
    with tempfile.TemporaryDirectory(prefix="jt-bench-trackers-") as tmp:
        script = Path(tmp) / "trackers.py"
        script.write_text(SCRIPT)
        home = Path(tmp) / "jt-home"
        for k in range(args.rounds):
            for mode in random.sample(MODES, len(MODES)):
                row = one(home, Path(tmp) / f"r{k}-{mode}", script, mode, calls)
                rows[mode].append(row)
                print(
                    f"round {k + 1} {mode:4}: mlflow.log_metric {row[0]:9.0f} ns/call, "
                    f"wandb.log {row[1]:7.0f} ns/call",
                    flush=True,
                )
    median = {m: [statistics.median(r[i] for r in rows[m]) for i in (0, 1)] for m in MODES}
    print(f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for i, call in enumerate(("mlflow.log_metric", "wandb.log")):
        off = median["off"][i]
        print(f"{call}, bare (anchor): {off:9.0f} ns/call (median of {args.rounds} runs)")
        for mode in ("both", "here"):
            got = median[mode][i]
            print(f"{call}, {mode:4}:          {got:9.0f} ns/call, ratio {got / off:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rows, "median": median}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
