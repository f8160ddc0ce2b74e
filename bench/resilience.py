"""How fast a run notices a stalled rank, and how fast it is back after a crash.

    .venv/bin/python bench/resilience.py [--repeats N] [--only stall|restart] [--no-mpirun]
                                         [--json PATH]

Stall detection. A 2-rank torchrun run (``jt.submit(code, procs=2, stall_timeout=5)``) in
which rank 1 sleeps at step 5 while rank 0 waits for it in ``all_reduce``. The bench reads
the run's state every 20 ms; the latency is the time the state first lists rank 1 as
stalled minus (its ``since``, the time of its last progress, + the timeout). Target ≤ 5 s
for every sample.

Restart. One small 2-rank Gloo script, in which rank 1 raises at step 3 of attempt 0, run
interleaved as

  torchrun: python -m torch.distributed.run --standalone --nproc-per-node=2 --max-restarts=1
  jt:       jt.submit(script=PATH, procs=2, launcher="torchrun", max_restarts=1).wait()
  mpirun:   jt.submit(script=PATH, procs=2, launcher="mpirun", max_restarts=1).wait()
            (the supervisor starts every rank again; for information, no target)

after one untimed warm-up of each. The script itself writes both times to the file named by
$BENCH_RESTART_MARKS: ``crash T`` just before rank 1 raises, ``first T`` when rank 0 begins
its first step of attempt 1 (after ``init_process_group``). The latency is first - crash.
Target: median(jt) / median(torchrun) ≤ 1.10.

Every jt run uses one temporary JUPYTER_TRAINER_HOME, must end as expected (the stall run
cancelled, the restart runs completed after two attempts) and leave no process behind; the
bench waits, untimed, for each run's supervisor to exit before the next sample.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launch_overhead import RANK_ENV, describe, loadavg, wait_process_gone

import jupyter_trainer as jt
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.store import TERMINAL
from jupyter_trainer.supervisor import starter

STALL_TIMEOUT = 5.0
TARGET_STALL_S = 5.0
TARGET_RESTART_RATIO = 1.10
POLL_S = 0.02
RUN_TIMEOUT_S = 180
MARKS_ENV = "BENCH_RESTART_MARKS"
# Parts of a restart (medians, seconds), in order; the jt rows have the boot script's too.
PHASES = {
    "crash_to_script_s": "crash -> rank 0's script runs again",
    "crash_to_boot_s": "  of which crash -> jt's boot started (rank record)",
    "boot_to_script_s": "  of which jt's boot -> script",
    "script_to_first_s": "script start -> first step (torch, init_process_group)",
}

# Rank 1 sleeps in a function of its own at step 5 while rank 0 waits for it in all_reduce.
STALLING = """
import time, torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")

def wait_for_a_lost_batch():
    time.sleep(600)

for step in range(10_000):
    if jt.rank == 1 and step == 5:
        wait_for_a_lost_batch()
    t = torch.ones(1)
    dist.all_reduce(t)
    jt.log(step=step, loss=1.0 / (step + 1))
    time.sleep(0.02)
"""

# Plain torch: the same file runs under bare torchrun and through jupyter_trainer. After a
# torchrun restart the agent's store still holds attempt 0's Gloo addresses, and a plain
# init_process_group("gloo") may connect to a rank that is gone (refused, or a hang), so every
# attempt after the first takes keys of its own, as jupyter_trainer's boot does for its ranks.
CRASHING = f"""
import os, time

attempt = (int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
           + int(os.environ.get("JT_ATTEMPT", 0)))


def mark(what):
    with open(os.environ["{MARKS_ENV}"], "a") as fh:
        fh.write(f"{{what}} {{time.time()!r}}\\n")


if attempt >= 1 and os.environ.get("RANK") == "0":
    mark("start")
import torch, torch.distributed as dist

if attempt > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
    world = int(os.environ["WORLD_SIZE"])
    shared = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                           is_master=False)
    dist.init_process_group("gloo", store=dist.PrefixStore(f"/bench/attempt_{{attempt}}/", shared),
                            rank=int(os.environ["RANK"]), world_size=world)
else:
    dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(8):
    if attempt >= 1 and step == 0 and rank == 0:
        mark("first")
    t = torch.ones(1)
    dist.all_reduce(t)
    if attempt == 0 and step == 3 and rank == 1:
        mark("crash")
        raise RuntimeError("rank 1 crashes on attempt 0")
