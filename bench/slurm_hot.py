"""Slurm: a hot run in a held allocation against the same run as a job of its own.

    .venv/bin/python bench/slurm_hot.py [--pairs N] [--json PATH]

Starts its own single-host Slurm (tests/support/slurm_cluster.py, on ``--port-base``) and a target
with ``hold = 600``, then times, interleaved after one untimed warm-up of each, a 2-rank
Gloo ``all_reduce`` run (torchrun) from ``jt.submit`` to ``wait()`` returning:

  job: ``submit(..., hot=False)``: sbatch, the job's queue wait, torchrun and its workers'
       ``import torch``, then squeue/sacct see the job end;
  hot: ``submit(...)``: two steps (``srun --overlap``) of the held allocation, whose warm
       pool forks the ranks.

The held allocation occupies the node, so every job sample first releases it (untimed) and
every hot sample finds it held and warm again (the warm-up run of each pair, untimed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from launch_overhead import TINY, loadavg  # noqa: E402
from support.slurm_cluster import start_cluster  # noqa: E402

import jupyter_trainer as jt  # noqa: E402

TARGETS = '[targets.cluster]\nkind = "slurm"\npartition = "debug"\ntime = "10:00"\nhold = 600\n'


def timed(home: Path, hot: bool) -> tuple[float, dict]:
    started = time.perf_counter()
    run = jt.submit(TINY, procs=2, target="cluster", home=home, hot=hot).wait(timeout=180)
    return time.perf_counter() - started, run.state["launcher"]


def release(env: dict[str, str]) -> None:
    subprocess.run(["scancel", "--name=jt-hold-cluster-1x2"], env=env, check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        queue = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout
        if not queue.strip():
            return
        time.sleep(0.2)
    raise RuntimeError("the held allocation did not end")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--port-base", type=int, default=32100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="jt-bench-slurm-hot-"))
    home = work / "home"
    home.mkdir()
    (home / "targets.toml").write_text(TARGETS)
    print(f"# {platform.node()}  cpus={os.cpu_count()}  loadavg={loadavg()}", flush=True)
    cluster = start_cluster(work / "slurm", 91, port_base=args.port_base)
    os.environ["SLURM_CONF"] = str(cluster.conf)
    env = cluster.env
    jobs, hots = [], []
    try:
        for i in range(args.pairs + 1):
            release(env)
            job_s, job_launcher = timed(home, hot=False)
            timed(home, hot=True)  # holds the allocation and warms its pool (untimed)
            hot_s, hot_launcher = timed(home, hot=True)
            assert "job_id" in job_launcher and hot_launcher["hot"]["warm"], hot_launcher
            if i:  # the first pair is the warm-up
                jobs.append(job_s)
                hots.append(hot_s)
                print(f"pair {i}/{args.pairs}: job {job_s:.3f} s  hot {hot_s:.3f} s", flush=True)
        release(env)
    finally:
        cluster.stop()
    job_m, hot_m = statistics.median(jobs), statistics.median(hots)
    print(
        f"\nsubmit -> wait() returns, median of {args.pairs}: job {job_m:.3f} s "
        f"(min {min(jobs):.3f})  hot {hot_m:.3f} s (min {min(hots):.3f})  "
        f"hot/job = {hot_m / job_m:.3f}   loadavg at end={loadavg()}"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"job_s": jobs, "hot_s": hots, "ratio": hot_m / job_m}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
