"""Launch overhead of ``jt.submit(...).wait()`` against bare torchrun, on the same tiny job.

    .venv/bin/python bench/launch_overhead.py [--repeats N] [--hot] [--one-store] [--json PATH]

Each sample is the wall time of a 2-rank Gloo ``all_reduce`` script, launched either as

  jt:   jt.submit(script=PATH, procs=2, launcher="torchrun", home=<fresh tmp>).wait()
  bare: python -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=2 PATH

interleaved (jt, bare, jt, bare, ...) after one untimed warm-up of each. The jt side passes
``hot=False``: it is started by torchrun. With ``--one-store`` every jt run goes to one store
kept for the whole bench, as a notebook's runs do, so a supervisor started ahead waits for
each next run; without it each torchrun sample is a fresh store's first run. With ``--hot`` each
round also times a third side, ``jt.submit(..., hot=True).wait()`` in one store kept for
all of them, so its warm rank pool (started by an untimed warm-up, whose time is reported
as the first run's) forks the ranks; the pool's resident memory once idle is reported too.
The bare launcher gets the variables jupyter_trainer gives its ranks (OMP_NUM_THREADS=1,
PYTHONUNBUFFERED=1).
Every jt run uses a fresh temporary JUPYTER_TRAINER_HOME and must end ``completed``; the
bench waits (untimed) for each run's detached supervisor to exit before the next sample so
its tail never overlaps the next measurement.

Second table: where a jt run's time goes, from the run's own timestamps (state.json stages,
the rank records written by code/_jt/boot.py) plus the bench's clock around ``submit()`` and
``wait()``. All of those are ``time.time()`` on the same host, so they line up.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import jupyter_trainer as jt  # noqa: E402
from jupyter_trainer.rankside.host import procs  # noqa: E402

TARGET_RATIO = 1.10
HOT_TARGET_RATIO = 0.30  # issue: a --hot run (warm pool) against bare torchrun

TINY = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == 2
dist.destroy_process_group()
"""

# What jupyter_trainer's launch layer gives every rank of a --procs>1 torchrun run.
RANK_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

# The timeline of one jt run, in order; each is seconds since the epoch (or None).
EVENTS = [
    ("submit_called", "submit() called"),
    ("created", "run created (state.created)"),
    ("submit_returned", "submit() returned"),
    ("preparing", "supervisor up: preparing"),
    ("running", "running: launcher spawned"),
    ("first_rank_started", "first rank in boot.py"),
    ("last_rank_ended", "last rank ended"),
    ("finalizing", "supervisor saw launcher exit"),
    ("ended", "terminal state written"),
    ("wait_returned", "wait() returned"),
]


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def wait_process_gone(pid: int | None, ticks: int | None, timeout: float = 30.0) -> float:
    """Wait (untimed for the bench) until a non-child process has exited; return seconds."""
    t0 = time.monotonic()
    while pid and procs.is_alive(pid, ticks) and time.monotonic() - t0 < timeout:
        time.sleep(0.005)
    return time.monotonic() - t0


