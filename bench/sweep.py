"""What a sweep's driver costs per trial, and how fast it stops a pruned trial.

    .venv/bin/python bench/sweep.py [--repeats N] [--trials N] [--only overhead|prune]
                                    [--json PATH]

Driver overhead per trial. The same trials (a script that sleeps 0.5 s and reports
``score = -(x - 0.3)**2``, x drawn by Optuna's RandomSampler with one seed) run two ways,
interleaved, ``--repeats`` times each, one trial at a time:

  plain: an Optuna loop with its study in SQLite storage: ask, ``subprocess.run([python,
         script, x])``, read the score it prints, tell;
  jt:    ``jupyter_trainer.sweep(script=..., launcher="python", parallel=1)``: the detached
         driver, each trial a run of the sweep's template in the run store.

Overhead per trial = (the loop's wall time - the sum of its trials' run times) / trials. A
plain trial's run time is its subprocess's; a jt trial's is its run's, from the run's
creation to its end as the run records them, and the jt wall time is from the driver's start
to the sweep's end (the sweep's creation, once per sweep, is reported apart). Target:
median(jt) / median(plain) <= 1.05.

Prune latency. A bandit:0.1 sweep of two 2-rank torchrun trials, one at a time: trial 0 logs
``score = 1`` for 8 steps; trial 1 logs 1 for 3 steps and then 0.1, which is outside the slack
from step 3 on. The latency is the time its processes are all gone (polled every 5 ms) minus
the time rank 0 logged the crossing event (the event's own ``t``). Target <= 2 s.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launch_overhead import describe, loadavg

import jupyter_trainer as jt
from jupyter_trainer.rankside.host import procs

TARGET_OVERHEAD_RATIO = 1.05
TARGET_PRUNE_S = 2.0
SEED = 11
JT_TRIAL = """
import time
from jupyter_trainer import runtime as jt
time.sleep(0.5)
jt.log(step=0, score=-(jt.params["x"] - 0.3) ** 2)
"""
PLAIN_TRIAL = """
import sys, time
x = float(sys.argv[1])
time.sleep(0.5)
print(-(x - 0.3) ** 2)
"""
PRUNED_TRIAL = """
import os, sys, time
import torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
first = [0]
if jt.rank == 0:  # the first trial to get here is the good one, the other the pruned one
    try:
        os.close(os.open(os.path.join(sys.argv[1], "first"), os.O_CREAT | os.O_EXCL))
        first = [1]
    except FileExistsError:
        pass
dist.broadcast_object_list(first)
for step in range(8):
    score = 1.0 if first[0] or step < 3 else 0.1
    jt.log(step=step, score=score)
    dist.barrier()
    time.sleep(0.3)
