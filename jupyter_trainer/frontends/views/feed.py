"""What the run monitor widget shows, computed from the run store (no widget code here).

A ``RunFeed`` follows one run through a ``RunFollower`` (metrics, progress, state) and one
``LogTail`` per rank, and turns what it has read into small JSON-able payloads: the header,
the stage timeline, progress with rate and ETA, a summary of every metric, the charts the
viewer asked for (downsampled, as float64 byte buffers) and log lines as deltas. It is
driven by one thread (the widget's feeder), so nothing here locks.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from ...core.errors import TrainerError
from ...store.follow import (
    Series,
    as_floats,
    count_non_finite,
    finite_range,
    mean_across_ranks,
    minmax_indices,
)
from ...store.log_tail import LogTail, LogTimes
from ...store.metric_points import CurrentView
from .collectives_text import collectives_payload
from .cost import run_cost
from .health import health_payload
from .rankstats import RankStat, rank_summary
from .rate import progress_figures
from .staging import inputs_line, staging_rows, staging_text
from .text import (
    frames_text,
    launcher_label,
    progress_line,
    source_line,
    summary_text,
    traceback_tail,
)

STAGES = ("preparing", "queued", "running", "finalizing")
MAX_SERIES_POINTS = 1000  # per series on a chart: ~2 per pixel of a wide chart
CHART_POINT_BUDGET = 8_000  # per update, over every series shown (16 bytes a point)
MIN_SERIES_POINTS = 200
MAX_RANK_SERIES = 8  # per-rank view: the first ranks; the mean covers them all
DEFAULT_CHARTS = 4
LOG_LINES = 2000  # per rank and for the "all ranks" view
LOG_BYTES = 256 << 10  # read from the end of each rank's log per poll, at most
LOG_UPDATE_BYTES = 48 << 10  # log text in one update, at most (the newest lines win)


def json_number(value: float) -> float | str:
    """``value`` as JSON can carry it: NaN and ±inf as the text "nan", "inf", "-inf"."""
    return value if math.isfinite(value) else repr(value)


class RunFeed:
    """Incremental view of one run for the monitor widget."""

    def __init__(self, run: Any, *, log_lines: int = LOG_LINES, log_bytes: int = LOG_BYTES) -> None:
        self.run = run
        self.follower = run.follower()
        self.current = CurrentView(self.follower)  # the points later attempts left standing
        self.log_lines = log_lines
        self.log_bytes = log_bytes
        self.tails: dict[int, LogTail] = {}
        self.times: dict[int, LogTimes] = {}
        self.rank_logs: dict[int, deque[str]] = {}
        self.rank_totals: dict[int, int] = {}
        self.all_logs: deque[tuple[int, str]] = deque(maxlen=log_lines)
        self.all_total = 0
        self.data_version = 0  # bumped when new metric events arrive
        self._stats: dict[tuple[str, int], tuple[int, float, float, int]] = {}
        self._means: dict[str, tuple[tuple[int, ...], int, float, float, int]] = {}
        self._mean_last: dict[str, float] = {}
        self._generation = self.current.generation
        self._state_key: Any = None

    # -- reading -----------------------------------------------------------------------
    def poll(self, max_bytes: int | None = 4 << 20) -> dict[str, bool]:
        """Read what is new; says which parts changed (state, data, logs)."""
        if self.follower.poll(max_bytes):
            self.data_version += 1
            data = True
        else:
            data = False
        state = self.follower.state
        key = (state.get("status"), state.get("updated"), bool(state.get("environment")))
        state_changed = key != self._state_key
        self._state_key = key
        return {"state": state_changed, "data": data, "logs": self._poll_logs()}

    @property
    def behind(self) -> bool:
        return self.follower.behind

    @property
    def finished(self) -> bool:
        return self.follower.finished

    def _poll_logs(self) -> bool:
        """New lines of every rank; those of the all-ranks view in the order they were
        written (by the ranks' log times), so a history read at once interleaves too."""
        paths = self.run.store.paths(self.run.id)
        fresh: list[tuple[float, int, int, str]] = []
        for rank in self.run.store.ranks(self.run.id):
            tail = self.tails.get(rank)
            if tail is None:
                tail = self.tails[rank] = LogTail(
                    paths.log_file(rank), self.log_lines, self.log_bytes
                )
                self.times[rank] = LogTimes(paths.log_file(rank).with_suffix(".times"))
                self.rank_logs[rank] = deque(maxlen=self.log_lines)
                self.rank_totals[rank] = 0
            new = tail.poll()
            if new:
                self.rank_logs[rank].extend(new)
                self.rank_totals[rank] += len(new)
                times = self.times[rank].at(tail.starts)
                fresh.extend(
                    (when, rank, i, line) for i, (when, line) in enumerate(zip(times, new))
                )
        if all(
            item[0] > 0 for item in fresh
        ):  # a log without times (an older run) keeps rank order
            fresh.sort(key=lambda item: item[:3])
        self.all_logs.extend((rank, line) for _, rank, _, line in fresh)
        self.all_total += len(fresh)
        return bool(fresh)

    # -- payloads ----------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        spec, state = self.run.spec, self.follower.state or self.run.state
        env = state.get("environment") or {}
        environment = {
            "name": env.get("name") or spec.env.name or "kernel",
            "version": env.get("version") or spec.env.version,
            "built": env.get("built"),
            "build_seconds": env.get("build_seconds"),
            "python": env.get("python") or spec.env.python,
            "python_version": env.get("python_version"),
            "torch": env.get("torch"),
        }
        if spec.env.prepared and environment["built"] is None:
            environment["built"] = spec.env.prepared.get("built")
            environment["build_seconds"] = spec.env.prepared.get("build_seconds")
        return {
            "run_id": self.run.id,
            "name": spec.name,
            "target": spec.target.name,
            "launcher": launcher_label(spec, state, why=False),
            "nodes": spec.launch.nodes,
            "procs": spec.launch.procs,
            "backend": state.get("backend") or spec.launch.backend or "auto",
            "environment": environment,
            "params": dict(spec.params),
            "created": state.get("created"),
            "notebook": spec.origin.get("notebook"),
            "source": source_line(spec),
            "data": inputs_line(spec),
            "owner": self.run.owner,
            "read_only": self.run.read_only(),
        }

    def state_payload(self) -> dict[str, Any]:
        """Status, stages, failure, and the run's restarts, stalled ranks (``seconds``
        counted to now while it runs) and first NaN/inf values (``monitor.health``)."""
        state = self.follower.state
        now = time.time()
        stages = []
        for name in STAGES:
            stage = state.get("stages", {}).get(name)
            if stage:
                stages.append(
                    {
                        "name": name,
                        "start": stage.get("start"),
                        "end": stage.get("end") or state.get("ended"),
                    }
                )
        out = {
            "status": state.get("status", "created"),
            "now": now,
            "created": state.get("created"),
            "ended": state.get("ended"),
            "stages": stages,
            "failed_rank": state.get("failed_rank"),
            "error": state.get("error"),
            "reason": state.get("reason"),
            "cost": self.cost(now),
            **health_payload(state, self.run.spec, now),
            "collectives": collectives_payload(getattr(self.run, "path", None)),  # hangs.md
            "staging": [dict(row, text=staging_text(row)) for row in staging_rows(state)],
        }
        if state.get("traceback"):
            out["traceback"] = traceback_tail(state["traceback"], 60)
            if self.finished:
                out["frames"] = self.frames()
        if self.finished:
            out["outputs"] = self.outputs_listing()
        return out

    def frames(self) -> str | None:
        """The failing rank's frames and variables as text (``show RUN --locals``), read
        once the run has ended."""
        if not hasattr(self, "_frames"):
            try:
                self._frames = frames_text(self.run.frames()) or None
            except (OSError, ValueError, TrainerError):
                self._frames = None
        return self._frames

    def cost(self, now: float) -> dict[str, Any] | None:
        """The cost meter (views/cost.py), projected to the end by the progress's ETA."""
        figures = progress_figures(self.follower, now)
        eta = figures.eta if figures is not None else None
        return run_cost(self.run.spec, self.follower.state, now, eta)

    def outputs_listing(self, limit: int = 50) -> dict[str, Any]:
        """The run's ``outputs/`` once it ended: its folder and the first ``limit`` files
        (relative paths and sizes), for the view to list."""
        root = self.run.outputs
        files: list[dict[str, Any]] = []
        if root.is_dir():
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                if len(files) == limit:
                    break
                files.append(
                    {"path": path.relative_to(root).as_posix(), "bytes": path.stat().st_size}
                )
        if not files and self.run.spec.storage:  # none here: those in the run's storage
            if not hasattr(self, "_stored"):  # asked once: storage is a network away
                try:
                    found = self.run.files()[:limit]
                except (OSError, TrainerError):
                    found = []
                self._stored = [{"path": f.path, "bytes": f.size} for f in found]
            return {
                "folder": f"{self.run.spec.storage}/{self.run.id}/outputs",
                "files": self._stored,
            }
        return {"folder": str(root), "files": files}

    def progress_payload(self) -> dict[str, Any]:
        """``views.rate``'s figures: the rate of the current attempt's recent reports,
        with ``stalled`` seconds instead of a rate and an ETA while none comes."""
        figures = progress_figures(self.follower)
        return {} if figures is None else figures.payload()

    def _series_stats(self, name: str, rank: int, series: Series) -> tuple[int, float, float, int]:
        """(count, min, max, non-finite count) of one series, updated from the points added
        since last time; min and max are of the finite values."""
        import numpy as np

        n = len(series)
        seen, lo, hi, bad = self._stats.get((name, rank), (0, math.inf, -math.inf, 0))
        if n > seen:
            new = as_floats(series.values)[seen:n]
            finite = new[np.isfinite(new)]
            if len(finite):
                lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
            bad += len(new) - len(finite)
            del new, finite
            self._stats[(name, rank)] = (n, lo, hi, bad)
        if lo > hi:  # no finite value yet
            lo = hi = math.nan
        return n, lo, hi, bad

    def _by_rank(self, name: str) -> dict[int, Series]:
        """``name``'s series of each rank as later attempts left them; when a restarted rank
        went back to an earlier step, the figures kept of what it had logged start over."""
        if self._generation != self.follower.rewound:
            self._generation = self.follower.rewound
            self._stats.clear()
            self._means.clear()
            self._mean_last.clear()
        return self.current.by_rank(name)

    def metrics_payload(self) -> list[dict[str, Any]]:
        """Every metric with its exact last, min and max over all the ranks that logged it,
        each with its rank (``monitor.rankstats``), and, when several ranks logged it, of
        their mean (``mean``): what the chips show in either chart mode."""
        out = []
        for name in list(self.follower.series):
            by_rank = self._by_rank(name)
            stats = []
            for rank, series in sorted(by_rank.items()):
                if len(series):
                    count, lo, hi, bad = self._series_stats(name, rank, series)
                    stats.append(RankStat(rank, series.last, lo, hi, count, bad))
            if not stats:
                continue
            series = by_rank[stats[0].rank]
            step = series.steps[-1]
            summary = rank_summary(stats)  # JSON as it is: no NaN among its numbers
            out.append(
                {
                    "name": name,
                    "step": None if step != step else step,
                    **summary,
                    "mean": self._mean_stats(name, by_rank) if len(stats) > 1 else None,
                }
            )
        return out

    def _mean_stats(self, name: str, by_rank: dict[int, Series]) -> dict[str, Any]:
        """The last, min and max of the ranks' index-aligned mean (what the Mean charts
        draw), updated from the points every rank has added since last time."""
        import numpy as np

        ranks = tuple(sorted(by_rank))
        length = min(len(by_rank[r]) for r in ranks)
        seen_ranks, seen, lo, hi, bad = self._means.get(name, (ranks, 0, math.inf, -math.inf, 0))
        if seen_ranks != ranks:  # a rank joined: start over
            seen, lo, hi, bad = 0, math.inf, -math.inf, 0
        if length > seen:
            total = np.zeros(length - seen)
            for r in ranks:
                total += as_floats(by_rank[r].values)[seen:length]
            mean = total / len(ranks)
            finite = mean[np.isfinite(mean)]
            if len(finite):
                lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
            bad += len(mean) - len(finite)
            self._means[name] = (ranks, length, lo, hi, bad)
            self._mean_last[name] = float(mean[-1])
        last = self._mean_last.get(name, math.nan)
        return {
            "ranks": list(ranks),
            "last": json_number(last),
            "min": json_number(lo) if lo <= hi else None,
            "max": json_number(hi) if lo <= hi else None,
            "count": length,
            "non_finite": bad,
        }

    def texts_payload(self) -> dict[str, dict[str, str]]:
        """Text metrics (``jt.log(phase="train")``), not charted: the last value per rank."""
        return {
            name: {str(rank): value[:200] for rank, value in sorted(by_rank.items())}
            for name, by_rank in sorted(self.follower.texts.items())
        }

    def chart_payload(self, options: dict[str, Any]) -> dict[str, Any]:
        """Downsampled series of the metrics chosen in ``options`` (x, agg, selected): of
        each rank (or their mean), the points later attempts left standing, as ``metrics()``
        gives them, with ``attempts``: [index of its first point in x and y, attempt] of
        each attempt's run of points, in order (``[[0, 0]]`` for a run never restarted)."""
        import numpy as np

        x_axis = "time" if options.get("x") == "time" else "step"
        agg = "mean" if options.get("agg") == "mean" else "ranks"
        names = list(self.follower.series)
        chosen = options.get("selected")
        if not isinstance(chosen, list):
            chosen = names[:DEFAULT_CHARTS]
        chosen = [n for n in chosen if n in self.follower.series]
        t0 = self.follower.state.get("created") or 0.0
        plans: list[tuple[str, str, int | None, Series]] = []
        for name in chosen:
            by_rank = self._by_rank(name)
            if agg == "mean" and len(by_rank) > 1:
                plans.append(
                    (name, f"mean of {len(by_rank)} ranks", None, mean_across_ranks(by_rank))
                )
            else:
                for r in sorted(by_rank)[:MAX_RANK_SERIES]:
                    plans.append((name, f"rank {r}", r, by_rank[r]))
        per_series = max(
            MIN_SERIES_POINTS, min(MAX_SERIES_POINTS, CHART_POINT_BUDGET // max(1, len(plans)))
        )
        charts: dict[str, Any] = {}
        for name, label, rank, series in plans:
            n = len(series)
            if not n:
                continue
            idx = minmax_indices(series.values, per_series)
            breaks = [i for i, _ in series.starts if 0 < i < n]
            if breaks:  # each attempt's first and last points, so its line ends where it did
                idx = np.union1d(idx, np.array(breaks + [i - 1 for i in breaks], dtype=np.intp))
            xs = as_floats(series.times if x_axis == "time" else series.steps)[idx]
            ys = as_floats(series.values)[idx]
            if x_axis == "time":
                xs = xs - t0
            elif np.isnan(xs).any():  # steps not given: use the point's index
                xs = np.where(np.isnan(xs), idx.astype(np.float64), xs)
            if rank is None:
                lo, hi = finite_range(ys)  # the mean is recomputed each time
                bad = count_non_finite(series.values)
            else:
                _, lo, hi, bad = self._series_stats(name, rank, series)
            chart = charts.setdefault(
                name, {"series": [], "ranks": len(self.follower.series[name])}
            )
            chart["series"].append(
                {
                    "label": label,
                    "rank": rank,
                    "count": n,
                    "points": len(ys),
                    "last": json_number(series.last),
                    "min": json_number(lo),
                    "max": json_number(hi),
                    "non_finite": bad,
                    "attempts": [
                        [int(np.searchsorted(idx, start)), attempt]
                        for start, _, attempt in series.segments()
                    ],
                    "x": np.ascontiguousarray(xs, dtype="<f8").tobytes(),
                    "y": np.ascontiguousarray(ys, dtype="<f8").tobytes(),
                }
            )
        return {
            "x": x_axis,
            "agg": agg,
            "selected": chosen,
            "charts": charts,
            "version": self.data_version,
        }

    def log_payload(
        self, selection: str, sent: int, gen: int, reset: bool = False
    ) -> tuple[dict[str, Any] | None, int]:
        """Lines of ``selection`` ("all" or a rank) after the ``sent`` first; (payload, total)."""
        lines: Sequence[str | tuple[int, str]]
        if selection == "all":
            lines, total = self.all_logs, self.all_total
            pairs = lambda items: [[r, text] for r, text in items]
        else:
            rank = int(selection) if selection.isdigit() else -1
            lines, total = self.rank_logs.get(rank, ()), self.rank_totals.get(rank, 0)
            pairs = lambda items: [[rank, text] for text in items]
        if not reset and total == sent:
            return None, total
        new = total - sent
        if reset or new > len(lines) or new < 0:
            reset, chunk = True, list(lines)
        else:
            chunk = list(lines)[len(lines) - new :] if new else []
        size = sum(len(item if isinstance(item, str) else item[1]) + 8 for item in chunk)
        if size > LOG_UPDATE_BYTES:  # more than anyone can read: show the newest lines
            reset, kept, size = True, [], 0
            for item in reversed(chunk):
                size += len(item if isinstance(item, str) else item[1]) + 8
                if size > LOG_UPDATE_BYTES:
                    break
                kept.append(item)
            chunk = kept[::-1]
        skipped = sum(t.skipped for t in self.tails.values())
        return {
            "gen": gen,
            "start": total - len(chunk),
            "end": total,
            "reset": reset,
            "selection": selection,
            "lines": pairs(chunk),
            "ranks": sorted(self.tails),
            "skipped_bytes": skipped,
            "max_lines": self.log_lines,
        }, total

    def text(self) -> str:
        """The plain-text form of what the widget shows now (the widget's text/plain)."""
        if self.finished:
            return summary_text(self.follower, self.run.spec, self.run.outputs)
        if not self.follower.state:
            return f"run {self.run.id}"
        return progress_line(self.follower, spec=self.run.spec)
