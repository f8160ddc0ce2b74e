"""Plain-text monitoring: throttled progress lines and an end-of-run summary."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ...core.errors import TrainerError
from ...core.printable import printable, terminal_safe
from ...core.units import fmt_duration, fmt_seconds, fmt_value
from ...store.follow import RunFollower, elapsed, finite_range
from ...store.metric_points import current_series
from ...store.outputs import list_files
from .collectives_text import run_collectives, verdict_line, worth_showing
from .cost import cost_words, run_cost
from .health import attempt_label, attempts_of, debugging_of, stalled_of, watch_settings
from .health_text import HealthNotes, debugging_line, health_summary
from .preemption_text import preemption_lines
from .queue_text import waiting_words
from .rankstats import RankStat, rank_summary, ranks_label
from .rate import progress_figures
from .staging import StagingNotes, inputs_line
from .system_text import system_rows
from .system_view import input_bound

STAGES = ("preparing", "queued", "running", "finalizing")


def progress_line(follower: RunFollower, now: float | None = None, spec: Any = None) -> str:
    """One line: status, elapsed, the attempt (with restarts), progress, stalled ranks, metrics."""
    state = follower.state
    parts = [f"[{follower.run_id}] {state.get('status', '?')} {fmt_duration(elapsed(state, now))}"]
    attempt = attempt_label(attempts_of(state), watch_settings(spec)["max_restarts"])
    if attempt:
        parts.append(attempt)
    queue = state.get("queue") or {}
    if state.get("status") == "queued" and queue.get("reason"):
        parts.append(waiting_words(queue, now or time.time()))
    figures = progress_figures(follower, now)
    if figures is not None:
        parts.append(figures.words())
    eta = figures.eta if figures is not None else None
    cost = run_cost(spec, state, now or time.time(), eta) if spec is not None else None
    if cost is not None:
        parts.append(cost_words(cost))
    stalled = stalled_of(state, now or time.time())
    if stalled and state.get("status") == "running":
        parts.append(
            "stalled: "
            + ", ".join(f"rank {e['rank']} {fmt_seconds(e['seconds'] or 0)}" for e in stalled[:4])
            + (f" and {len(stalled) - 4} more" if len(stalled) > 4 else "")
        )
    debugging = [str(e["rank"]) for e in debugging_of(state)]
    if debugging:
        parts.append(f"debugging: rank {', '.join(debugging)} (jupyter-trainer debug RUN)")
    ranks = sorted({rank for by_rank in follower.series.values() for rank in by_rank})
    latest = follower.latest(0 if 0 in ranks else ranks[0]) if ranks else {}
    if latest:  # one rank's values, named when there are others
        parts.append(
            (f"rank {0 if 0 in ranks else ranks[0]}: " if len(ranks) > 1 else "")
            + " ".join(f"{printable(k)}={fmt_value(v)}" for k, v in latest.items())
        )
    return " | ".join(parts)


def stage_durations(state: Mapping[str, Any]) -> list[tuple[str, float]]:
    out = []
    for name in STAGES:
        stage = state.get("stages", {}).get(name)
        if stage:
            out.append(
                (name, (stage.get("end") or state.get("ended") or time.time()) - stage["start"])
            )
    return out


def metric_rows(follower: RunFollower) -> list[tuple[str, str, str, str, str]]:
    """(metric, ranks, final, min, max) over every rank that logged the metric, each figure
    naming its rank when several ranks logged it: ``0.406 (rank 1)``; after a restart, of
    the points later attempts left standing, as ``metrics()`` gives them."""
    rows = []
    for name, by_rank in current_series(follower).items():
        stats = []
        for rank, series in sorted(by_rank.items()):
            if len(series):
                stats.append(
                    RankStat(rank, series.last, *finite_range(series.values), len(series), 0)
                )
        if stats:
            rows.append((printable(name), *summary_cells(rank_summary(stats))))
    return rows


def summary_cells(summary: dict[str, Any]) -> tuple[str, str, str, str]:
    """(ranks, final, min, max) of a ``rank_summary`` as the text summary writes them."""
    ranks = summary["ranks"]
    several = len(ranks) > 1
    label = ranks_label(ranks).split(" ", 1)[1]

    def value(v: Any, rank: Any) -> str:
        if v is None:
            return "-"
        return f"{fmt_value(v)} (rank {rank})" if several else fmt_value(v)

    last = summary["last"]
    if last["lo"] is None:
        final = []
    elif last["lo"] == last["hi"]:
        final = [
            fmt_value(last["lo"])
            + (
                " (all ranks)"
                if several and not last["non_finite"]
                else f" (rank {last['lo_rank']})"
                if several
                else ""
            )
        ]
    else:
        final = [f"{value(last['lo'], last['lo_rank'])} .. {value(last['hi'], last['hi_rank'])}"]
    final += [f"{v} (rank {r})" if several else v for r, v in last["non_finite"]]
    return (
        label,
        ", ".join(final) or "-",
        value(summary["min"], summary["min_rank"]),
        value(summary["max"], summary["max_rank"]),
    )


def launcher_label(spec: Any, state: Mapping[str, Any], why: bool = True) -> str:
    """The run's launcher as a reader should see it: ``torchrun, hot`` when the warm pool
    forked its ranks, and, when a hot run fell back to torchrun, that it did (and why)."""
    hot = (state.get("launcher") or {}).get("hot")
    if not isinstance(hot, dict):
        return spec.launch.launcher
    if hot.get("used"):
        return f"{spec.launch.launcher}, hot"
    reason = f": {hot['why']}" if why and hot.get("why") else ""
    return f"{spec.launch.launcher} (not hot{reason})"


def summary_text(
    follower: RunFollower, spec: Any = None, outputs: Any = None, traceback: bool = True
) -> str:
    state = follower.state
    lines = [
        f"run {follower.run_id} {state.get('status')} in {fmt_duration(elapsed(state))}"
        + (
            " (" + ", ".join(f"{n} {d:.1f}s" for n, d in stage_durations(state)) + ")"
            if state.get("stages")
            else ""
        )
    ]
    if spec is not None:
        lines.append(
            f"target {spec.target.name} · {launcher_label(spec, state)} · "
            f"{spec.launch.nodes}×{spec.launch.procs} procs · "
            f"{state.get('backend', spec.launch.backend or 'auto')}"
        )
    if state.get("environment"):
        lines.append(environment_line(state["environment"]))
    figures = None if follower.finished else progress_figures(follower)
    if figures is not None:
        lines.append(figures.words())
    eta = figures.eta if figures is not None else None
    cost = run_cost(spec, state, time.time(), eta) if spec is not None else None
    if cost is not None:
        lines.append(cost_words(cost))
    if spec is not None:
        lines += [extra for extra in (source_line(spec), inputs_line(spec)) if extra]
    tags = follower.tags
    if tags:
        lines.append(
            "tags: " + ", ".join(f"{printable(k)}={printable(v)}" for k, v in sorted(tags.items()))
        )
    job = (state.get("launcher") or {}).get("job_id")
    if job:
        scheduler = state.get("scheduler") or {}
        lines.append(
            f"slurm job {job}" + (f": {scheduler['state']}" if scheduler.get("state") else "")
        )
    queue = state.get("queue") or {}
    if state.get("status") == "queued" and queue.get("reason"):
        lines.append(waiting_words(queue, time.time()))
    lines += [debugging_line(entry, follower.run_id) for entry in debugging_of(state)]
    lines += preemption_lines(state)
    rows = metric_rows(follower)
    if rows:
        lines.append(columns(("metric", "ranks", "final", "min", "max"), rows))
    for name, by_rank in sorted(follower.texts.items()):
        lines.append(
            f"{printable(name)} (text, not charted): "
            + ", ".join(f"rank {r} {v!r}" for r, v in sorted(by_rank.items()))
        )
    header, hardware = system_rows(follower)
    if hardware:
        lines.append(columns(header, hardware))
        lines += input_bound(follower.system)
    if state.get("status") in ("failed", "lost"):
        rank = state.get("failed_rank")
        lines.append(
            ("rank %s failed first: " % rank if rank is not None else "error: ")
            + terminal_safe(str(state.get("error", "")))
        )
        if traceback and state.get("traceback"):
            lines.append(terminal_safe(traceback_tail(state["traceback"])))
            lines.append(f"each frame's variables: jupyter-trainer show {follower.run_id} --locals")
    if state.get("status") == "canceled":
        lines.append(f"canceled: {printable(str(state.get('reason', '')))}")
    lines += health_summary(state, spec, traceback)
    found = run_collectives(follower.store.paths(follower.run_id).root)  # docs/hangs.md
    if found is not None and worth_showing(found):
        lines.append(verdict_line(found))
    snapshot = state.get("snapshot") or {}
    if snapshot.get("intact") is False:
        lines.append("the run changed its code snapshot: " + ", ".join(snapshot.get("changed", {})))
    if outputs is not None:
        lines.append(outputs_line(outputs))
    return "\n".join(lines)


def outputs_line(outputs: Path, shown: int = 10) -> str:
    """The run's outputs folder and the first of its files, as ``files`` lists them (no
    FIFO, no link out of the folder), each name printable."""
    try:
        names = [printable(f.path) for f in list_files(outputs)]
    except TrainerError as exc:
        return f"outputs: {printable(str(outputs))} ({printable(str(exc))})"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    listed = f" ({', '.join(names[:shown])}{more})" if names else " (empty)"
    return f"outputs: {printable(str(outputs))}{listed}"


def source_line(spec: Any) -> str | None:
    """What ``--source`` took and left out as secrets (None without ``--source``)."""
    from ...capture.snapshot import source_summary  # lazy: pathspec only when shown

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


def traceback_tail(text: str | None, lines: int = 25) -> str:
    return "\n".join((text or "").rstrip().splitlines()[-lines:])


class TextMonitor:
    """Follows a run to its end, printing at most one progress line every ``interval`` s."""

    def __init__(
        self, run: Any, out: TextIO | None = None, interval: float = 5.0, poll: float = 0.25
    ) -> None:
        self.run = run
        self.out = out or sys.stdout
        self.interval = interval
        self.poll = poll
        self.follower = run.follower()
        self.notes = HealthNotes(run.spec, run.id)
        self.staging = StagingNotes()
        self._last_line = -float("inf")

    def follow(self, timeout: float | None = None) -> RunFollower:
        """Print progress lines, and at once a line for each restart, stalled rank and
        first NaN/inf, until the run ends (or ``timeout``)."""
        for follower in self.follower.follow(self.poll, timeout):
            now_s = time.time()
            for line in [
                *self.staging.news(follower.state, now_s),
                *self.notes.news(follower.state, now_s),
            ]:
                print(line, file=self.out, flush=True)
            now = time.monotonic()
            if now - self._last_line >= self.interval and not follower.finished:
                print(progress_line(follower, spec=self.run.spec), file=self.out, flush=True)
                self._last_line = now
        return self.follower

    def summary(self, traceback: bool = True) -> str:
        return summary_text(self.follower, self.run.spec, self.run.outputs, traceback)


def runs_table(rows: list[dict[str, Any]]) -> str:
    """A text table of index rows (``Store.list_runs``), newest first."""
    if not rows:
        return "no runs yet"
    header = ("RUN", "STATUS", "OWNER", "TARGET", "LAUNCHER", "PROCS", "CREATED")
    body = [
        (
            r["id"],
            r["status"],
            owner_cell(r),
            r["target"],
            r["launcher"],
            f"{r['nodes']}x{r['procs']}",
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created"])),
        )
        for r in rows
    ]
    return columns(header, body)


def owner_cell(row: Mapping[str, Any]) -> str:
    """An index row's owner as shown: the Hub user where there is one, else the Unix user."""
    return str(row.get("hub_user") or row.get("owner") or "?")


def columns(header: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    """Rows of cells as left-aligned text columns, two spaces apart."""
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *body]
    )


def targets_table(targets: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, config in sorted(targets.items()):
        extra = ", ".join(f"{k}={v}" for k, v in config.items() if k != "kind")
        lines.append(f"{name:<16} {config.get('kind', '?'):<8} {extra}".rstrip())
    return "\n".join(lines)


def frames_text(frames: Sequence[Mapping[str, Any]]) -> str:
    """A failure's frames (``Run.frames``) as lines: each frame's place, then its variables."""
    lines = []
    for frame in frames:
        lines.append(
            f'File "{printable(str(frame.get("file")))}", line {frame.get("line")}, '
            f"in {printable(str(frame.get('function')))}"
        )
        for name, text in (frame.get("locals") or {}).items():
            lines.append(f"    {printable(str(name))} = {printable(str(text))}")
        if frame.get("locals_left_out"):
            lines.append(f"    ... {frame['locals_left_out']} more")
    return "\n".join(lines)
