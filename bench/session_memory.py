"""The memory an idle live session keeps beside its ranks' own: each rank's holder (the
process its launcher started, which forks the worker that runs the cells and can restart
it), the supervisor, and the ranks' launcher, against a batch run's ranks.

    .venv/bin/python bench/session_memory.py [--procs 2] [--hot | --no-hot] [--json PATH]

One session (``start_session(procs=N)``), idle 3 s after start, then one batch run of N
ranks that imported torch, joined the group and sleeps (both started the same way: hot, from
the warm pool, unless ``--no-hot``). RSS and USS (``psutil``'s ``memory_full_info``) of:
each session worker (the rank's process, ``ranks/rank-<r>.json``), each holder (its
parent), the supervisor, and the batch ranks. USS is what a process alone holds: a holder
forked from the warm pool or from torchrun shares most of its pages with its worker.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

import jupyter_trainer as jt  # noqa: E402
from jupyter_trainer.api import sessions as session_api  # noqa: E402

SLEEPER = """\
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
print("joined", flush=True)
while not os.path.exists(os.path.join(os.environ["JT_RUN_DIR"], "outputs", "release")):
    time.sleep(0.1)
"""


def mib(pids: list[int]) -> dict[str, float]:
    """Mean RSS and USS of ``pids``, in MiB."""
    infos = [psutil.Process(p).memory_full_info() for p in pids]
    return {
        "rss": statistics.mean(i.rss for i in infos) / 2**20,
        "uss": statistics.mean(i.uss for i in infos) / 2**20,
    }


def rank_pids(run: Any, n: int) -> list[int]:
    records = run.store.rank_records(run.id)
    return [int(records[r]["pid"]) for r in range(n)]


def supervisor_pid(run: Any) -> int | None:
    path = run.path / "supervisor.pid"
    return int(json.loads(path.read_text())["pid"]) if path.exists() else None


def measure(procs: int, hot: bool | None, folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sess = session_api.start_session("memory", procs=procs, hot=hot, idle=600, timeout=900)
    try:
        time.sleep(3.0)  # idle: no request since the ranks joined
        workers = rank_pids(sess.record, procs)
        holders = [psutil.Process(p).ppid() for p in workers]
        out["session_worker"] = mib(workers)
        out["session_holder"] = mib(holders)
        sup = supervisor_pid(sess.record)
        out["supervisor"] = mib([sup]) if sup else None
        out["holder_cmd"] = " ".join(psutil.Process(holders[0]).cmdline()[1:3])[:60]
        sleeper = folder / "sleeper.py"
        sleeper.write_text(SLEEPER)
        batch = jt.submit(script=str(sleeper), procs=procs, hot=hot, name="sleeper")
        try:
            deadline = time.monotonic() + 600
            while not all("joined" in batch.logs(r) for r in range(procs)):
                if batch.done or time.monotonic() > deadline:
                    raise RuntimeError(f"the sleeper run ended or hung: {batch.status}")
                time.sleep(0.2)
            time.sleep(2.0)
            out["batch_rank"] = mib(rank_pids(batch, procs))
        finally:
            (batch.path / "outputs").mkdir(exist_ok=True)
            (batch.path / "outputs" / "release").write_text("")
            batch.wait(600, raise_on_failure=False)
    finally:
        out["stopped"] = sess.stop()
    return out


def report(r: dict[str, Any], procs: int) -> None:
    print(f"\n== memory of an idle session, {procs} ranks, mean per process (MiB) ==")
    print(f"{'':36} {'RSS':>8} {'USS':>8}")
    rows = [
        ("session rank (worker, idle)", r["session_worker"]),
        ("batch rank (joined, sleeping)", r["batch_rank"]),
        ("holder per rank", r["session_holder"]),
    ]
    if r["supervisor"]:
        rows.append(("supervisor (one per session)", r["supervisor"]))
    for name, m in rows:
        print(f"{name:36} {m['rss']:8.1f} {m['uss']:8.1f}")
    above = procs * r["session_holder"]["uss"] + (r["supervisor"] or {"uss": 0})["uss"]
    print(f"kept beside the ranks (holders + supervisor), USS: {above:.1f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--hot", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--json", default=None)
    opts = parser.parse_args()
    home = tempfile.mkdtemp(prefix="jt-bench-home-")
    os.environ["JUPYTER_TRAINER_HOME"] = home
    folder = Path(tempfile.mkdtemp(prefix="jt-bench-memory-"))
    try:
        results = measure(opts.procs, opts.hot, folder)
    finally:
        from jupyter_trainer.rankside import hotstart
        from jupyter_trainer.supervisor import starter

        starter.release_spare()
        hotstart.stop_pools(home)
        shutil.rmtree(folder, ignore_errors=True)
    report(results, opts.procs)
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=2))
    shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
