"""DDP training throughput through jupyter_trainer against bare torchrun, side by side.

    .venv/bin/python bench/gpu_ddp.py [--device cuda|cpu] [--procs N] [--repeats N]
                                      [--steps N] [--warmup N] [--batch N] [--compile] [--json PATH]

On the GPU machine lent through the device tool's ``run`` (its plain ``python3`` holds
PyTorch; jupyter_trainer runs from the checkout, nothing needs to be installed or carried):

    set -o pipefail; PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 python3 bench/gpu_ddp.py --repeats 5 --json "$OUT/gpu_ddp.json" 2>&1 | tee "$OUT/gpu_ddp.log"

with ``timeout_s=600``; the JSON and the log come back from ``$OUT``.

The workload (WORKLOAD below, written to a temporary file) trains a transformer language
model built from ``torch.nn`` only (12 pre-norm encoder layers, d_model 1024, 32k vocabulary,
sequences of 512 tokens, batch 32 per rank: about 220 M parameters) under
DistributedDataParallel with AdamW, bf16 autocast, on synthetic tokens generated on the
device from a fixed seed; ``torch.compile`` only with ``--compile``. After ``--warmup``
steps every rank times ``--steps`` steps with CUDA events; rank 0 writes one JSON line (one
``os.write``): the global samples/s, the sum of every rank's samples over the slowest rank's
time (``all_reduce``), the backend in use, the GPU's name and the ranks' pids.

Sides, interleaved per round with the order rotated each round:

  jt:     jt.submit(script=W, procs=N, launcher="torchrun", home=<the bench's tmp store>), backend
          left to jt, which must pick NCCL on GPUs (``run.state["backend"]``);
  jt-hot: the same with ``hot=True``, only where ``jupyter-trainer submit --help`` shows
          ``--hot`` and ``jt.submit`` takes ``hot`` (then plain jt passes ``hot=False``);
  bare:   python -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=N
          --log-dir=<the bench's tmp folder>/torchrun-logs W (jt passes its own --log-dir,
          inside the run; without one torchrun leaves a /tmp/torchelastic_* per run)

While each run trains, a thread samples ``nvidia-smi --query-compute-apps=pid,used_memory``;
on a jt side every pid it shows must be a rank's (the supervisor and any pool hold no CUDA
context). Targets on a GPU: median(jt) / median(bare) >= 0.99, backend "nccl", no other pid;
exit status 1 when one is missed. ``--device cpu`` (the default without a GPU) runs the same
code with Gloo and a tiny model so the script can be checked anywhere: its figures are not
the GPU benchmark and no target is judged.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compute_apps import ComputeApps  # noqa: E402
from launch_overhead import RANK_ENV, describe, loadavg, wait_process_gone  # noqa: E402

import jupyter_trainer as jt  # noqa: E402
from jupyter_trainer.targets.base import count_nvidia_gpus  # noqa: E402

TARGET_RATIO = 0.99
MARK = '{"gpu_ddp": '  # how rank 0's result line starts

WORKLOAD = '''\
"""DDP training of a torch.nn transformer on synthetic tokens; rank 0 prints one JSON line."""
import argparse, json, os, time
import torch, torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

SIZES = {"cuda": dict(vocab=32768, d=1024, heads=16, ff=4096, layers=12, seq=512, batch=32),
         "cpu": dict(vocab=256, d=64, heads=4, ff=128, layers=2, seq=32, batch=8)}
p = argparse.ArgumentParser()
p.add_argument("--device", choices=sorted(SIZES), required=True)
p.add_argument("--steps", type=int, required=True)
p.add_argument("--warmup", type=int, required=True)
p.add_argument("--batch", type=int, default=0)
p.add_argument("--compile", action="store_true")
a = p.parse_args()
cfg = dict(SIZES[a.device], batch=a.batch or SIZES[a.device]["batch"])
cuda = a.device == "cuda"
local = int(os.environ.get("LOCAL_RANK", "0"))
if cuda:
    torch.cuda.set_device(local)
dev = torch.device("cuda", local) if cuda else torch.device("cpu")
# Under jupyter_trainer the backend is the one it chose (JT_BACKEND); bare: the device's.
dist.init_process_group(os.environ.get("JT_BACKEND") or ("nccl" if cuda else "gloo"))
rank, world = dist.get_rank(), dist.get_world_size()


class LM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.emb = nn.Embedding(c["vocab"], c["d"])
        self.pos = nn.Parameter(torch.zeros(c["seq"], c["d"]))
        layer = nn.TransformerEncoderLayer(c["d"], c["heads"], c["ff"], dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, c["layers"], enable_nested_tensor=False)
        self.norm = nn.LayerNorm(c["d"])
        self.head = nn.Linear(c["d"], c["vocab"], bias=False)

    def forward(self, x):
        return self.head(self.norm(self.body(self.emb(x) + self.pos)))


torch.manual_seed(1234)  # the same weights on every rank
model = LM(cfg).to(dev)
params = sum(t.numel() for t in model.parameters())
ddp = DDP(model, device_ids=[local] if cuda else None)
net = torch.compile(ddp) if a.compile else ddp
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
gen = torch.Generator(device=dev).manual_seed(1000 + rank)  # each rank its own data
shape = (8, cfg["batch"], cfg["seq"])
xs = torch.randint(cfg["vocab"], shape, device=dev, generator=gen)
ys = torch.randint(cfg["vocab"], shape, device=dev, generator=gen)


def step(i):
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        logits = net(xs[i % len(xs)])
        loss = F.cross_entropy(logits.view(-1, cfg["vocab"]), ys[i % len(ys)].view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def sync():
    if cuda:
        torch.cuda.synchronize()


for i in range(a.warmup):
    step(i)
sync()
dist.all_reduce(torch.ones(1, device=dev))  # every rank starts the clock together
sync()
if cuda:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
t0 = time.perf_counter()
for i in range(a.steps):
    loss = step(a.warmup + i)
if cuda:
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
else:
    seconds = time.perf_counter() - t0
wall = time.perf_counter() - t0
samples = a.steps * cfg["batch"]
counts = torch.tensor([float(samples), samples / seconds], dtype=torch.float64, device=dev)
slowest = torch.tensor([seconds], dtype=torch.float64, device=dev)
dist.all_reduce(counts)
dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
pids = [None] * world
dist.all_gather_object(pids, os.getpid())
if rank == 0:
    total = counts[0].item()
    line = {"gpu_ddp": 1, "samples_per_s": total / slowest.item(),
            "sum_rank_samples_per_s": counts[1].item(), "samples": total,
            "seconds": slowest.item(), "rank0_wall_s": wall,
            "tokens_per_s": total * cfg["seq"] / slowest.item(),
            "steps": a.steps, "warmup": a.warmup, "world_size": world,
            "backend": dist.get_backend(), "device": a.device,
            "device_name": torch.cuda.get_device_name(dev) if cuda else "cpu",
            "amp": "bf16" if cuda else None, "compile": a.compile, "params": params,
            "model": cfg, "loss": loss.item(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "threads": torch.get_num_threads(), "pids": pids}
    os.write(1, (json.dumps(line) + "\\n").encode())
dist.barrier()  # no rank tears Gloo down while another still talks to it
dist.destroy_process_group()
if not os.environ.get("JT_RUN_DIR"):
    # Bare torchrun: end as a jupyter_trainer rank does (boot.py), past C++ static teardown,
    # where torch 2.13 can abort a finished rank ("terminate called without an active exception").
    os._exit(0)
'''


def result_line(text: str) -> dict[str, Any] | None:
    """Rank 0's JSON line in a log or captured stdout."""
    for line in text.splitlines():
        if line.startswith(MARK):
            return json.loads(line)
    return None