dist.destroy_process_group()
"""


def plain_loop(script: Path, trials: int, folder: Path) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=f"sqlite:///{folder / 'plain.db'}",
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=SEED),
    )
    durations = []
    t0 = time.perf_counter()
    for _ in range(trials):
        trial = study.ask()
        x = trial.suggest_float("x", 0.0, 1.0)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(script), repr(x)], capture_output=True, text=True, check=True
        )
        durations.append(time.perf_counter() - start)
        study.tell(trial, float(done.stdout))
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "run_s": sum(durations),
        "overhead_per_trial_s": (wall - sum(durations)) / trials,
    }


def jt_sweep(script: Path, trials: int, home: Path) -> dict[str, Any]:
    t0 = time.time()
    sweep = jt.sweep(
        script=script,
        space={"x": "uniform(0, 1)"},
        metric="score",
        trials=trials,
        parallel=1,
        sampler="random",
        seed=SEED,
        launcher="python",
        home=home,
    )
    sweep.wait(timeout=600, poll=0.05)
    state = sweep.state
    assert state["status"] == "completed" and len(state["trials"]) == trials, state
    runs = [r.state for r in sweep.trials()]
    run_s = sum(s["ended"] - s["created"] for s in runs)
    wall = state["ended"] - state["started"]
    return {
        "wall_s": wall,
        "run_s": run_s,
        "creation_s": state["started"] - t0,
        "overhead_per_trial_s": (wall - run_s) / trials,
    }


def overhead(repeats: int, trials: int, folder: Path) -> dict[str, Any]:
    jt_script, plain_script = folder / "jt_trial.py", folder / "plain_trial.py"
    jt_script.write_text(JT_TRIAL)
    plain_script.write_text(PLAIN_TRIAL)
    samples: dict[str, list[dict[str, Any]]] = {"plain": [], "jt": []}
    jt_sweep(jt_script, 2, folder / "warm-home")  # untimed: imports, the environment check
    for k in range(repeats):
        run_folder = folder / f"plain-{k}"
        run_folder.mkdir()
        samples["plain"].append(plain_loop(plain_script, trials, run_folder))
        samples["jt"].append(jt_sweep(jt_script, trials, folder / f"home-{k}"))
        print(
            f"repeat {k + 1}: plain {samples['plain'][-1]['overhead_per_trial_s'] * 1e3:.1f} "
            f"ms/trial, jt {samples['jt'][-1]['overhead_per_trial_s'] * 1e3:.1f} ms/trial",
            flush=True,
        )
    plain = [s["overhead_per_trial_s"] for s in samples["plain"]]
    ours = [s["overhead_per_trial_s"] for s in samples["jt"]]
    ratio = statistics.median(ours) / statistics.median(plain)
    return {
        "trials": trials,
        "repeats": repeats,
        "plain_s": describe(plain),
        "jt_s": describe(ours),
        "ratio": ratio,
        "target": TARGET_OVERHEAD_RATIO,
        "met": ratio <= TARGET_OVERHEAD_RATIO,
        "jt_creation_s": describe([s["creation_s"] for s in samples["jt"]]),
    }


def prune_latency(repeats: int, folder: Path) -> dict[str, Any]:
    script = folder / "pruned.py"
    script.write_text(PRUNED_TRIAL)
    samples = []
    for k in range(repeats):
        marks = folder / f"marks-{k}"
        marks.mkdir()
        sweep = jt.sweep(
            script=script,
            args=[str(marks)],
            space={"k": "choice(0, 1)"},
            metric="score",
            trials=2,
            parallel=1,
            sampler="grid",
            prune="bandit:0.1",
            procs=2,
            home=folder / f"prune-{k}",
        )
        while len(sweep.state["trials"]) < 2 or not sweep.state["trials"][1].get("run"):
            time.sleep(0.005)
        bad = sweep.state["trials"][1:]
        run_id = bad[0]["run"]
        while not procs.pids_with_env("JT_RUN_ID", run_id) and jt.get_run(
            run_id, home=sweep.store.home
        ).status in ("created", "preparing", "running"):
            time.sleep(0.005)
        while procs.pids_with_env("JT_RUN_ID", run_id):
            time.sleep(0.005)
        gone = time.time()
        sweep.wait(timeout=120)
        trial = next(t for t in sweep.state["trials"] if t["run"] == run_id)
        assert trial["status"] == "pruned" and trial["pruned_at"] == 3, trial
        run = jt.get_run(run_id, home=sweep.store.home)
        crossing = next(
            e
            for e in run.store.iter_events(run_id, 0)
            if e.get("kind") == "metric" and e.get("step") == 3
        )
        samples.append(gone - crossing["t"])
        print(f"repeat {k + 1}: pruned {samples[-1]:.3f} s after the crossing event", flush=True)
    return {
        "repeats": len(samples),
        "latency_s": describe(samples),
        "target_s": TARGET_PRUNE_S,
        "met": max(samples) <= TARGET_PRUNE_S,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--only", choices=("overhead", "prune"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    result: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_before": loadavg(),
        }
    }
    with tempfile.TemporaryDirectory(prefix="jt-bench-sweep-") as tmp:
        folder = Path(tmp)
        if args.only in (None, "overhead"):
            result["overhead"] = overhead(args.repeats, args.trials, folder)
        if args.only in (None, "prune"):
            result["prune"] = prune_latency(args.repeats, folder)
    result["machine"]["loadavg_after"] = loadavg()
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
