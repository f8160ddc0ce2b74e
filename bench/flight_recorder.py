"""What PyTorch's Flight Recorder costs a training step, and what a dump and its analysis cost.

    .venv/bin/python bench/flight_recorder.py [--ranks 2 8] [--steps 500] [--repeats 5]
        [--analyse 8 64] [--json PATH]

Step cost: a small DDP model (an MLP of 3 layers, 256 wide, batch 32) trained with Gloo under
``torchrun --standalone`` for ``--steps`` timed steps after 30 untimed ones, with the recorder
at the size every rank gets (``TORCH_FR_BUFFER_SIZE=2000``, with the rank's thread that
watches for dump requests, as in a run) against off (``0``, no thread), interleaved
(on, off, on, off, ...) ``--repeats`` times per world size. Each rank times its own steps;
the figure is the median over repeats of rank 0's mean step.

Dump and analysis: in each "on" run, every rank also times one dump of its recorder as the
rank side takes it (``rankside/observe/flight_recorder.py``: torch's JSON dump, the newest 500
entries written to a file). For ``--analyse N`` the dumps of the last ``on`` run of the
largest world size are copied to N ranks (each with its own rank and entry times spread by a
few ms) and ``Run.collectives()``'s analysis (``supervisor/collectives.py``) is timed on them,
reading the files included.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARMUP = 30
ENTRIES = 2000


def worker(steps: int, out: str) -> None:
    """One rank: time ``steps`` DDP steps, then one dump of its recorder."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    on = int(os.environ.get("TORCH_FR_BUFFER_SIZE", "0")) > 0
    if on:  # as in a run: the recorder and the rank's thread that watches for requests
        import jupyter_trainer.rankside.observe.flight_recorder as recorder

        recorder.install(out)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Linear(256, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 10),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(WARMUP):
        step()
    dist.barrier()
    began = time.perf_counter()
    for _ in range(steps):
        step()
    per_step = (time.perf_counter() - began) / steps
    dump_s = None
    if on:
        t0 = time.perf_counter()
        recorder.dump_now(f"bench-{time.time()}", share=False)
        dump_s = time.perf_counter() - t0
    Path(out, f"step-{rank}.json").write_text(json.dumps({"step_s": per_step, "dump_s": dump_s}))
    dist.barrier()
    dist.destroy_process_group()


def one_run(ranks: int, steps: int, on: bool, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {
        **os.environ,
        "TORCH_FR_BUFFER_SIZE": str(ENTRIES if on else 0),
        "OMP_NUM_THREADS": "1",
        "WORLD_SIZE": str(ranks),
    }
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={ranks}",
        __file__,
        "--worker",
        "--steps",
        str(steps),
        "--out",
        str(out),
    ]
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=600)
    found = [json.loads((out / f"step-{r}.json").read_text()) for r in range(ranks)]
    dumps = [f["dump_s"] for f in found if f["dump_s"] is not None]
    return {
        "step_ms": found[0]["step_s"] * 1e3,
        "dump_ms": statistics.median(dumps) * 1e3 if dumps else None,
    }


def analyse_cost(source: Path, ranks: int, repeats: int = 5) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from jupyter_trainer.supervisor import collectives

    base = json.loads((source / "collectives" / "rank-0.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "collectives"
        folder.mkdir()
        for rank in range(ranks):
            dump = json.loads(json.dumps(base))
            dump["rank"], dump["world_size"] = rank, ranks
            for entry in dump["trace"]["entries"]:
                entry["time_created_ns"] += rank * 1_000_000
            (folder / f"rank-{rank}.json").write_text(json.dumps(dump))
        size = sum(p.stat().st_size for p in folder.iterdir())
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            found = collectives.analyse(collectives.read_dumps(Path(tmp)))
            times.append(time.perf_counter() - t0)
        assert found is not None
    return {
        "ranks": ranks,
        "entries_per_rank": len(base["trace"]["entries"]),
        "bytes": size,
        "analysis_ms": statistics.median(times) * 1e3,
        "verdict": found["verdict"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--analyse", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--json", default=None, metavar="PATH")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.out)
        return
    report: dict = {"load": os.getloadavg()[0], "steps": {}, "analysis": []}
    with tempfile.TemporaryDirectory() as tmp:
        last_on = Path(tmp) / "last-on"
        for ranks in args.ranks:
            on, off, dumps = [], [], []
            for _ in range(args.repeats):
                measured = one_run(ranks, args.steps, True, Path(tmp) / "on")
                on.append(measured["step_ms"])
                dumps.append(measured["dump_ms"])
                shutil.rmtree(last_on, ignore_errors=True)
                shutil.copytree(Path(tmp) / "on", last_on)
                off.append(one_run(ranks, args.steps, False, Path(tmp) / "off")["step_ms"])
            row = {
                "on_ms": statistics.median(on),
                "off_ms": statistics.median(off),
                "on_all": on,
                "off_all": off,
                "dump_ms": statistics.median(dumps),
            }
            row["cost_pct"] = (row["on_ms"] / row["off_ms"] - 1) * 100
            report["steps"][ranks] = row
            print(
                f"{ranks} ranks: step {row['on_ms']:.2f} ms on, {row['off_ms']:.2f} ms off "
                f"({row['cost_pct']:+.1f} %; on {[round(v, 2) for v in on]}, off "
                f"{[round(v, 2) for v in off]}); one dump {row['dump_ms']:.1f} ms per rank",
                flush=True,
            )
        for ranks in args.analyse:
            found = analyse_cost(last_on, ranks)
            report["analysis"].append(found)
            print(
                f"analysis of {ranks} dumps ({found['entries_per_rank']} entries each, "
                f"{found['bytes'] / 1e6:.1f} MB): {found['analysis_ms']:.1f} ms",
                flush=True,
            )
    print(f"load average at the start: {report['load']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
