"""Plain-text monitoring: throttled progress lines and an end-of-run summary."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from ..follow import RunFollower, elapsed, finite_range

STAGES = ("preparing", "queued", "running", "finalizing")


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def fmt_value(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.4e}"


class RateMeter:
    """Progress rate and ETA from the first and latest progress reports."""

    def __init__(self) -> None:
        self.first: tuple[float, float] | None = None

    def estimate(self, done: float, total: float | None, t: float) -> tuple[float | None, float | None]:
        if self.first is None or done < self.first[0]:
            self.first = (done, t)
            return None, None
        d0, t0 = self.first
        if t <= t0 or done <= d0:
            return None, None
        rate = (done - d0) / (t - t0)
        eta = (total - done) / rate if total else None
        return rate, eta


def progress_line(follower: RunFollower, meter: RateMeter | None = None, now: float | None = None) -> str:
    state = follower.state
    parts = [f"[{follower.run_id}] {state.get('status', '?')} {fmt_duration(elapsed(state, now))}"]
    queue = state.get("queue") or {}
    if state.get("status") == "queued" and queue.get("reason"):
        parts.append(f"job {queue.get('job_id')} waiting: {queue['reason']}")
    prog = follower.overall_progress()
    if prog is not None:
        text = f"step {prog.done:g}"
        if prog.total:
            text += f"/{prog.total:g} ({100 * prog.done / prog.total:.0f}%)"
        if meter is not None:
            rate, eta = meter.estimate(prog.done, prog.total, prog.t)
            if rate:
                text += f" {rate:.3g}/s"
            if eta is not None:
                text += f" ETA {fmt_duration(eta)}"
        parts.append(text)
    latest = follower.latest()
    if latest:
        parts.append(" ".join(f"{k}={fmt_value(v)}" for k, v in latest.items()))
    return " | ".join(parts)


def stage_durations(state: dict[str, Any]) -> list[tuple[str, float]]:
    out = []
    for name in STAGES:
        stage = state.get("stages", {}).get(name)
        if stage:
            out.append((name, (stage.get("end") or state.get("ended") or time.time()) - stage["start"]))
    return out


def metric_table(follower: RunFollower) -> list[tuple[str, float, float, float]]:
    """(metric, final, min, max) of rank 0 (or the lowest rank that logged it)."""
    rows = []
    for name, by_rank in follower.series.items():
        series = by_rank[0] if 0 in by_rank else by_rank[min(by_rank)]
        if len(series):
            rows.append((name, series.last, *finite_range(series.values)))
    return rows


def summary_text(follower: RunFollower, spec: Any = None, outputs: Any = None,
                 traceback: bool = True) -> str:
    state = follower.state
    lines = [f"run {follower.run_id} {state.get('status')} in {fmt_duration(elapsed(state))}"
             + (" (" + ", ".join(f"{n} {d:.1f}s" for n, d in stage_durations(state)) + ")"
                if state.get("stages") else "")]
    if spec is not None:
        lines.append(f"target {spec.target.name} · {spec.launch.launcher} · "
                     f"{spec.launch.nodes}×{spec.launch.procs} procs · "
                     f"{state.get('backend', spec.launch.backend or 'auto')}")
    if state.get("environment"):
        lines.append(environment_line(state["environment"]))
    if spec is not None and source_line(spec):
        lines.append(source_line(spec))
    job = (state.get("launcher") or {}).get("job_id")
    if job:
        scheduler = state.get("scheduler") or {}
        lines.append(f"slurm job {job}" + (f": {scheduler['state']}" if scheduler.get("state") else ""))
    rows = metric_table(follower)
    if rows:
        width = max(len("metric"), *(len(r[0]) for r in rows))
        lines.append(f"{'metric':<{width}}  {'final':>10}  {'min':>10}  {'max':>10}")
        lines += [f"{n:<{width}}  {fmt_value(f):>10}  {fmt_value(lo):>10}  {fmt_value(hi):>10}"
                  for n, f, lo, hi in rows]
    for name, by_rank in sorted(follower.texts.items()):
        lines.append(f"{name} (text, not charted): " + ", ".join(
            f"rank {r} {v!r}" for r, v in sorted(by_rank.items())))
    if state.get("status") in ("failed", "lost"):
        rank = state.get("failed_rank")
        lines.append(("rank %s failed first: " % rank if rank is not None else "error: ")
                     + str(state.get("error", "")))
        if traceback and state.get("traceback"):
            lines.append(traceback_tail(state["traceback"]))
    if state.get("status") == "canceled":
        lines.append(f"canceled: {state.get('reason', '')}")
    snapshot = state.get("snapshot") or {}
    if snapshot.get("intact") is False:
        lines.append("the run changed its code snapshot: " + ", ".join(snapshot.get("changed", {})))
    if outputs is not None:
        files = sorted(p.name for p in outputs.iterdir()) if outputs.is_dir() else []
        lines.append(f"outputs: {outputs}" + (f" ({', '.join(files[:10])})" if files else " (empty)"))
    return "\n".join(lines)


def source_line(spec: Any) -> str | None:
    """What ``--source`` took and left out as secrets (None without ``--source``)."""
    from ..capture.snapshot import source_summary  # lazy: pathspec only when shown

    return source_summary(spec.code)


def environment_line(env: dict[str, Any]) -> str:
    """Which environment a run used, and whether its submission built it or reused it."""
    if env.get("name"):
        line = f"env {env['name']}@{env.get('version')}"
        if env.get("built"):
            secs = env.get("build_seconds")
            line += f" (built in {secs:.1f}s)" if secs is not None else " (built)"
        else:
            line += " (reused)"
    else:
        line = "env: the kernel's Python"
    if env.get("python_version"):
        line += f" · python {env['python_version']}"
    if env.get("torch"):
        line += f" · torch {env['torch']}"
    differences = (env.get("preflight") or {}).get("differences") or []
    return line + "".join(f"\n  differs from the notebook: {d}" for d in differences)


def traceback_tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


class TextMonitor:
    """Follows a run to its end, printing at most one progress line every ``interval`` s."""

    def __init__(self, run: Any, out: TextIO | None = None, interval: float = 5.0,
                 poll: float = 0.25) -> None:
        self.run = run
        self.out = out or sys.stdout
        self.interval = interval
        self.poll = poll
        self.follower = run.follower()
        self.meter = RateMeter()

    def follow(self, timeout: float | None = None) -> RunFollower:
        last = -float("inf")
        for follower in self.follower.follow(self.poll, timeout):
            prog = follower.overall_progress()
            if prog is not None:
                self.meter.estimate(prog.done, prog.total, prog.t)
            now = time.monotonic()
            if now - last >= self.interval and not follower.finished:
                print(progress_line(follower, self.meter), file=self.out, flush=True)
                last = now
        return self.follower

    def summary(self, traceback: bool = True) -> str:
        return summary_text(self.follower, self.run.spec, self.run.outputs, traceback)


def runs_table(rows: list[dict[str, Any]]) -> str:
    """A text table of index rows (``Store.list_runs``), newest first."""
    if not rows:
        return "no runs yet"
    header = ("RUN", "STATUS", "TARGET", "LAUNCHER", "PROCS", "CREATED")
    body = [(r["id"], r["status"], r["target"], r["launcher"], f"{r['nodes']}x{r['procs']}",
             time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created"]))) for r in rows]
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
                     for row in [header, *body])


def targets_table(targets: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, config in sorted(targets.items()):
        extra = ", ".join(f"{k}={v}" for k, v in config.items() if k != "kind")
        lines.append(f"{name:<16} {config.get('kind', '?'):<8} {extra}".rstrip())
    return "\n".join(lines)