def run_bare(script: Path, workdir: Path) -> float:
    env = {**os.environ, **RANK_ENV}
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=2",
        str(script),
    ]
    t0 = time.perf_counter()
    done = subprocess.run(
        argv,
        env=env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(
            f"bare torchrun failed (exit {done.returncode}):\n"
            f"{done.stdout.decode(errors='replace')[-4000:]}"
        )
    return elapsed


def run_jt(
    script: Path,
    hot_home: Path | None = None,
    *,
    hot: bool | None = None,
) -> tuple[float, dict[str, Any]]:
    """One jt sample: in a fresh store, or in ``hot_home``, kept between samples (so its
    rank pool stays warm and a supervisor waits for the next run, as in a notebook), as a
    hot run unless ``hot`` is False."""
    home = hot_home or Path(tempfile.mkdtemp(prefix="jt-bench-home-"))
    hot = hot_home is not None if hot is None else hot
    try:
        wall0 = time.time()
        t0 = time.perf_counter()
        run = jt.submit(script=script, procs=2, launcher="torchrun", home=home, hot=hot)
        wall_submitted = time.time()
        run.wait(raise_on_failure=False)
        elapsed = time.perf_counter() - t0
        wall_waited = time.time()

        state = run.state
        if state["status"] != "completed":
            logs = "\n".join(
                f"--- {p.relative_to(run.path)}\n{p.read_text(errors='replace')[-2000:]}"
                for p in sorted(run.path.glob("**/*.log"))
            )
            sys.exit(
                f"jt run {run.id} ended {state['status']!r}, not 'completed': "
                f"{state.get('error')}\n{state.get('traceback') or ''}\n{logs}"
            )
        ranks = [
            json.loads(p.read_text()) for p in sorted((run.path / "ranks").glob("rank-*.json"))
        ]
        stages = state.get("stages", {})
        events = {
            "submit_called": wall0,
            "created": state.get("created"),
            "submit_returned": wall_submitted,
            "preparing": stages.get("preparing", {}).get("start"),
            "running": stages.get("running", {}).get("start"),
            "first_rank_started": min((r["started"] for r in ranks), default=None),
            "last_rank_ended": max((r.get("ended", 0) for r in ranks), default=None) or None,
            "finalizing": stages.get("finalizing", {}).get("start"),
            "ended": state.get("ended"),
            "wait_returned": wall_waited,
        }
        sup = state.get("supervisor", {})
        # Untimed: let the supervisor finish its tail (index update, exit) before going on.
        tail = wait_process_gone(sup.get("pid"), sup.get("start_ticks"))
        info = {
            "run_id": run.id,
            "events": events,
            "supervisor_tail_s": tail,
            "launcher_argv": state.get("launcher", {}).get("argv"),
            "hot": state.get("launcher", {}).get("hot"),
        }
        if hot and not (info["hot"] or {}).get("used"):
            sys.exit(f"the --hot run {run.id} did not use the rank pool: {info['hot']}")
        return elapsed, info
    finally:
        if hot_home is None:
            shutil.rmtree(home, ignore_errors=True)


def pool_rss_mib(info: dict[str, Any]) -> float | None:
    """The resident memory of the pool that ran a hot sample, now that it is idle."""
    pid = (info.get("hot") or {}).get("pool")
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, TypeError):
        return None
    kb = next(
        (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None
    )
    return kb / 1024 if kb is not None else None


def describe(samples: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "stdev": statistics.stdev(samples) if len(samples) > 1 else 0.0,
    }


def breakdown(infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per event: offset from submit() and gap from the previous event (median, min, max ms)."""
    rows = []
    prev = None
    for key, label in EVENTS:
        offsets, gaps = [], []
        for info in infos:
            ev = info["events"]
            if ev.get(key) is None:
                continue
            offsets.append((ev[key] - ev["submit_called"]) * 1e3)
            if prev is not None and ev.get(prev) is not None:
                gaps.append((ev[key] - ev[prev]) * 1e3)
        rows.append(
            {
                "event": key,
                "label": label,
                "offset_ms": statistics.median(offsets) if offsets else None,
                "gap_ms": statistics.median(gaps) if gaps else None,
                "gap_min_ms": min(gaps) if gaps else None,
                "gap_max_ms": max(gaps) if gaps else None,
            }
        )
        prev = key
    return rows


def span(infos: list[dict[str, Any]], a: str, b: str) -> float:
    vals = [
        (i["events"][b] - i["events"][a]) * 1e3
        for i in infos
        if i["events"].get(a) is not None and i["events"].get(b) is not None
    ]
    return statistics.median(vals) if vals else float("nan")


def reference_costs(reps: int) -> dict[str, float]:
    """Median wall ms of a few interpreter start-ups that explain the fixed costs."""
    cases = {
        "python -c pass": ["-c", "pass"],
        "python -c 'import jupyter_trainer.supervisor.run'": [
            "-c",
            "import jupyter_trainer.supervisor.run",
        ],
        "python -c 'import torch.distributed'": ["-c", "import torch.distributed"],
    }
    out = {}
    env = {**os.environ, **RANK_ENV}
    for label, args in cases.items():
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, *args], env=env, cwd=REPO, check=True, stdin=subprocess.DEVNULL
            )
            times.append((time.perf_counter() - t0) * 1e3)
        out[label] = statistics.median(times)
    return out


def fmt(x: float | None, width: int = 8) -> str:
    return f"{x:{width}.1f}" if x is not None else " " * (width - 1) + "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=8, help="timed (jt, bare) pairs (default 8)")
    parser.add_argument("--json", type=Path, help="also write every sample and table here")
    parser.add_argument(
        "--hot", action="store_true", help="also time --hot runs (warm rank pool) in a third column"
    )
    parser.add_argument(
        "--one-store",
        action="store_true",
        help="every jt run (torchrun and hot) in one store kept for the whole "
        "bench, as a notebook's runs are: a supervisor started ahead waits "
        "for each next run (default: a fresh store per torchrun run)",
    )
    parser.add_argument(
        "--reference-reps",
        type=int,
        default=5,
        help="repetitions of the interpreter start-up references (0: skip)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 2:
        parser.error("--repeats must be at least 2 (a stdev needs two samples)")

    work = Path(tempfile.mkdtemp(prefix="jt-bench-"))
    script = work / "tiny_allreduce.py"
    script.write_text(TINY)
    load_start = loadavg()
    print(
        f"# {platform.node()}  cpus={os.cpu_count()}  python={platform.python_version()}  "
        f"loadavg at start={load_start}",
        flush=True,
    )
    try:
        print("warm-up: jt ...", end=" ", flush=True)
        kept = work / "hot-home" if args.one_store else None  # both jt sides' store
        warm_jt, _ = run_jt(script, kept, hot=False)
        print(f"{warm_jt:.2f} s; bare ...", end=" ", flush=True)
        warm_bare = run_bare(script, work)
        print(f"{warm_bare:.2f} s", flush=True)
        hot_home = work / "hot-home" if args.hot else None
        if hot_home is not None:
            warm_hot, _ = run_jt(script, hot_home)  # starts the pool: the first run's cost
            print(f"warm-up: hot (starting the pool) {warm_hot:.2f} s", flush=True)

        jt_s, bare_s, hot_s, infos, hot_infos, loads = [], [], [], [], [], []
        for i in range(args.repeats):
            t_jt, info = run_jt(script, kept, hot=False)
            t_bare = run_bare(script, work)
            jt_s.append(t_jt)
            bare_s.append(t_bare)
            infos.append(info)
            if hot_home is not None:
                t_hot, hot_info = run_jt(script, hot_home)
                hot_s.append(t_hot)
                hot_infos.append(hot_info)
            loads.append(loadavg()[0] if loadavg() else float("nan"))
            print(
                f"round {i + 1}/{args.repeats}: jt {t_jt:.3f} s  bare {t_bare:.3f} s  "
                + (f"hot {hot_s[-1]:.3f} s  " if hot_s else "")
                + f"(load1 {loads[-1]:.2f})",
                flush=True,
            )
        rss = pool_rss_mib(hot_infos[-1]) if hot_infos else None
        refs = reference_costs(args.reference_reps) if args.reference_reps > 0 else {}
    finally:
        if args.hot or args.one_store:
            from jupyter_trainer.rankside import hotstart as pool

            pool.stop_pools(work / "hot-home")
        shutil.rmtree(work, ignore_errors=True)
    load_end = loadavg()

    sj, sb = describe(jt_s), describe(bare_s)
    ratio = sj["median"] / sb["median"]
    overhead_ms = (sj["median"] - sb["median"]) * 1e3
    paired = statistics.median([(a - b) * 1e3 for a, b in zip(jt_s, bare_s)])

    print()
    print(f"Wall time, {args.repeats} interleaved pairs (seconds)")
    print(f"{'':6}{'median':>9}{'min':>9}{'max':>9}{'stdev':>9}")
    for name, s in (("jt", sj), ("bare", sb)):
        print(f"{name:6}{s['median']:9.3f}{s['min']:9.3f}{s['max']:9.3f}{s['stdev']:9.3f}")
    verdict = "OK" if ratio <= TARGET_RATIO else "OVER TARGET"
    print(f"ratio of medians jt/bare = {ratio:.3f}  (target <= {TARGET_RATIO:.2f}: {verdict})")
    hot_ratio = None
    if hot_s:
        sh = describe(hot_s)
        hot_ratio = sh["median"] / sb["median"]
        print(f"{'hot':6}{sh['median']:9.3f}{sh['min']:9.3f}{sh['max']:9.3f}{sh['stdev']:9.3f}")
        print(
            f"ratio of medians hot/bare = {hot_ratio:.3f}  (target <= {HOT_TARGET_RATIO:.2f}: "
            f"{'OK' if hot_ratio <= HOT_TARGET_RATIO else 'OVER TARGET'}); the first hot run, "
            f"which started the pool, took {warm_hot:.3f} s; the idle pool holds "
            + (f"{rss:.0f} MiB resident" if rss is not None else "? (gone)")
        )
    print(
        f"overhead = {overhead_ms:.0f} ms (difference of medians); "
        f"median paired difference = {paired:.0f} ms"
    )
    print(
        f"loadavg start {load_start} end {load_end}; load1 per pair "
        f"{', '.join(f'{x:.2f}' for x in loads)}"
    )

    rows = breakdown(infos)
    print()
    print(f"Where a jt run's time goes (median over the {len(infos)} timed jt runs, ms)")
    print(f"{'event':34}{'at':>8}{'gap':>8}{'gmin':>8}{'gmax':>8}")
    for row in rows:
        print(
            f"{row['label']:34}{fmt(row['offset_ms'])}{fmt(row['gap_ms'])}"
            f"{fmt(row['gap_min_ms'])}{fmt(row['gap_max_ms'])}"
        )
    launcher_ms = span(infos, "running", "finalizing")
    outside_ms = span(infos, "submit_called", "wait_returned") - launcher_ms
    inside = statistics.median(
        (i["events"]["finalizing"] - i["events"]["running"] - b) * 1e3
        for i, b in zip(infos, bare_s)
    )
    print(
        f"launcher lifetime (running -> finalizing) {launcher_ms:.0f} ms vs bare median "
        f"{sb['median'] * 1e3:.0f} ms (median paired difference {inside:.0f} ms); "
        f"jt time outside the launcher {outside_ms:.0f} ms"
    )
    print(
        f"supervisor still alive after wait() returned (untimed): median "
        f"{statistics.median(i['supervisor_tail_s'] for i in infos) * 1e3:.0f} ms"
    )
    if infos and infos[0].get("launcher_argv"):
        print("jt launcher argv: " + " ".join(infos[0]["launcher_argv"]))

    if refs:
        print()
        print(f"Reference start-up costs (median of {args.reference_reps}, ms)")
        for label, ms in refs.items():
            print(f"{label:48}{ms:8.1f}")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "repeats": args.repeats,
                    "jt_s": jt_s,
                    "bare_s": bare_s,
                    "warmup": {"jt_s": warm_jt, "bare_s": warm_bare},
                    "jt": sj,
                    "bare": sb,
                    "ratio": ratio,
                    "target_ratio": TARGET_RATIO,
                    "hot_s": hot_s,
                    "hot_ratio": hot_ratio,
                    "hot_target_ratio": HOT_TARGET_RATIO,
                    "hot_runs": hot_infos,
                    "pool_rss_mib": rss,
                    "overhead_ms": overhead_ms,
                    "paired_overhead_ms": paired,
                    "loadavg_start": load_start,
                    "loadavg_end": load_end,
                    "load1_per_pair": loads,
                    "breakdown": rows,
                    "runs": infos,
                    "reference_ms": refs,
                    "host": platform.node(),
                    "cpus": os.cpu_count(),
                    "python": sys.executable,
                },
                indent=1,
            )
        )
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
