"""Incremental reading of a run's events: what every reader (API, monitors, CLI) builds on.

A ``RunFollower`` keeps a byte offset per rank and reads only what was appended since the
last ``poll()``, so following a live run costs the new bytes, not the whole history. It
notes which attempt (start of the run, restarts counted) wrote each point: ``Series.starts``
marks where each attempt's points begin and ``rewinds`` the first step each restarted
attempt logged, from which ``metric_points`` tells which earlier points it supersedes. A
chunk of event lines is decoded with one ``json.loads`` call (a line that does not parse
sends that chunk through the line-by-line path, which skips it), which is what keeps a
follower ahead of ranks that log hundreds of thousands of points a second.

``minmax_indices``/``downsample`` reduce a long series to a few thousand points for display
while keeping its first, last, minimum and maximum points. A rank's log is followed by
``log_tail``.
"""

from __future__ import annotations

import json
import math
import os
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ..core import bounded_json
from ..core.records import StateRecord
from . import TERMINAL, Store, read_complete_lines

if TYPE_CHECKING:  # numpy is imported where it is used: reading a run needs none of it
    import numpy as np
    import numpy.typing as npt

Floats: TypeAlias = "npt.NDArray[np.float64]"
Indices: TypeAlias = "npt.NDArray[np.intp]"
Values: TypeAlias = "Sequence[float] | npt.NDArray[np.float64]"  # a series' values, or a copy
# One series' appenders: step, value, time.
Appenders = tuple[Callable[[float], None], Callable[[float], None], Callable[[float], None]]

NON_FINITE = frozenset({"nan", "inf", "-inf"})  # runtime._number's JSON form of those floats
READ_CHUNK = 256 << 10  # bytes of event lines decoded per step: small batches die young,
# which keeps the cyclic GC from rescanning millions of just-decoded objects


@dataclass
class Series:
    """One metric of one rank: parallel arrays of step (NaN when not given), value, time;
    ``starts`` has (index, attempt) where an attempt's points begin, when that is not
    attempt 0's from the first point on."""

    steps: array[float] = field(default_factory=lambda: array("d"))
    values: array[float] = field(default_factory=lambda: array("d"))
    times: array[float] = field(default_factory=lambda: array("d"))
    starts: list[tuple[int, int]] = field(default_factory=list)

    def append(self, step: Any, value: float, t: float) -> None:
        self.steps.append(float(step) if isinstance(step, (int, float)) else math.nan)
        self.values.append(value)
        self.times.append(t)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def last(self) -> float:
        return self.values[-1]

    @property
    def attempt(self) -> int:
        """The attempt of the newest point (of the next one, before any)."""
        return self.starts[-1][1] if self.starts else 0

    def segments(self) -> list[tuple[int, int, int]]:
        """(start, end, attempt) of each attempt's run of points, in order."""
        starts = self.starts if self.starts and self.starts[0][0] == 0 else [(0, 0), *self.starts]
        ends = [i for i, _ in starts[1:]] + [len(self)]
        return [(i, end, a) for (i, a), end in zip(starts, ends) if end > i]


@dataclass
class Progress:
    """A rank's latest ``progress(done, total)`` report, with the attempt that made it."""

    done: float
    total: float | None
    t: float
    attempt: int = 0
    rank: int = 0


RECENT_REPORTS = 128  # progress reports kept per rank for the rate, at least THIN_S apart
THIN_S = 0.5


def decode_lines(data: bytes) -> list[Any]:
    """JSON values of the complete lines in ``data``; lines that do not parse, or nest
    deeper than any event does (``bounded_json``), are skipped."""
    if not data:
        return []
    try:
        found: list[Any] = json.loads(b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]")
        return found
    except (ValueError, RecursionError):  # a line nested deeper than the parser goes
        pass
    out = []
    for line in data.splitlines():
        try:
            out.append(bounded_json.loads(line))
        except ValueError:
            continue
    return out


