"""Slurm: time from submit to the first event, jt against sbatch plus polling by hand.

    .venv/bin/python bench/slurm_first_event.py [--pairs N] [--interval S] [--json PATH]

Starts its own single-host Slurm (slurmctld + slurmd, auth none; tests/support/slurm_cluster.py)
on ports of its own (``--port-base``, four ports), so it can run beside the test suite, and
times, interleaved after one untimed warm-up of each, a job that starts at once:

  jt:   jt.submit(CODE, target="cluster", launcher="python", home=HOME), where CODE logs
        one event (jt.log + jt.flush); the clock stops when the event line is readable
        through the run store, ``Store(HOME).read_events(run_id, 0)``. One run store and one
        process for every sample, as in a notebook: from the second run on, ``submit`` finds
        the supervisor it kept waiting. ``--cold`` turns that off (JT_SPARE_SUPERVISOR=0), so
        every sample starts its supervisor as the first run of a kernel does.
  hand: sbatch --parsable --wrap "python -c '<append a JSON line to FILE>'", then a loop
        that polls squeue for the job (until it is seen running) and reads FILE; the clock
        stops when the line is there.

Both use the same interpreter and read their file every ``--interval`` (default 20 ms).
Between samples the bench waits, untimed, for the run's supervisor to exit and the queue to
empty, then sleeps a random 0..``--jitter`` s (default 1 s): the test cluster's scheduler
starts jobs on a one-second tick, and without the jitter each side would land at a fixed
phase of it, which would bias the comparison.

Slurm's own timestamps (slurmctld.log: job submitted, job allocated) split each sample into
Slurm's scheduling wait and the rest; the rest is where jt and the hand loop differ.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.slurm_cluster import start_cluster  # noqa: E402

import jupyter_trainer as jt  # noqa: E402
from jupyter_trainer.rankside.host import procs  # noqa: E402
from jupyter_trainer.store import Store  # noqa: E402
from jupyter_trainer.supervisor import starter  # noqa: E402

CODE = "from jupyter_trainer import runtime as jt\njt.log(step=0, x=1)\njt.flush()\n"
HAND = (
    "import json, time\n"
    "with open({path!r}, 'a') as fh:\n"
    "    fh.write(json.dumps({{'t': time.time(), 'step': 0, 'x': 1}}) + '\\n')\n"
)
TARGETS = '[targets.cluster]\nkind = "slurm"\npartition = "debug"\ntime = "10:00"\n'
SAMPLE_TIMEOUT_S = 60.0
LOG_LINE = re.compile(
    r"^\[([0-9T:.-]+)\] (?:_slurm_rpc_submit_batch_job: JobId=(\d+)|"
    r"sched(?:/backfill)?: (?:Allocate|_start_job: Started) JobId=(\d+))"
)


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def slurm_times(log: Path) -> dict[str, dict[str, float]]:
    """Per job id: when slurmctld accepted it and when it allocated it (epoch seconds)."""
    out: dict[str, dict[str, float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = LOG_LINE.match(line)
        if not m:
            continue
        at = datetime.fromisoformat(m.group(1)).timestamp()  # local time, like time.time()
        if m.group(2):
            out.setdefault(m.group(2), {})["submitted"] = at
        else:
            out.setdefault(m.group(3), {}).setdefault("allocated", at)
    return out


def ticks_to_wall(ticks: int | None) -> float | None:
    """A process start time in clock ticks since boot (``procs.start_ticks``), as epoch
    seconds (10 ms resolution)."""
    if ticks is None:
        return None
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def wait_queue_empty(env: dict[str, str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not subprocess.run(
            ["squeue", "-h"], env=env, capture_output=True, text=True
        ).stdout.strip():
            return
        time.sleep(0.05)
    sys.exit("the Slurm queue did not empty within 60 s")


def run_jt(work: Path, i: int, interval: float, env: dict[str, str]) -> dict[str, Any]:
    home = work / "jt-home"
    if not home.exists():
        home.mkdir()
        (home / "targets.toml").write_text(TARGETS)
    store = Store(home)
    waiting = starter._spare is not None and starter._spare.fits(str(home), "cluster")
    wall0 = time.time()
    t0 = time.perf_counter()
    run = jt.submit(CODE, target="cluster", launcher="python", home=home, name=f"first-event-{i}")
    t_submitted = time.perf_counter()
    while True:
        events, _ = store.read_events(run.id, 0)
        if events:
            break
        if time.perf_counter() - t0 > SAMPLE_TIMEOUT_S:
            sys.exit(
                f"jt run {run.id}: no event after {SAMPLE_TIMEOUT_S:.0f} s; state "
                f"{json.dumps(run.state)[:2000]}"
            )
        time.sleep(interval)
    elapsed = time.perf_counter() - t0
    # Untimed from here: let the run end and its supervisor exit before the next sample.
    run.wait(timeout=120, raise_on_failure=False)
    state = run.state
    if state["status"] != "completed":
        sys.exit(
            f"jt run {run.id} ended {state['status']!r}: {state.get('error')}\n"
            f"{state.get('traceback') or ''}"
        )
    sup = state.get("supervisor", {})
    deadline = time.monotonic() + 30
    while (
        sup.get("pid")
        and procs.is_alive(sup["pid"], sup.get("start_ticks"))
        and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    wait_queue_empty(env)
    ranks = store.rank_records(run.id)
    stages = state.get("stages", {})
    return {
        "elapsed_s": elapsed,
        "job_id": state["launcher"]["job_id"],
        "run_id": run.id,
        "waiting_supervisor": waiting,
        "wall": {
            "start": wall0,
            "submit_returned": wall0 + (t_submitted - t0),
            "supervisor_forked": ticks_to_wall(sup.get("start_ticks")),
            "preparing": stages.get("preparing", {}).get("start"),
            "sbatch_called": stages.get("queued", {}).get("start"),
            "process_started": ranks.get(0, {}).get("started"),
            "event_written": events[0].get("t"),
            "seen": wall0 + elapsed,
        },
    }


def run_hand(work: Path, i: int, interval: float, env: dict[str, str]) -> dict[str, Any]:
    path = work / f"hand-{i}.jsonl"
    code = HAND.format(path=str(path))
    wrap = f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"
    wall0 = time.time()
    t0 = time.perf_counter()
    done = subprocess.run(
        ["sbatch", "--parsable", f"--job-name=hand-{i}", "--output=/dev/null", "--wrap", wrap],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"sbatch failed: {done.stderr}")
    job = done.stdout.strip().split(";")[0]
    t_sbatch = time.perf_counter()
    running_seen = None
    while True:
        if running_seen is None:
            state = subprocess.run(
                ["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True
            ).stdout.strip()
            if state not in ("PENDING", "CONFIGURING"):  # RUNNING, COMPLETING, or gone
                running_seen = time.perf_counter()
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        if b"\n" in data:
            break
        if time.perf_counter() - t0 > SAMPLE_TIMEOUT_S:
            sys.exit(f"hand job {job}: no line after {SAMPLE_TIMEOUT_S:.0f} s")
        time.sleep(interval)
    elapsed = time.perf_counter() - t0
    line = json.loads(data.split(b"\n")[0])
    wait_queue_empty(env)
    return {
        "elapsed_s": elapsed,
        "job_id": job,
        "wall": {
            "start": wall0,
            "sbatch_returned": wall0 + (t_sbatch - t0),
            "running_seen": wall0 + (running_seen - t0) if running_seen else None,
            "event_written": line["t"],
            "seen": wall0 + elapsed,
        },
    }


def describe(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def median_ms(samples: list[dict[str, Any]], a: str, b: str) -> float | None:
    vals = [
        (s["wall"][b] - s["wall"][a]) * 1e3
        for s in samples
        if s["wall"].get(a) is not None and s["wall"].get(b) is not None
    ]
    return statistics.median(vals) if vals else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=8, help="timed (jt, hand) pairs (default 8)")
    parser.add_argument(
        "--interval",
        type=float,
        default=0.02,
        help="seconds between reads of the event file, both sides (default 0.02)",
    )
    parser.add_argument(
        "--port-base",
        type=int,
        default=32000,
        help="first of the four ports of the bench's Slurm (default 32000)",
    )
    parser.add_argument(
        "--accounting",
        action="store_true",
        help="run the cluster with slurmdbd + MariaDB (sacct answers)",
    )
    parser.add_argument(
        "--jitter",
        type=float,
        default=1.0,
        help="random untimed pause before each sample, up to this (default 1 s)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the jitter (default 1)")
    parser.add_argument("--json", type=Path, help="also write every sample and table here")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="keep no supervisor waiting between runs (each is a first run)",
    )
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    if args.cold:
        os.environ[starter.SPARE_ENV] = "0"

    work = Path(tempfile.mkdtemp(prefix="jt-bench-slurm-"))
    load_start = loadavg()
    print(
        f"# {platform.node()}  cpus={os.cpu_count()}  python={platform.python_version()}  "
        f"interval={args.interval * 1e3:.0f} ms  jitter={args.jitter:g} s  cold={args.cold}  "
        f"loadavg at start={load_start}",
        flush=True,
    )
    t = time.monotonic()
    cluster = start_cluster(
        work / "slurm", 90, port_base=args.port_base, accounting=args.accounting
    )
    print(f"Slurm up in {time.monotonic() - t:.1f} s ({cluster.conf})", flush=True)
    os.environ["SLURM_CONF"] = str(cluster.conf)  # the supervisors inherit it
    env = cluster.env
    rng = random.Random(args.seed)

    def pause() -> None:
        time.sleep(rng.uniform(0, args.jitter))

    jts: list[dict[str, Any]] = []
    hands: list[dict[str, Any]] = []
    try:
        w_jt = run_jt(work, 0, args.interval, env)["elapsed_s"]
        w_hand = run_hand(work, 0, args.interval, env)["elapsed_s"]
        print(f"warm-up: jt {w_jt:.3f} s  hand {w_hand:.3f} s", flush=True)
        for i in range(1, args.pairs + 1):
            pause()
            jts.append(run_jt(work, i, args.interval, env))
            pause()
            hands.append(run_hand(work, i, args.interval, env))
            print(
                f"pair {i}/{args.pairs}: jt {jts[-1]['elapsed_s']:.3f} s  "
                f"hand {hands[-1]['elapsed_s']:.3f} s",
                flush=True,
            )
        times = slurm_times(cluster.root / "slurmctld.log")
    finally:
        cluster.stop()
    load_end = loadavg()
    for s in jts + hands:  # Slurm's own view of each job
        s["wall"].update(times.get(s["job_id"], {}))
        s["slurm_wait_s"] = (
            s["wall"]["allocated"] - s["wall"]["submitted"]
            if "allocated" in s["wall"] and "submitted" in s["wall"]
            else None
        )
    shutil.rmtree(work, ignore_errors=True)

    sj = describe([s["elapsed_s"] for s in jts])
    sh = describe([s["elapsed_s"] for s in hands])
    ratio = sj["median"] / sh["median"]
    diff_ms = (sj["median"] - sh["median"]) * 1e3
    paired = statistics.median((a["elapsed_s"] - b["elapsed_s"]) * 1e3 for a, b in zip(jts, hands))
    # Each sample less Slurm's scheduling wait (submitted -> allocated, from slurmctld.log).
    timed_j = [s for s in jts if s["slurm_wait_s"] is not None]
    timed_h = [s for s in hands if s["slurm_wait_s"] is not None]
    ex_j = describe([s["elapsed_s"] - s["slurm_wait_s"] for s in timed_j])
    ex_h = describe([s["elapsed_s"] - s["slurm_wait_s"] for s in timed_h])
    wait_j = describe([s["slurm_wait_s"] for s in timed_j])
    wait_h = describe([s["slurm_wait_s"] for s in timed_h])

    print()
    print(f"Submit -> first event readable, {args.pairs} interleaved pairs (ms)")
    print(f"{'':40}{'median':>9}{'min':>9}{'max':>9}")
    rows = [
        ("jt.submit -> Store.read_events", sj),
        ("sbatch + squeue/file polling", sh),
        ("  Slurm scheduling wait, jt jobs", wait_j),
        ("  Slurm scheduling wait, hand jobs", wait_h),
        ("jt, less Slurm's wait", ex_j),
        ("hand, less Slurm's wait", ex_h),
    ]
    for label, s in rows:
        print(f"{label:40}{s['median'] * 1e3:9.0f}{s['min'] * 1e3:9.0f}{s['max'] * 1e3:9.0f}")
    print(
        f"ratio of medians jt/hand = {ratio:.2f}; difference of medians = {diff_ms:.0f} ms; "
        f"median paired difference = {paired:.0f} ms"
    )
    print(
        f"less Slurm's wait: ratio {ex_j['median'] / ex_h['median']:.2f}, difference "
        f"{(ex_j['median'] - ex_h['median']) * 1e3:.0f} ms"
    )

    steps_jt = [
        ("start", "submit_returned", "submit() returns (capture, store, supervisor spawned)"),
        ("start", "supervisor_forked", "supervisor detached (forked, 10 ms ticks)"),
        ("start", "preparing", "supervisor set up, run preparing"),
        ("start", "sbatch_called", "supervisor about to call sbatch"),
        ("start", "submitted", "slurmctld accepted the job"),
        ("submitted", "allocated", "Slurm scheduling wait"),
        ("allocated", "process_started", "allocated -> rank in boot.py (batch + srun)"),
        ("process_started", "event_written", "boot.py -> jt.log"),
        ("event_written", "seen", "event written -> read by the poller"),
    ]
    steps_hand = [
        ("start", "submitted", "slurmctld accepted the job"),
        ("start", "sbatch_returned", "sbatch returned"),
        ("submitted", "allocated", "Slurm scheduling wait"),
        ("allocated", "event_written", "allocated -> python wrote the line"),
        ("event_written", "seen", "line written -> read by the poller"),
    ]
    breakdown = {}
    for name, samples, steps in (("jt", jts, steps_jt), ("hand", hands, steps_hand)):
        print(f"\nWhere the time goes, {name} (median ms over {len(samples)} samples)")
        breakdown[name] = []
        for a, b, label in steps:
            ms = median_ms(samples, a, b)
            breakdown[name].append({"from": a, "to": b, "label": label, "median_ms": ms})
            print(f"  {label:56}{ms:8.0f}" if ms is not None else f"  {label:56}{'-':>8}")
    print(f"\nloadavg start {load_start} end {load_end}")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "pairs": args.pairs,
                    "interval_s": args.interval,
                    "accounting": args.accounting,
                    "jitter_s": args.jitter,
                    "seed": args.seed,
                    "warmup_s": {"jt": w_jt, "hand": w_hand},
                    "jt": sj,
                    "hand": sh,
                    "ratio": ratio,
                    "difference_ms": diff_ms,
                    "paired_difference_ms": paired,
                    "less_slurm_wait": {"jt": ex_j, "hand": ex_h},
                    "slurm_wait": {"jt": wait_j, "hand": wait_h},
                    "breakdown": breakdown,
                    "samples": {"jt": jts, "hand": hands},
                    "loadavg_start": load_start,
                    "loadavg_end": load_end,
                    "host": platform.node(),
                    "cpus": os.cpu_count(),
                    "python": sys.executable,
                },
                indent=1,
            )
        )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
