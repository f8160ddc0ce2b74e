"""What one ``jt.log(step=i, loss=x)`` costs the training loop, against the usual alternatives.

    .venv/bin/python bench/log_cost.py [--batches 200] [--calls 1000] [--json PATH]

Times ``jt.log`` (in a run: JT_RUN_DIR points at a temp dir, so events really reach disk),
``SummaryWriter.add_scalar`` (tensorboard) and ``print(..., file=f)`` in the same process,
interleaved batch by batch (in a fresh random order each round) so all of them see the
same machine noise. ``jt.log`` is timed
three times: with the rank's heartbeat and its system sampler on (the flusher thread
rewrites ``events/rank-0.beat`` at most once a second and samples the process's CPU, memory,
disk and GPU figures every ``--system-interval`` seconds, 0.5 here against 5 by default),
with the heartbeat off (``runtime._beat_on = False`` for that batch only) and with the
sampler off (its interval 0 for that batch only). Each batch times ``--calls`` calls with ``perf_counter_ns``; the table gives the
median and p99 of the per-call batch means. The flusher thread's own cost (encoding and
writing, off the caller's thread) and the cost of one heartbeat write are measured
separately at the end.
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
from collections.abc import Callable
from pathlib import Path

TARGET_NS = 2000  # median per call of jt.log must stay at or under 2 µs
TARGET_BEAT_RATIO = 1.10  # jt.log with the heartbeat on, against the same with it off
TARGET_SAMPLER_RATIO = 1.02  # jt.log with the system sampler on, against it off
TARGET_SAMPLER_CORE = 0.01  # the sampler's own CPU, a share of one core at the default interval
SAMPLE_EVERY = 0.5  # seconds between two samples while the bench runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def make_cases(tmp: Path, calls: int) -> dict[str, Callable[[float], int]]:
    from torch.utils.tensorboard import SummaryWriter

    from jupyter_trainer import runtime as jt

    if not jt.in_run:
        raise SystemExit("JT_RUN_DIR must be set before the runtime is imported")
    writer = SummaryWriter(log_dir=str(tmp / "tb"))
    text = open(tmp / "print.txt", "w")
    now = time.perf_counter_ns
    log, add_scalar = jt.log, writer.add_scalar

    # One function per case, the same loop shape in each; returns ns for ``calls`` calls.
    def empty(x: float) -> int:
        t0 = now()
        for _ in range(calls):
            pass
        return now() - t0

    def jt_log(x: float) -> int:
        t0 = now()
        for i in range(calls):
            log(step=i, loss=x)
        return now() - t0

    def with_heartbeat(on: bool) -> Callable[[float], int]:
        def case(x: float) -> int:
            jt._beat_on = on
            try:
                return jt_log(x)
            finally:
                jt._beat_on = True

        return case

    from jupyter_trainer.rankside.observe import system

    system._sampler = sampler = system.Sampler(os.getpid(), 0, SAMPLE_EVERY)

    def sampler_off(x: float) -> int:
        sampler.every = 0.0
        try:
            return jt_log(x)
        finally:
            sampler.every = SAMPLE_EVERY

    def tensorboard(x: float) -> int:
        t0 = now()
        for i in range(calls):
            add_scalar("loss", x, i)
        return now() - t0

    def print_file(x: float) -> int:
        t0 = now()
        for i in range(calls):
            print(f"{i} {x}", file=text)
        return now() - t0

    return {
        "empty loop": empty,
        "jt.log": with_heartbeat(True),
        "jt.log, heartbeat off": with_heartbeat(False),
        "jt.log, sampler off": sampler_off,
        "tensorboard add_scalar": tensorboard,
        "print to file": print_file,
    }


def shuffle(names: list[str], seed: int) -> list[str]:
    import random

    return random.Random(seed).sample(names, len(names))


def flusher_cost(events: int) -> float:
    """ns per event the background thread spends encoding and writing (not on the caller)."""
    from jupyter_trainer import runtime as jt

    jt.flush()
    for i in range(events):
        jt.log(step=i, loss=0.5)
    t0 = time.perf_counter_ns()
    jt.flush()
    return (time.perf_counter_ns() - t0) / events


def heartbeat_cost(writes: int) -> float:
    """Median ns of one heartbeat write (the flusher thread makes at most one a second)."""
    from jupyter_trainer import runtime as jt

    times = []
    for _ in range(writes):
        jt._beat_last = 0.0
        t0 = time.perf_counter_ns()
        jt._beat()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times)


def sampler_cost(samples: int) -> float:
    """Median ns of one system sample of this process (what the flusher thread does every
    ``--system-interval`` seconds), with whatever GPU reader this machine has."""
    from jupyter_trainer.rankside.observe import system

    sampler = system.Sampler(os.getpid(), 0, 5.0)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter_ns()
        sampler.sample(time.time())
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--calls", type=int, default=1000, help="calls per timed batch")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="jt-bench-") as d:
        tmp = Path(d)
        os.environ["JT_RUN_DIR"] = str(tmp / "run")
        cases = make_cases(tmp, args.calls)
        samples: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for name in names:  # warm up (the first jt.log starts the flusher thread)
            cases[name](0.5)
        for b in range(args.batches):
            x = 1.0 / (b + 1)
            # a fresh order each round: in a fixed cyclic order each case would always follow
            # the same one (TensorBoard's writer thread still flushing, say)
            for name in shuffle(names, b):
                samples[name].append(cases[name](x) / args.calls)
        beat_written = (tmp / "run" / "events" / "rank-0.beat").exists()  # by the flusher
        bg = flusher_cost(100_000)
        beat_ns = heartbeat_cost(200)
        sample_ns = sampler_cost(200)
        sampled = sum(
            1 for line in open(tmp / "run" / "events" / "rank-0.jsonl") if '"system"' in line
        )
        events_file = tmp / "run" / "events" / "rank-0.jsonl"
        with open(events_file) as f:
            lines = sum(1 for _ in f)

    rows = {
        name: {"median_ns": statistics.median(v), "p99_ns": percentile(v, 99)}
        for name, v in samples.items()
    }
    jt_med = rows["jt.log"]["median_ns"]
    ratios = {
        "jt/print": jt_med / rows["print to file"]["median_ns"],
        "jt/tensorboard": jt_med / rows["tensorboard add_scalar"]["median_ns"],
        "heartbeat on/off": jt_med / rows["jt.log, heartbeat off"]["median_ns"],
        "sampler on/off": jt_med / rows["jt.log, sampler off"]["median_ns"],
    }
    # the same ratios batch by batch: a batch and its partner ran in the same round, a few
    # milliseconds apart, so the machine's drift between rounds cancels out
    paired = {
        name: statistics.median(a / b for a, b in zip(samples["jt.log"], samples[other]))
        for name, other in (
            ("heartbeat on/off", "jt.log, heartbeat off"),
            ("sampler on/off", "jt.log, sampler off"),
        )
    }
    beat_met = paired["heartbeat on/off"] <= TARGET_BEAT_RATIO
    sampler_met = paired["sampler on/off"] <= TARGET_SAMPLER_RATIO
    core = sample_ns / 1e9 / 5.0  # a share of one core at the default interval of 5 s
    core_met = core <= TARGET_SAMPLER_CORE
    result = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "loadavg": os.getloadavg(),
        "batches": args.batches,
        "calls_per_batch": args.calls,
        "rows": rows,
        "ratios": ratios,
        "paired_ratios": paired,
        "flusher_ns_per_event": bg,
        "events_written": lines,
        "heartbeat_write_ns": beat_ns,
        "heartbeat_file_written": beat_written,
        "sampler_ns_per_sample": sample_ns,
        "sampler_core_share_default_interval": core,
        "system_samples_written": sampled,
        "target_ns": TARGET_NS,
        "target_beat_ratio": TARGET_BEAT_RATIO,
        "target_ns_met": jt_med <= TARGET_NS,
        "target_beat_ratio_met": beat_met,
        "target_sampler_ratio": TARGET_SAMPLER_RATIO,
        "target_sampler_ratio_met": sampler_met,
        "target_sampler_core_met": core_met,
        "target_met": jt_med <= TARGET_NS and beat_met and sampler_met and core_met,
    }

    print(
        f"per-call cost, {args.batches} batches x {args.calls} calls "
        f"(Python {result['python']}, {result['machine']}, "
        f"load average {result['loadavg'][0]:.2f})"
    )
    print(f"{'case':<24}{'median ns':>12}{'p99 ns':>12}")
    for name, row in rows.items():
        print(f"{name:<24}{row['median_ns']:>12.0f}{row['p99_ns']:>12.0f}")
    print(
        f"ratios (median): jt/print = {ratios['jt/print']:.2f}, "
        f"jt/tensorboard = {ratios['jt/tensorboard']:.3f}"
    )
    print(
        f"flusher thread: {bg:.0f} ns per event encoded and written, off the caller's thread "
        f"({lines} events written)"
    )
    print(
        f"heartbeat: {beat_ns:.0f} ns per write of rank-0.beat, at most one a second on the "
        f"flusher thread (file written: {beat_written})"
    )
    verdict = "PASS" if result["target_ns_met"] else "FAIL"
    print(f"target: jt.log median {jt_med / 1000:.2f} us <= {TARGET_NS / 1000:.0f} us: {verdict}")
    verdict = "PASS" if beat_met else "FAIL"
    print(
        f"target: heartbeat on/off = {paired['heartbeat on/off']:.3f} (batch by batch; "
        f"{ratios['heartbeat on/off']:.3f} of the medians) <= {TARGET_BEAT_RATIO:.2f}: {verdict}"
    )
    print(
        f"system sampler: {sample_ns / 1e6:.2f} ms per sample ({sampled} samples written while "
        f"timing, one every {SAMPLE_EVERY:g} s); {100 * core:.3f} % of a core at the default 5 s"
    )
    verdict = "PASS" if sampler_met else "FAIL"
    print(
        f"target: sampler on/off = {paired['sampler on/off']:.3f} (batch by batch; "
        f"{ratios['sampler on/off']:.3f} of the medians) <= {TARGET_SAMPLER_RATIO:.2f}: {verdict}"
    )
    verdict = "PASS" if core_met else "FAIL"
    print(
        f"target: sampler's own CPU {100 * core:.3f} % <= {100 * TARGET_SAMPLER_CORE:g} %: {verdict}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
