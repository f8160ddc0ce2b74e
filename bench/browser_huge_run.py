"""How long a huge run's history blocks the browser page that shows it.

    .venv/bin/python bench/browser_huge_run.py [--repeats N] [--points N] [--log-mb N] [--json PATH]

A real ``jupyter lab`` and headless Chromium (as in ``tests/frontends/browser/test_browser.py``). Each round
opens a notebook with ``%train attach RUN`` for two finished 2-rank runs, in a fresh random
order: the huge one (``--points`` per metric and rank, ``--log-mb`` MB of logs) and the
anchor, a small run of 1,000 points and 2 MB of logs. A ``PerformanceObserver`` collects the
page's long tasks (over 50 ms) from the moment the widget shows the run until both charts
hold every point and the log shows its last line.

Per run it prints the median over the rounds of: the longest task, the total blocked time
(the part of each long task over 50 ms, as Lighthouse counts it), the number of long tasks,
and the time until the history was complete; and, for scale, the longest task of the
notebook page's own loading before the widget showed the run. The ratios huge / anchor are what the bench
is for: they say what a million points costs the page over a run of ordinary size, on the
same machine in the same session.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

OBSERVER = """
window.__longTasks = [];
new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__longTasks.push([e.startTime, e.duration]);
}).observe({ type: 'longtask', buffered: true });"""
COMPLETE = """n => {
    const counts = [...document.querySelectorAll('[data-testid=jt-chart]')].map(c => c.dataset.count);
    const lines = [...document.querySelectorAll('[data-testid=jt-log-line]')].slice(-2);
    return counts.length === 2 && counts.every(c => c === String(2 * n))
        && lines.some(l => l.textContent.includes('rank 1 done'));
}"""


def measure(page, lab, run_id: str, points: int, name: str) -> dict:
    from support.browser_page import TIMEOUT_MS

    lab.write_notebook(name, ["%load_ext jupyter_trainer", f"%train attach {run_id}"])
    page.open(name)
    page.run_all()
    page.page.wait_for_selector(
        "[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)", timeout=TIMEOUT_MS
    )
    since = page.page.evaluate("performance.now()")
    page.page.wait_for_function(COMPLETE, arg=points, timeout=300_000, polling=50)
    done = page.page.evaluate("performance.now()")
    every = page.page.evaluate("window.__longTasks")
    tasks = [d for start, d in every if start >= since]
    page.page.close()
    return {
        "longest_ms": max(tasks, default=0.0),
        "blocked_ms": sum(d - 50 for d in tasks),
        "long_tasks": len(tasks),
        "complete_ms": done - since,
        "page_load_longest_ms": max((d for start, d in every if start < since), default=0.0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--log-mb", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from support.browser_page import open_browser
    from support.huge_run import huge_run

    from jupyter_trainer.store import HOME_ENV

    results: dict[str, list[dict]] = {"huge": [], "anchor": []}
    with tempfile.TemporaryDirectory(prefix="jt-bench-browser-") as tmp:
        home = Path(tmp) / "jt-home"
        os.environ[HOME_ENV] = str(home)
        runs = {
            "huge": (huge_run(args.points, args.log_mb).id, args.points),
            "anchor": (huge_run(1_000, 2).id, 1_000),
        }
        with open_browser(home, "bench-huge-run", "jupyterlab") as (lab, page):
            context = page.page.context
            context.add_init_script(OBSERVER)
            for k in range(args.repeats):
                for which in random.sample(list(runs), len(runs)):
                    page.page = context.new_page()
                    run_id, points = runs[which]
                    started = time.monotonic()
                    figures = measure(page, lab, run_id, points, f"{which}-{k}.ipynb")
                    results[which].append(figures)
                    print(
                        f"round {k + 1} {which:6}: longest {figures['longest_ms']:6.0f} ms, "
                        f"blocked {figures['blocked_ms']:7.0f} ms in {figures['long_tasks']:3} "
                        f"tasks, complete in {figures['complete_ms'] / 1000:5.1f} s "
                        f"(wall {time.monotonic() - started:5.1f} s)",
                        flush=True,
                    )
            page.errors.clear()

    medians = {
        which: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for which, rows in results.items()
    }
    print(f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'median':24} {'huge':>10} {'anchor':>10} {'ratio':>8}")
    for key in ("longest_ms", "blocked_ms", "long_tasks", "complete_ms", "page_load_longest_ms"):
        huge, anchor = medians["huge"][key], medians["anchor"][key]
        ratio = f"{huge / anchor:8.2f}" if anchor else "       -"
        print(f"{key:24} {huge:10.0f} {anchor:10.0f} {ratio}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": results, "medians": medians}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
