"""Ray: time from submit to the first event, jt against ``ray job submit`` by hand.

    .venv/bin/python bench/ray_first_event.py [--pairs N] [--interval S] [--json PATH]

Starts its own two-node Ray cluster on this machine (tests/support/ray_cluster.py: every listener on
127.0.0.1, its own ports and temp folder, stopped by process group at the end) and times,
interleaved after one untimed warm-up of each, the same tiny Gloo job of world size 2:

  jt:   jt.submit(CODE, target="rc", nodes=2, procs=1, home=HOME): CODE joins the
        process group and logs one event (jt.log + jt.flush); the clock stops when rank 0's
        event line is readable through the run store, ``Store(home).read_events(run_id, 0)``.
        This includes the submit-side check of the cluster, the supervisor (a Ray driver), the
        placement group, the node-shell actors, the agent's pre-flight and staging, and two
        torchruns with c10d rendezvous across the two Ray nodes. One run store and one
        process for every sample, as in a notebook (the supervisor kept waiting is used).
  hand: JobSubmissionClient(dashboard).submit_job(entrypoint="python -m torch.distributed.run
        --standalone --nproc-per-node 2 hand.py"), where hand.py joins the process group and
        appends one JSON line to a file; the clock stops when rank 0's line is there. One Ray
        job runs one entrypoint on one node, so the anchor is a single-node torchrun of the
        same world size, started by Ray's job supervisor.

Both poll their file every ``--interval`` (default 20 ms) and use the same interpreter.
Between samples each side waits, untimed, for its run or job to end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # drivers stay on loopback, as the cluster

from support.ray_cluster import start_cluster  # noqa: E402

import jupyter_trainer as jt  # noqa: E402
from jupyter_trainer.store import Store  # noqa: E402

CODE = (
    "import torch.distributed as dist\nfrom jupyter_trainer import runtime as jt\n"
    "dist.init_process_group('gloo')\njt.log(step=0, x=1)\njt.flush()\n"
    "dist.destroy_process_group()\n"
)
HAND = (
    "import json, os, sys, time, torch.distributed as dist\n"
    "dist.init_process_group('gloo')\n"
    "if dist.get_rank() == 0:\n"
    "    with open(sys.argv[1], 'a') as fh:\n"
    "        fh.write(json.dumps({'t': time.time(), 'step': 0, 'x': 1}) + '\\n')\n"
    "dist.destroy_process_group()\n"
)
SAMPLE_TIMEOUT_S = 180.0


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def run_jt(work: Path, i: int, address: str, interval: float) -> dict[str, Any]:
    home = work / "jt-home"  # one run store and one process, as in a notebook
    if not home.exists():
        home.mkdir()
        (home / "targets.toml").write_text(
            f'[targets.rc]\nkind = "ray"\naddress = "{address}"\nworkdir = "{work}/nodes"\n'
            'env = { GLOO_SOCKET_IFNAME = "lo" }\n'
        )
    store = Store(home)
    wall0 = time.time()
    t0 = time.perf_counter()
    run = jt.submit(CODE, target="rc", nodes=2, procs=1, home=home, name=f"first-event-{i}")
    submitted = time.perf_counter() - t0
    while not store.read_events(run.id, 0)[0]:
        if time.perf_counter() - t0 > SAMPLE_TIMEOUT_S:
            sys.exit(
                f"jt run {run.id}: no event after {SAMPLE_TIMEOUT_S:.0f} s; state "
                f"{json.dumps(run.state)[:2000]}"
            )
        time.sleep(interval)
    elapsed = time.perf_counter() - t0
    run.wait(timeout=180, raise_on_failure=False)  # untimed
    state = run.state
    if state["status"] != "completed":
        sys.exit(f"jt run {run.id} ended {state['status']!r}: {state.get('error')}")
    stages = state.get("stages", {})
    ranks = store.rank_records(run.id)
    marks = {
        "preparing": stages.get("preparing", {}).get("start"),
        "queued": stages.get("queued", {}).get("start"),
        "running": stages.get("running", {}).get("start"),
        "rank 0 in boot.py": ranks.get(0, {}).get("started"),
        "event written": store.read_events(run.id, 0)[0][0].get("t"),
    }
    return {
        "elapsed_s": elapsed,
        "submit_returned_s": submitted,
        "run_id": run.id,
        "marks_s": {k: (v - wall0 if v else None) for k, v in marks.items()},
    }


def run_hand(work: Path, i: int, client: Any, interval: float) -> dict[str, Any]:
    from ray.job_submission import JobStatus

    script, path = work / "hand.py", work / f"hand-{i}.jsonl"
    script.write_text(HAND)
    entry = (
        f"{sys.executable} -m torch.distributed.run --standalone --nproc-per-node 2 {script} {path}"
    )
    t0 = time.perf_counter()
    job = client.submit_job(
        entrypoint=entry, runtime_env={"env_vars": {"GLOO_SOCKET_IFNAME": "lo"}}
    )
    submitted = time.perf_counter() - t0
    while not (path.exists() and path.read_text().strip()):
        if time.perf_counter() - t0 > SAMPLE_TIMEOUT_S:
            sys.exit(
                f"ray job {job}: no line after {SAMPLE_TIMEOUT_S:.0f} s: "
                f"{client.get_job_logs(job)[-2000:]}"
            )
        time.sleep(interval)
    elapsed = time.perf_counter() - t0
    deadline = time.monotonic() + 120
    while client.get_job_status(job) not in (
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.STOPPED,
    ):
        if time.monotonic() > deadline:
            sys.exit(f"ray job {job} did not end")
        time.sleep(0.1)
    if client.get_job_status(job) != JobStatus.SUCCEEDED:
        sys.exit(f"ray job {job} failed: {client.get_job_logs(job)[-2000:]}")
    return {"elapsed_s": elapsed, "submit_returned_s": submitted, "job": job}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from ray.job_submission import JobSubmissionClient

    cluster = start_cluster(worker=os.getpid() % 4)
    try:
        client = JobSubmissionClient(cluster.dashboard)
        with tempfile.TemporaryDirectory(prefix="jt-ray-bench-") as tmp:
            work = Path(tmp)
            run_jt(work, 0, cluster.address, args.interval)  # warm-up, untimed
            run_hand(work, 0, client, args.interval)
            samples: dict[str, list[dict[str, Any]]] = {"jt": [], "hand": []}
            for i in range(1, args.pairs + 1):
                first, second = ("jt", "hand") if i % 2 else ("hand", "jt")
                for side in (first, second):
                    sample = (
                        run_jt(work, i, cluster.address, args.interval)
                        if side == "jt"
                        else run_hand(work, i, client, args.interval)
                    )
                    samples[side].append(sample)
                    print(f"{side:4} {i}: {sample['elapsed_s'] * 1000:7.0f} ms", flush=True)
    finally:
        left = cluster.stop()
        if left:
            print(f"processes of the bench's Ray cluster were left: {left}", file=sys.stderr)
    med = {k: statistics.median(s["elapsed_s"] for s in v) for k, v in samples.items()}
    result = {
        "pairs": args.pairs,
        "load": loadavg(),
        "machine": platform.platform(),
        "median_ms": {k: round(v * 1000) for k, v in med.items()},
        "min_ms": {k: round(min(s["elapsed_s"] for s in v) * 1000) for k, v in samples.items()},
        "max_ms": {k: round(max(s["elapsed_s"] for s in v) * 1000) for k, v in samples.items()},
        "submit_returned_ms": {
            k: round(statistics.median(s["submit_returned_s"] for s in v) * 1000)
            for k, v in samples.items()
        },
        "ratio": round(med["jt"] / med["hand"], 2),
        "samples": samples,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    print("jt, seconds after submit (medians):")
    for mark in samples["jt"][0]["marks_s"]:
        seen = [m["marks_s"][mark] for m in samples["jt"] if m["marks_s"][mark] is not None]
        if seen:
            print(f"  {mark:20} {statistics.median(seen):6.2f}")
    print(f"ratio jt / hand (medians): {result['ratio']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