def hot_support() -> tuple[bool, str]:
    """Whether a hot (pool) start can be asked for, decided now rather than assumed."""
    help_text = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer.frontends.cli", "submit", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout
    if "--hot" not in help_text:
        return False, "jupyter-trainer submit has no --hot"
    if "hot" not in inspect.signature(jt.submit).parameters:
        return False, "the CLI has --hot but jt.submit takes no hot="
    return True, "jupyter-trainer submit --hot"


def run_jt(
    script: Path, wargs: list[str], nprocs: int, hot: bool | None, home: Path, interval: float
) -> dict[str, Any]:
    """One run through ``jt.submit``; ``home`` is the bench's run store, kept between runs so
    that a hot run finds the pool the previous one started."""
    extra = {} if hot is None else {"hot": hot}
    t0 = time.perf_counter()
    with ComputeApps(interval) as apps:
        run = jt.submit(
            script=script, args=wargs, procs=nprocs, launcher="torchrun", home=home, **extra
        )
        run.wait(raise_on_failure=False)
    wall = time.perf_counter() - t0
    state = run.state
    logs = {
        p.name: p.read_text(errors="replace") for p in sorted((run.path / "logs").glob("*.log"))
    }
    if state["status"] != "completed":
        sys.exit(
            f"jt run {run.id} ended {state['status']!r}, not 'completed': "
            f"{state.get('error')}\n" + "\n".join(f"--- {k}\n{v[-3000:]}" for k, v in logs.items())
        )
    res = result_line(logs.get("rank-0.log", ""))
    if res is None:
        sys.exit(
            f"jt run {run.id}: no result line in logs/rank-0.log:\n{logs.get('rank-0.log', '')[-3000:]}"
        )
    ranks = [json.loads(p.read_text()) for p in sorted((run.path / "ranks").glob("rank-*.json"))]
    pids = {r["pid"] for r in ranks} | set(res["pids"])
    sup = state.get("supervisor", {})
    wait_process_gone(sup.get("pid"), sup.get("start_ticks"))  # untimed: its tail
    return {
        **res,
        "wall_s": wall,
        "run_id": run.id,
        "jt_backend": state.get("backend"),
        "launcher_argv": state.get("launcher", {}).get("argv"),
        "supervisor_pid": sup.get("pid"),
        "compute_apps": apps.verdict(pids),
        "hot": state.get("launcher", {}).get("hot"),
    }