dist.destroy_process_group()
"""


def finish(run: jt.Run) -> dict[str, Any]:
    """Wait (untimed) for the run's supervisor to exit; its final state. Exits the bench if
    a process of the run is left."""
    state = run.state
    sup = state.get("supervisor", {})
    wait_process_gone(sup.get("pid"), sup.get("start_ticks"))
    left = [procs.describe(p) for p in procs.pids_with_env("JT_RUN_ID", run.id)]
    if left:
        sys.exit(f"run {run.id} left processes behind: {left}")
    return run.state


def run_logs(run: jt.Run) -> str:
    return "\n".join(
        f"--- {p.relative_to(run.path)}\n{p.read_text(errors='replace')[-2000:]}"
        for p in sorted(run.path.glob("**/*.log"))
    )


# -- stall detection ---------------------------------------------------------------------


def stall_sample(home: Path) -> dict[str, Any]:
    run = jt.submit(
        STALLING,
        procs=2,
        launcher="torchrun",
        stall_timeout=STALL_TIMEOUT,
        name="bench-stall",
        home=home,
    )
    seen, entry = None, None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            state = run.state
            now = time.time()
            if state.get("status") in TERMINAL:
                sys.exit(
                    f"stall run {run.id} ended {state.get('status')!r} before a stall: "
                    f"{state.get('error')}\n{run_logs(run)}"
                )
            entry = next((e for e in state.get("stalled") or [] if e.get("rank") == 1), None)
            if entry is not None:
                seen = now
                break
            time.sleep(POLL_S)
    finally:
        run.cancel()
        run.wait(timeout=60, raise_on_failure=False)
    finish(run)
    if entry is None:
        sys.exit(f"stall run {run.id}: rank 1 not listed as stalled within 120 s\n{run_logs(run)}")
    return {
        "run_id": run.id,
        "latency_s": seen - (entry["since"] + STALL_TIMEOUT),
        "seen": seen,
        "since": entry["since"],
        "seconds_in_state": entry["seconds"],
        "last_step": entry.get("last_step"),
        "stack_named": "wait_for_a_lost_batch" in (entry.get("stack") or ""),
    }


def bench_stall(home: Path, repeats: int) -> dict[str, Any]:
    samples = []
    for i in range(repeats):
        s = stall_sample(home)
        samples.append(s)
        print(
            f"stall {i + 1}/{repeats}: latency past the timeout {s['latency_s']:.2f} s "
            f"(state's seconds {s['seconds_in_state']}, last step {s['last_step']}, "
            f"stack named: {s['stack_named']}; load1 {loadavg()[0]:.2f})",
            flush=True,
        )
    lat = [s["latency_s"] for s in samples]
    return {
        "samples": samples,
        "median_s": statistics.median(lat),
        "max_s": max(lat),
        "target_s": TARGET_STALL_S,
        "target_met": max(lat) <= TARGET_STALL_S,
    }


# -- restart latency ---------------------------------------------------------------------


def read_marks(path: Path, where: str) -> dict[str, float]:
    """The script's marks: the latency (crash -> first step of attempt 1) and its two parts,
    crash -> rank 0's script started again and script start -> first step."""
    marks: dict[str, list[float]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            what, t = line.split()
            marks.setdefault(what, []).append(float(t))
    if any(len(marks.get(what, [])) != 1 for what in ("crash", "start", "first")):
        sys.exit(f"{where}: expected one crash, start and first mark in {path}, got {marks}")
    crash, start, first = (marks[what][0] for what in ("crash", "start", "first"))
    return {
        "latency_s": first - crash,
        "crash_to_script_s": start - crash,
        "script_to_first_s": first - start,
        "crash": crash,
        "start": start,
    }


def restart_torchrun(script: Path, work: Path, marks: Path) -> dict[str, Any]:
    marks.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=1",
        str(script),
    ]
    child = subprocess.Popen(
        argv,
        env={**os.environ, **RANK_ENV},
        cwd=work,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = child.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, _ = child.communicate()
    if child.returncode != 0:
        sys.exit(
            f"bare torchrun failed (exit {child.returncode}):\n"
            f"{out.decode(errors='replace')[-4000:]}"
        )
    return read_marks(marks, "bare torchrun")


def restart_jt(script: Path, home: Path, marks: Path, launcher: str) -> dict[str, Any]:
    marks.unlink(missing_ok=True)
    run = jt.submit(
        script=script,
        procs=2,
        launcher=launcher,
        max_restarts=1,
        name=f"bench-restart-{launcher}",
        home=home,
    )
    try:
        run.wait(timeout=RUN_TIMEOUT_S, raise_on_failure=False)
    finally:
        if not run.done:
            run.cancel()
    state = finish(run)
    attempts = state.get("attempts") or []
    if state["status"] != "completed" or len(attempts) != 2:
        sys.exit(
            f"jt {launcher} run {run.id} ended {state['status']!r} after "
            f"{len(attempts)} attempts: {state.get('error')}\n{run_logs(run)}"
        )
    found = read_marks(marks, f"jt {launcher} run {run.id}")
    failed = json.loads((run.path / "ranks" / "rank-1.attempt-0.json").read_text())
    booted = json.loads((run.path / "ranks" / "rank-0.json").read_text())
    return {
        **found,
        "crash_to_boot_s": booted["started"] - found["crash"],
        "boot_to_script_s": found["start"] - booted["started"],
        "run_id": run.id,
        "attempts": attempts,
        "rank1_failed_at": failed.get("failed_at"),
    }


def bench_restart(home: Path, work: Path, repeats: int, mpirun: bool) -> dict[str, Any]:
    script = work / "crash_once.py"
    script.write_text(CRASHING)
    marks = work / "marks.txt"
    os.environ[MARKS_ENV] = str(marks)  # inherited by bare torchrun and jt's supervisor alike
    sides = {
        "torchrun": lambda: restart_torchrun(script, work, marks),
        "jt": lambda: restart_jt(script, home, marks, "torchrun"),
    }
    if mpirun:
        sides["jt mpirun"] = lambda: restart_jt(script, home, marks, "mpirun")
    print("restart warm-up:", end="", flush=True)
    warm = {}
    for name, side in sides.items():
        warm[name] = side()["latency_s"]
        print(f" {name} {warm[name]:.2f} s", end="", flush=True)
    print(flush=True)
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for i in range(repeats):
        row = []
        for name, side in sides.items():
            samples[name].append(side())
            row.append(f"{name} {samples[name][-1]['latency_s']:.3f} s")
        print(
            f"restart {i + 1}/{repeats}: " + "  ".join(row) + f"  (load1 {loadavg()[0]:.2f})",
            flush=True,
        )
    stats = {name: describe([s["latency_s"] for s in v]) for name, v in samples.items()}
    phases = {
        name: {key: statistics.median(s[key] for s in v) for key in PHASES if key in v[0]}
        for name, v in samples.items()
    }
    ratio = stats["jt"]["median"] / stats["torchrun"]["median"]
    return {
        "warmup_s": warm,
        "samples": samples,
        "stats": stats,
        "phases_s": phases,
        "ratio": ratio,
        "target_ratio": TARGET_RESTART_RATIO,
        "target_met": ratio <= TARGET_RESTART_RATIO,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=3, help="stall runs, and timed restart rounds (default 3)"
    )
    parser.add_argument("--only", choices=("stall", "restart"), help="run one part only")
    parser.add_argument(
        "--no-mpirun",
        action="store_true",
        help="leave out the supervisor's own restart (launcher mpirun)",
    )
    parser.add_argument("--json", type=Path, help="also write every sample here")
    args = parser.parse_args(argv)
    if args.repeats < 2:
        parser.error("--repeats must be at least 2 (a stdev needs two samples)")
    mpirun = not args.no_mpirun and shutil.which("mpirun") is not None

    load_start = loadavg()
    print(
        f"# {platform.node()}  cpus={os.cpu_count()}  python={platform.python_version()}  "
        f"loadavg at start={load_start}",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="jt-bench-"))
    home = work / "home"
    result: dict[str, Any] = {"repeats": args.repeats, "loadavg_start": load_start}
    try:
        if args.only in (None, "stall"):
            result["stall"] = bench_stall(home, args.repeats)
        if args.only in (None, "restart"):
            result["restart"] = bench_restart(home, work, args.repeats, mpirun)
    finally:
        starter.release_spare()
        shutil.rmtree(work, ignore_errors=True)
    result["loadavg_end"] = loadavg()

    met = True
    print()
    if "stall" in result:
        st = result["stall"]
        verdict = "PASS" if st["target_met"] else "FAIL"
        print(
            f"Stall detection, {args.repeats} runs, timeout {STALL_TIMEOUT:g} s: latency past "
            f"the timeout median {st['median_s']:.2f} s, max {st['max_s']:.2f} s "
            f"(target <= {TARGET_STALL_S:g} s: {verdict})"
        )
        met &= st["target_met"]
    if "restart" in result:
        rs = result["restart"]
        print(
            f"Restart latency, crash -> first step of the next attempt, "
            f"{args.repeats} interleaved rounds (seconds)"
        )
        print(f"{'':11}{'median':>9}{'min':>9}{'max':>9}{'stdev':>9}")
        for name, s in rs["stats"].items():
            print(f"{name:11}{s['median']:9.3f}{s['min']:9.3f}{s['max']:9.3f}{s['stdev']:9.3f}")
        print(f"{'parts (medians)':56}" + "".join(f"{name:>11}" for name in rs["phases_s"]))
        for key, label in PHASES.items():
            print(
                f"{label:56}"
                + "".join(
                    f"{p[key]:11.3f}" if key in p else f"{'-':>11}" for p in rs["phases_s"].values()
                )
            )
        verdict = "PASS" if rs["target_met"] else "FAIL"
        print(
            f"ratio of medians jt/torchrun = {rs['ratio']:.3f} "
            f"(target <= {TARGET_RESTART_RATIO:.2f}: {verdict})"
        )
        if "jt mpirun" in rs["stats"]:
            print(
                f"jt mpirun / torchrun = "
                f"{rs['stats']['jt mpirun']['median'] / rs['stats']['torchrun']['median']:.3f} "
                f"(the supervisor's relaunch; no target)"
            )
        met &= rs["target_met"]
    print(f"loadavg start {load_start} end {result['loadavg_end']}")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({**result, "host": platform.node(), "cpus": os.cpu_count()}, indent=1)
        )
        print(f"wrote {args.json}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
