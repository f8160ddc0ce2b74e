"""What only a GPU machine can show: system figures, GPU idle, CUDA out of memory, the CUDA
culprit of hot start and the NCCL rank check, against the real driver.

    python3 bench/gpu_checks.py --out DIR

On the GPU machine lent through the device tool's ``run`` (its plain ``python3`` holds
PyTorch and nvidia-ml-py; jupyter_trainer runs from the checkout):

    PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 python3 bench/gpu_checks.py --out "$OUT"

Each check writes what it saw into ``DIR/gpu_checks.json`` as soon as it ends, so a check
that outruns the machine's time limit leaves the others' results. The checks:

- ``refuse``: ``jt.submit(procs=GPUs + 1)`` with NCCL (the default on GPUs) is refused
  before anything starts, with the fix; nothing is launched.
- ``figures``: two Gloo ranks share GPU 0; rank 0 multiplies matrices and holds 2 GiB, rank 1
  holds 4 GiB and sleeps. Every system sample of each rank (``run.system``) is set beside
  ``nvidia-smi``'s readings, taken every 0.25 s by this script, within one sampling interval
  of it: the process's GPU memory, the GPU's memory, utilisation and power. The stall
  detector must name rank 1 "GPU idle" from NVML's per-process SM share.
- ``oom``: one rank allocates 1 GiB blocks until CUDA runs out; the run's error names the
  GPU, the rank's peak and the total.
- ``culprit``: a hot run whose cell imports a module that initialises CUDA falls back to
  torchrun and names the module's line.
- ``sampler``: the cost of one sample with the NVML reader and with nvidia-smi's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import timeit
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import jupyter_trainer as jt  # noqa: E402
from jupyter_trainer.core.errors import RunFailed, TargetError  # noqa: E402

FIGURES = """
import os, time
import torch
from jupyter_trainer import runtime as jt
torch.cuda.set_device(0)
hold = torch.empty((2 + 2 * jt.rank) << 30, dtype=torch.uint8, device="cuda")
print("pid", os.getpid(), flush=True)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 24
step = 0
while time.time() < end:
    if jt.rank == 0:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    else:
        time.sleep(0.2)
    jt.log(step=step, loss=1.0 / (step + 1))
    step += 1
"""

OOM = """
import time
import torch
torch.cuda.set_device(0)
time.sleep(2.5)
blocks = []
while True:
    blocks.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
"""

CUDAISH = """import torch


def setup():
    return torch.zeros(1, device="cuda")