class RunFollower:
    """Reads a run's events incrementally into per-rank metric series and progress."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.offsets: dict[int, int] = {}
        self.series: dict[str, dict[int, Series]] = {}
        self.texts: dict[str, dict[int, str]] = {}  # text metrics: the last value per rank
        self.code_tags: dict[str, str] = {}  # jt.tag(): every rank's, the last value wins
        self.system: dict[str, dict[int, Series]] = {}  # rankside/observe/system.py's samples
        self.progress: dict[int, Progress] = {}
        self.recent: dict[int, deque[Progress]] = {}  # each rank's reports in its attempt
        self.attempt_of: dict[int, int] = {}  # the attempt each rank's newest lines are of
        self.rewinds: dict[int, dict[int, float]] = {}  # rank -> {attempt: its first step}
        self.rewound = 0  # counts the rewinds noted: cached views of the series start over
        self._rewinding: set[int] = set()  # ranks whose new attempt has logged no step yet
        self.events_read = 0
        self.state: StateRecord = {}
        self.behind = False  # the last poll stopped at max_bytes with more left to read
        self._appenders: dict[int, dict[str, Appenders]] = {}

    def poll(self, max_bytes: int | None = None) -> bool:
        """Read what was appended since the last call; True if anything new arrived.

        ``max_bytes`` bounds how much of each rank's file one call reads (the rest is left
        for the next call and ``behind`` is set), so a reader catching up on a long history
        can publish what it has between steps.
        """
        # None: the state is damaged, and the supervisor that writes it again runs
        self.state = self.store.current_state(self.run_id) or self.state
        paths = self.store.paths(self.run_id)
        new, behind = 0, False
        for rank in self.store.ranks(self.run_id):
            path = paths.events_file(rank)
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                continue
            offset = self.offsets.setdefault(rank, 0)
            budget = max_bytes
            while offset < size:
                if budget is not None and budget <= 0:
                    behind = True
                    break
                step = READ_CHUNK if budget is None else min(READ_CHUNK, budget)
                data, new_offset = read_complete_lines(path, offset, step)
                if not data and step < READ_CHUNK and size - offset > step:
                    behind = True  # what is left of the budget holds no whole line
                    break
                if not data and size - offset > step:  # one line longer than a chunk
                    data, new_offset = read_complete_lines(path, offset, None)
                if not data:
                    break  # only a line still being written
                new += self._ingest_events(rank, decode_lines(data))
                offset = self.offsets[rank] = new_offset
                if budget is not None:
                    budget -= len(data)
        self.behind = behind
        self.events_read += new
        return new > 0

    def _ingest_events(self, rank: int, events: list[Any]) -> int:
        """Append a decoded chunk; written for speed (this loop is the follower's cost)."""
        appenders = self._appenders.setdefault(rank, {})
        lookup = appenders.get
        nan = math.nan
        reports: list[dict[str, Any]] = []
        rewinding = rank in self._rewinding
        count = 0
        for event in events:
            if type(event) is not dict:
                continue
            count += 1
            values = event.get("values")
            if values is not None and event.get("kind") == "metric":
                if type(values) is not dict:
                    continue
                step = event.get("step")
                if type(step) is not float:
                    step = float(step) if isinstance(step, (int, float)) else nan
                if rewinding and step == step:
                    self._rewind(rank, step)
                    rewinding = False
                t = event.get("t", 0.0)
                for name, value in values.items():
                    if type(value) is not float:
                        if type(value) is str and value in NON_FINITE:
                            value = float(value)  # the runtime writes NaN and ±inf as text
                        elif type(value) is not int:
                            if type(value) is str:  # not charted: its last value is shown
                                self.texts.setdefault(name, {})[rank] = value
                            continue
                        else:
                            value = float(value)
                    app = lookup(name)
                    if app is None:
                        app = appenders[name] = self._new_series(rank, name)
                    app[0](step)
                    app[1](value)
                    app[2](t)
            elif event.get("kind") == "progress":
                reports.append(event)
            elif event.get("kind") == "attempt" and type(event.get("attempt")) is int:
                self._note_reports(rank, reports)
                reports = []
                if event["attempt"] != self.attempt_of.get(rank, 0):
                    self.attempt_of[rank] = event["attempt"]
                    appenders.clear()  # each series notes where the attempt begins
                    rewinding = True
            elif event.get("kind") == "tag" and type(values) is dict:
                self.code_tags.update((str(k), str(v)) for k, v in values.items())
            elif event.get("kind") == "system" and type(values) is dict:
                self._ingest_system(rank, event.get("t", 0.0), values)
        self._note_reports(rank, reports)
        if rewinding:
            self._rewinding.add(rank)
        else:
            self._rewinding.discard(rank)
        return count

    def _rewind(self, rank: int, step: float) -> None:
        """Note ``step``, the first ``rank``'s current attempt logged, as where it went back to."""
        self.rewinds.setdefault(rank, {})[self.attempt_of.get(rank, 0)] = step
        self.rewound += 1

    def _note_reports(self, rank: int, reports: list[dict[str, Any]]) -> None:
        """Keep ``rank``'s newest progress report, and a thinned history of its attempt."""
        if not reports:
            return
        attempt = self.attempt_of.get(rank, 0)
        recent = self.recent.get(rank)
        if recent is None or (recent and recent[-1].attempt != attempt):
            recent = self.recent[rank] = deque(maxlen=RECENT_REPORTS)
        stride = max(1, len(reports) // RECENT_REPORTS)
        for event in reports[-1::-stride][::-1]:
            done, t = event.get("done", 0), event.get("t", 0.0)
            if not isinstance(done, (int, float)) or not isinstance(t, (int, float)):
                continue
            total = event.get("total")
            report = Progress(
                done, total if isinstance(total, (int, float)) else None, t, attempt, rank
            )
            if len(recent) > 1 and t - recent[-2].t < THIN_S:
                recent[-1] = report  # the newest report stays; the one it follows closely goes
            else:
                recent.append(report)
        if recent:
            self.progress[rank] = recent[-1]

    def _ingest_system(self, rank: int, t: Any, values: dict[str, Any]) -> None:
        if not isinstance(t, (int, float)):
            return
        for name, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                series = self.system.setdefault(str(name), {}).setdefault(rank, Series())
                series.append(None, float(value), float(t))

    @property
    def tags(self) -> dict[str, str]:
        """The run's tags: its code's (``jt.tag``), then those set from outside it."""
        return {**self.code_tags, **self.store.kept_tags(self.run_id)}

    def _new_series(self, rank: int, name: str) -> Appenders:
        series = self.series.setdefault(name, {}).setdefault(rank, Series())
        attempt = self.attempt_of.get(rank, 0)
        if series.attempt != attempt:
            series.starts.append((len(series), attempt))
        return series.steps.append, series.values.append, series.times.append

    @property
    def finished(self) -> bool:
        return self.state.get("status") in TERMINAL

    def overall_progress(self) -> Progress | None:
        """The least advanced rank's progress in the newest attempt: the run is as far
        along as its slowest rank (a rank not yet heard from in it is not counted)."""
        if not self.progress:
            return None
        newest = max(p.attempt for p in self.progress.values())
        return min(
            (p for p in self.progress.values() if p.attempt == newest),
            key=lambda p: (p.done / p.total) if p.total else p.done,
        )

    def latest(self, rank: int | None = None) -> dict[str, float]:
        """Each metric's newest value (of ``rank``, or rank 0 when present, else any rank)."""
        out = {}
        for name, by_rank in self.series.items():
            pick = rank if rank is not None else (0 if 0 in by_rank else min(by_rank))
            if pick in by_rank and len(by_rank[pick]):
                out[name] = by_rank[pick].last
        return out

    def follow(self, interval: float = 0.25, timeout: float | None = None) -> Iterator[RunFollower]:
        """Yield after each poll until the run ends (one final poll included)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.poll()
            yield self
            if self.finished:
                return
            if deadline is not None and time.monotonic() > deadline:
                return
            time.sleep(interval)


def as_floats(values: Values) -> Floats:
    """``values`` as a float64 numpy array; a series' ``array("d")`` is shared, not copied."""
    import numpy as np

    if isinstance(values, array):
        return np.frombuffer(values, dtype=np.float64)
    return np.asarray(values, dtype=np.float64)


def finite_range(values: Values) -> tuple[float, float]:
    """(min, max) of the finite values (NaN and ±inf are shown as such, not as extremes);
    (nan, nan) when there is none."""
    import numpy as np

    y = as_floats(values)
    y = y[np.isfinite(y)]
    return (float(y.min()), float(y.max())) if len(y) else (math.nan, math.nan)


def count_non_finite(values: Values) -> int:
    import numpy as np

    y = as_floats(values)
    return int(len(y) - np.isfinite(y).sum())


def elapsed(state: Mapping[str, Any], now: float | None = None) -> float:
    """Seconds from the run's creation to its end (or now)."""
    start = float(state.get("created", 0.0))
    end = float(state.get("ended") or (now or time.time()))
    return max(0.0, end - start)


# -- display helpers: downsampling ---------------------------------------------------------


def minmax_indices(values: Values, max_points: int) -> Indices:
    """Indices (sorted, numpy) of at most ``max_points`` points that draw like all of them.

    The series is cut into equal buckets and each keeps its minimum and maximum, in order;
    the first and last points are always kept. So the global minimum and maximum and the
    final value are exact, and a spike in a million points still shows on the chart.
    """
    import numpy as np

    n = len(values)
    if n <= max(max_points, 4):
        return np.arange(n)
    y = as_floats(values)
    buckets = max(1, (max_points - 2) // 2)
    size = -(-n // buckets)  # ceil
    full = n // size
    head = y[: full * size].reshape(full, size)
    base = np.arange(full) * size
    parts = [np.array([0, n - 1]), base + head.argmin(axis=1), base + head.argmax(axis=1)]
    if full * size < n:
        tail = y[full * size :]
        parts += [np.array([full * size + tail.argmin(), full * size + tail.argmax()])]
    del head, y
    return np.unique(np.concatenate(parts))


def downsample(xs: Values, ys: Values, max_points: int) -> tuple[Floats, Floats]:
    """(xs, ys) as float64 numpy arrays of at most ``max_points`` points (see minmax_indices)."""
    idx = minmax_indices(ys, max_points)
    x, y = as_floats(xs), as_floats(ys)
    return x[idx], y[idx]


def mean_across_ranks(by_rank: dict[int, Series]) -> Series:
    """The index-aligned mean over ranks (ranks log the same steps in data-parallel runs),
    with the first rank's steps, times and attempts."""
    import numpy as np

    ranks = sorted(by_rank)
    length = min(len(by_rank[r]) for r in ranks)
    first = by_rank[ranks[0]]
    total = np.zeros(length)
    for r in ranks:
        total += np.frombuffer(by_rank[r].values, dtype=np.float64)[:length]
    out = Series()
    out.values = array("d", (total / len(ranks)).tobytes())
    out.steps = array("d", first.steps[:length])
    out.times = array("d", first.times[:length])
    out.starts = [(i, attempt) for i, attempt in first.starts if i < length]
    return out