def run_bare(
    script: Path, wargs: list[str], nprocs: int, workdir: Path, interval: float
) -> dict[str, Any]:
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={nprocs}",
        f"--log-dir={workdir / 'torchrun-logs'}",
        str(script),
        *wargs,
    ]
    t0 = time.perf_counter()
    with ComputeApps(interval) as apps:
        done = subprocess.run(
            argv,
            env={**os.environ, **RANK_ENV},
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    wall = time.perf_counter() - t0
    out = done.stdout.decode(errors="replace")
    res = result_line(out)
    if done.returncode != 0 or res is None:
        sys.exit(f"bare torchrun failed (exit {done.returncode}):\n{out[-4000:]}")
    return {**res, "wall_s": wall, "compute_apps": apps.verdict(set(res["pids"]))}


def gpu_list() -> list[str]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    out = subprocess.run([smi, "-L"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.startswith("GPU ")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        help="default: cuda where nvidia-smi lists a GPU and torch is built "
        "with CUDA, else cpu (a smoke test, not the benchmark)",
    )
    parser.add_argument("--procs", type=int, help="ranks (default: the GPUs; 2 on cpu)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of every side (default 5)")
    parser.add_argument("--steps", type=int, help="timed steps per run (default 60; 10 on cpu)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default 15; 2 on cpu)")
    parser.add_argument(
        "--batch", type=int, default=0, help="per-rank batch (default 32; 8 on cpu)"
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile the DDP model")
    parser.add_argument(
        "--sample-interval",
        type=float,
        default=0.25,
        help="seconds between nvidia-smi samples (default 0.25)",
    )
    parser.add_argument("--json", type=Path, help="also write every sample and the summary here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    gpus = gpu_list()
    # Decided without initialising CUDA here: this process must hold no context either.
    device = args.device or ("cuda" if gpus and _torch_cuda_build() else "cpu")
    on_gpu = device == "cuda"
    nprocs = args.procs or (count_nvidia_gpus() if on_gpu else 2)
    steps = args.steps or (60 if on_gpu else 10)
    warmup = args.warmup if args.warmup is not None else (15 if on_gpu else 2)
    wargs = [
        f"--device={device}",
        f"--steps={steps}",
        f"--warmup={warmup}",
        f"--batch={args.batch}",
        *(["--compile"] if args.compile else []),
    ]
    # The supervisor is ``python -m jupyter_trainer.supervisor.run``: let it find the package
    # where it is not installed (the GPU machine runs it from the checkout).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
    )

    hot, hot_note = hot_support()
    sides = {"jt": False if hot else None, "bare": None, **({"jt-hot": True} if hot else {})}
    torch_version = importlib.metadata.version("torch")
    print(
        f"# {platform.node()}  device={device}  ranks={nprocs}  torch={torch_version}  "
        f"gpus={len(gpus)}  loadavg={loadavg()}",
        flush=True,
    )
    for g in gpus:
        print(f"# {g}", flush=True)
    print(f"# sides: {', '.join(sides)}  (jt-hot: {hot_note})", flush=True)
    if not on_gpu:
        print(
            "# CPU RUN (Gloo, tiny model): a check of this script, NOT the GPU benchmark; "
            "no target is judged",
            flush=True,
        )

    work = Path(tempfile.mkdtemp(prefix="jt-bench-gpu-"))
    home = work / "jt-home"
    script = work / "ddp_workload.py"
    script.write_text(WORKLOAD)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    try:
        for i in range(args.repeats):
            names = list(sides)
            order = names[i % len(names) :] + names[: i % len(names)]
            for name in order:
                if name == "bare":
                    r = run_bare(script, wargs, nprocs, work, args.sample_interval)
                else:
                    r = run_jt(script, wargs, nprocs, sides[name], home, args.sample_interval)
                runs[name].append(r)
                used = f" pool={r['hot']}" if r.get("hot") else ""
                print(
                    f"round {i + 1}/{args.repeats} {name:6} {r['samples_per_s']:12.1f} samples/s "
                    f"backend={r['backend']} threads={r['threads']} wall={r['wall_s']:.1f} s"
                    f"{used}",
                    flush=True,
                )
    finally:
        if hot:
            from jupyter_trainer.rankside.hotstart import stop_pools

            stop_pools(home)
        shutil.rmtree(work, ignore_errors=True)

    stats = {name: describe([r["samples_per_s"] for r in rs]) for name, rs in runs.items()}
    ratios = {
        f"{name}/bare": stats[name]["median"] / stats["bare"]["median"]
        for name in sides
        if name != "bare"
    }
    backends = {name: sorted({r["backend"] for r in rs}) for name, rs in runs.items()}
    jt_backends = sorted(
        {r["jt_backend"] for name, rs in runs.items() if name != "bare" for r in rs}
    )
    first = runs["bare"][0]
    apps_ok = {name: [r["compute_apps"]["ok"] for r in rs] for name, rs in runs.items()}

    print()
    print(f"Samples/s, {args.repeats} interleaved rounds ({'GPU' if on_gpu else 'CPU smoke run'})")
    print(f"{'':8}{'median':>12}{'min':>12}{'max':>12}  backend")
    for name, s in stats.items():
        print(
            f"{name:8}{s['median']:12.1f}{s['min']:12.1f}{s['max']:12.1f}  {','.join(backends[name])}"
        )
    problems = []
    for key, ratio in ratios.items():
        verdict = "" if not on_gpu else ("  OK" if ratio >= TARGET_RATIO else "  UNDER TARGET")
        print(f"ratio of medians {key} = {ratio:.4f}  (target >= {TARGET_RATIO}){verdict}")
        if on_gpu and ratio < TARGET_RATIO:
            problems.append(f"{key} = {ratio:.4f} < {TARGET_RATIO}")
    print(
        f"backend jt chose: {', '.join(map(str, jt_backends))}"
        + ("  (must be nccl)" if on_gpu else "")
    )
    if on_gpu and jt_backends != ["nccl"]:
        problems.append(f"jt chose backend {jt_backends}, not nccl")
    for name, rs in runs.items():
        strangers = {k: v for r in rs for k, v in r["compute_apps"]["not_ranks"].items()}
        print(
            f"nvidia-smi compute apps during {name}: ok per run {apps_ok[name]}"
            + (f"; NOT RANKS: {strangers}" if strangers else "")
        )
        if name != "bare" and strangers:
            problems.append(
                f"{name}: a process that is not a rank held a CUDA context: {strangers}"
            )
    print(
        f"device: {first['device_name']} x{len(gpus) if on_gpu else 0}; torch {first['torch']} "
        f"(CUDA {first['cuda']}); model {first['params'] / 1e6:.1f} M parameters, "
        f"{steps} timed steps after {warmup}, batch {first['model']['batch']} per rank, "
        f"{nprocs} rank(s)"
    )
    if not on_gpu:
        print("CPU RUN: these figures check the script; they are NOT the GPU benchmark.")
    for p in problems:
        print(f"MISSED: {p}")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "device": device,
                    "gpu_benchmark": on_gpu,
                    "gpus": gpus,
                    "gpu_count": len(gpus),
                    "gpu_name": first["device_name"],
                    "torch": torch_version,
                    "cuda": first["cuda"],
                    "procs": nprocs,
                    "repeats": args.repeats,
                    "steps": steps,
                    "warmup": warmup,
                    "compile": args.compile,
                    "hot": {"side": hot, "note": hot_note},
                    "stats": stats,
                    "ratios": ratios,
                    "target_ratio": TARGET_RATIO,
                    "backends": backends,
                    "jt_backend": jt_backends,
                    "compute_apps_ok": apps_ok,
                    "problems": problems,
                    "runs": runs,
                    "host": platform.node(),
                    "loadavg_end": loadavg(),
                    "python": sys.executable,
                },
                indent=1,
            )
        )
        print(f"\nwrote {args.json}")
    return 1 if problems else 0


def _torch_cuda_build() -> bool:
    """Whether torch was built with CUDA, read without importing torch.cuda's runtime."""
    import torch

    return torch.version.cuda is not None


if __name__ == "__main__":
    sys.exit(main())