x = setup()
"""

REDUCE = """
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("nccl")
torch.cuda.set_device(0)
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
jt.log(step=0, total=t.item())
print("backend", dist.get_backend(), "sum", t.item(), flush=True)
"""


def smi(*query: str) -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", *query, "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


class SmiSeries(threading.Thread):
    """nvidia-smi's readings every ``every`` seconds: (time, {pid: MiB}, util, MiB used, W)."""

    def __init__(self, every: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.every, self.done = every, threading.Event()
        self.rows: list[tuple[float, dict[int, float], float, float, float]] = []

    def run(self) -> None:
        while not self.done.is_set():
            t = time.time()
            try:
                gpu = smi("--query-gpu=utilization.gpu,memory.used,power.draw", "-i", "0")[0]
                apps = smi("--query-compute-apps=pid,used_memory")
            except (subprocess.SubprocessError, IndexError):
                continue
            procs = {int(r[0]): float(r[1]) for r in apps if len(r) == 2 and r[0].isdigit()}
            self.rows.append((t, procs, float(gpu[0]), float(gpu[1]), float(gpu[2])))
            self.done.wait(self.every)


def near(rows: list, t: float, width: float) -> list:
    return [r for r in rows if abs(r[0] - t) <= width]


STEADY_S = 10.0  # seconds into the figures run by which both ranks hold all their memory
LIMITS = {"process_mem": 0.02, "gpu_mem": 0.02, "util": 2.0, "power": 0.02}


def compare(raw: dict[str, Any], interval: float) -> dict[str, Any]:
    """Each system sample of each rank beside nvidia-smi's readings within ``interval`` of
    it: how far off each figure is (GPU memory as a share of the total or of the process's,
    utilisation in points when outside the readings' range, power as a share of the limit)."""
    created, pids = raw["created"], {}
    for rank, text in raw["logs"].items():
        for line in text.splitlines():
            if line.startswith("pid "):
                pids[rank] = line.split()[1]
    worst = {"process_mem": 0.0, "gpu_mem": 0.0, "util": 0.0, "power": 0.0}
    steady = dict(worst)  # from STEADY_S on: the GPU's memory and power no longer climb
    ramping = 0  # samples off by more than LIMITS before then
    ranks: dict[str, list[dict[str, Any]]] = {}
    for rank, system in raw["system"].items():
        by_time: dict[float, dict[str, float]] = {}
        for name, points in system.items():
            for t_rel, value in points:
                by_time.setdefault(t_rel, {})[name] = value
        ranks[rank] = []
        for t_rel, sample in sorted(by_time.items()):
            window = near(raw["smi"], created + t_rel, interval)
            if not window or rank not in pids or "gpu_process_mem_bytes" not in sample:
                continue
            mem = sample["gpu_process_mem_bytes"]
            smi_proc = [r[1].get(pids[rank], 0.0) * (1 << 20) for r in window]
            utils = [r[2] for r in window]
            util = sample["gpu_util_percent"]
            off = {
                "process_mem": min(abs(mem - m) for m in smi_proc) / max(*smi_proc, mem, 1.0),
                "gpu_mem": min(abs(sample["gpu_mem_used_bytes"] - r[3] * (1 << 20)) for r in window)
                / sample["gpu_mem_total_bytes"],
                "util": 0.0
                if min(utils) <= util <= max(utils)
                else min(abs(util - u) for u in utils),
                "power": min(abs(sample["gpu_power_watts"] - r[4]) for r in window)
                / sample["gpu_power_limit_watts"],
            }
            for key, value in off.items():
                worst[key] = max(worst[key], value)
                if t_rel >= STEADY_S:
                    steady[key] = max(steady[key], value)
            ranks[rank].append({"t": t_rel, "off": off})
            ramping += any(off[k] > LIMITS[k] for k in LIMITS) and t_rel < STEADY_S
    return {
        "worst": worst,
        "steady": steady,
        "ramping_off": ramping,
        "ranks": ranks,
        "smi_rows": len(raw["smi"]),
    }


def check_refuse(home: str) -> dict[str, Any]:
    gpus = len(smi("--query-gpu=index"))
    before = len(jt.runs(home=home))
    try:
        jt.submit(REDUCE, procs=gpus + 1, home=home)
    except TargetError as exc:
        return {
            "gpus": gpus,
            "message": str(exc),
            "launched": len(jt.runs(home=home)) - before,
            "ok": len(jt.runs(home=home)) == before and "one GPU per rank" in str(exc),
        }
    return {"gpus": gpus, "ok": False, "message": "not refused"}


def check_nccl_one_rank(home: str) -> dict[str, Any]:
    run = jt.submit(REDUCE, procs=1, home=home, hot=False).wait(timeout=180)
    return {
        "status": run.status,
        "backend": run.state.get("backend"),
        "log": run.logs(0)[-400:],
        "ok": run.status == "completed" and run.state.get("backend") == "nccl",
    }


def check_figures(home: str, out: Path) -> dict[str, Any]:
    series = SmiSeries()
    series.start()
    interval = 1.0
    run = jt.submit(
        FIGURES,
        procs=2,
        backend="gloo",
        system_interval=interval,
        stall_timeout=6,
        home=home,
        hot=False,
    )
    stalled, seen = None, []
    deadline = time.time() + 120
    while time.time() < deadline and run.status not in ("completed", "failed", "lost"):
        now = run.state
        stalled = stalled or now.get("stalled")
        seen.append(
            (
                round(time.time() - float(now.get("created") or 0), 1),
                now.get("status"),
                [e.get("rank") for e in now.get("stalled") or []],
            )
        )
        time.sleep(0.5)
    run.wait(timeout=60)
    series.done.set()
    series.join()
    created = float(run.state.get("created") or 0.0)
    found: dict[str, Any] = {"status": run.status, "stalled": stalled}
    raw = {
        "created": created,
        "state": run.state,
        "system": {rank: run.system(rank) for rank in (0, 1)},
        "smi": series.rows,
        "logs": {rank: run.logs(rank)[-2000:] for rank in (0, 1)},
        "seen": seen,
        "supervisor": (Path(home, "runs", run.id, "supervisor.log")).read_text()[-6000:],
    }
    (out / "figures_raw.json").write_text(json.dumps(raw, default=str))
    raw = json.loads(json.dumps(raw, default=str))
    found.update(compare(raw, interval))
    steady = found["steady"]
    idle = [e for e in (stalled or []) if e.get("gpu_idle")]
    found["ok"] = (
        run.status == "completed"
        and all(found["ranks"][r] for r in ("0", "1"))
        and all(steady[k] <= LIMITS[k] for k in LIMITS)
        and [e["rank"] for e in idle] == [1]
    )
    return found


def check_oom(home: str) -> dict[str, Any]:
    run = jt.submit(OOM, procs=1, system_interval=0.5, home=home, hot=False)
    try:
        run.wait(timeout=240)
    except RunFailed:
        pass
    state = run.state
    records = run.store.rank_records(run.id)
    error = state.get("error") or ""
    return {
        "status": run.status,
        "error": error,
        "record": records.get(0, {}).get("gpu_oom"),
        "system": run.system(0),
        "ok": run.status == "failed" and "ran out of memory on GPU 0" in error,
    }


def check_culprit(home: str, folder: Path) -> dict[str, Any]:
    (folder / "cudaish.py").write_text(CUDAISH)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(folder), str(REPO), os.environ.get("PYTHONPATH")) if p
    )
    try:
        run = jt.submit("import cudaish\nprint('ok', flush=True)", procs=1, hot=True, home=home)
        run.wait(timeout=240)
    finally:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p
            for p in os.environ["PYTHONPATH"].split(os.pathsep)
            if p not in (str(folder), str(REPO))
        )
    hot = run.state.get("launcher", {}).get("hot") or {}
    why = hot.get("why") or ""
    return {
        "status": run.status,
        "hot": hot,
        "ok": run.status == "completed"
        and hot.get("used") is False
        and "importing cudaish initialised CUDA (at cudaish.py:5 in setup" in why,
    }


def sample_now(sampler: Any) -> None:
    sampler.sample(time.time())


def check_sampler() -> dict[str, Any]:
    from jupyter_trainer.rankside.observe import gpu_read, system

    found: dict[str, Any] = {}
    nvml = gpu_read.open_reader()
    found["reader"] = getattr(nvml, "name", None)
    for name, reader in (("nvml", nvml), ("nvidia-smi", gpu_read.SmiReader("nvidia-smi"))):
        if reader is None or (name == "nvml" and reader.name != "nvml"):
            continue
        sampler = system.Sampler(os.getpid(), 0, 1.0)
        sampler.gpu_reader = reader
        seconds = timeit.timeit(partial(sample_now, sampler), number=20) / 20
        found[name] = {
            "ms_per_sample": round(seconds * 1000, 2),
            "values": sampler.sample(time.time()),
        }
    found["ok"] = found["reader"] == "nvml"
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="", help="comma-separated checks to run")
    ns = parser.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    path = ns.out / "gpu_checks.json"
    results: dict[str, Any] = {"torch": __import__("torch").__version__}
    try:
        results["gpu"] = smi("--query-gpu=name,driver_version,memory.total")
    except (OSError, subprocess.SubprocessError) as exc:
        results["gpu"] = repr(exc)
    with tempfile.TemporaryDirectory(prefix="jt-gpu-") as tmp:
        home = str(Path(tmp, "home"))
        checks = {
            "refuse": lambda: check_refuse(home),
            "nccl": lambda: check_nccl_one_rank(home),
            "sampler": check_sampler,
            "figures": lambda: check_figures(home, ns.out),
            "oom": lambda: check_oom(home),
            "culprit": lambda: check_culprit(home, Path(tmp)),
        }
        only = [c for c in ns.only.split(",") if c]
        for name, check in checks.items():
            if only and name not in only:
                continue
            started = time.time()
            try:
                results[name] = check()
            except Exception as exc:  # one check's fault is recorded; the others still run
                import traceback

                results[name] = {"ok": False, "exception": traceback.format_exc()[-3000:]}
                print(f"{name}: {exc!r}", flush=True)
            results[name]["seconds"] = round(time.time() - started, 1)
            print(
                f"{name}: ok={results[name].get('ok')} in {results[name]['seconds']} s", flush=True
            )
            path.write_text(json.dumps(results, indent=1, default=str))
    print(json.dumps({k: v.get("ok") for k, v in results.items() if isinstance(v, dict)}))
    return 0 if all(v.get("ok") for v in results.values() if isinstance(v, dict)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
