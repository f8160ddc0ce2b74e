"""Incremental reading of a run's events: what every reader (API, monitors, CLI) builds on.

A ``RunFollower`` keeps a byte offset per rank and reads only what was appended since the
last ``poll()``, so following a live run costs the new bytes, not the whole history. A
chunk of event lines is decoded with one ``json.loads`` call (a line that does not parse
sends that chunk through the line-by-line path, which skips it), which is what keeps a
follower ahead of ranks that log hundreds of thousands of points a second.

``LogTail`` follows one rank's log the same way but keeps only a bounded tail, read from
the end of the file, and ``minmax_indices``/``downsample`` reduce a long series to a few
thousand points for display while keeping its first, last, minimum and maximum points.
"""

from __future__ import annotations

import json
import math
import os
import time
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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
    """One metric of one rank: parallel arrays of step (NaN when not given), value, time."""

    steps: array[float] = field(default_factory=lambda: array("d"))
    values: array[float] = field(default_factory=lambda: array("d"))
    times: array[float] = field(default_factory=lambda: array("d"))

    def append(self, step: Any, value: float, t: float) -> None:
        self.steps.append(float(step) if isinstance(step, (int, float)) else math.nan)
        self.values.append(value)
        self.times.append(t)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def last(self) -> float:
        return self.values[-1]


@dataclass
class Progress:
    done: float
    total: float | None
    t: float


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
        self.system: dict[str, dict[int, Series]] = {}  # rankside/system.py's samples
        self.progress: dict[int, Progress] = {}
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
        progress = None
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
                progress = event
            elif event.get("kind") == "tag" and type(values) is dict:
                self.code_tags.update((str(k), str(v)) for k, v in values.items())
            elif event.get("kind") == "system" and type(values) is dict:
                self._ingest_system(rank, event.get("t", 0.0), values)
        if progress is not None:
            self.progress[rank] = Progress(
                progress.get("done", 0), progress.get("total"), progress.get("t", 0.0)
            )
        return count

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
        return series.steps.append, series.values.append, series.times.append

    @property
    def finished(self) -> bool:
        return self.state.get("status") in TERMINAL

    def overall_progress(self) -> Progress | None:
        """The least advanced rank's progress: the run is as far along as its slowest rank."""
        if not self.progress:
            return None
        return min(self.progress.values(), key=lambda p: (p.done / p.total) if p.total else p.done)

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


def points(
    series: Mapping[str, Mapping[int, Series]], rank: int | None, origin: float | None = None
) -> dict[str, list[tuple[float | None, float]]]:
    """Each name's (x, value) points of ``rank``; ``rank=None``: the mean across the ranks,
    point by point. x is the point's step (None where none was given), or with ``origin``
    its time in seconds since then."""

    def x(s: Series, i: int) -> float | None:
        if origin is not None:
            return round(s.times[i] - origin, 3)
        return None if s.steps[i] != s.steps[i] else s.steps[i]

    out: dict[str, list[tuple[float | None, float]]] = {}
    for name, by_rank in series.items():
        if rank is not None:
            if rank in by_rank:
                s = by_rank[rank]
                out[name] = [(x(s, i), s.values[i]) for i in range(len(s))]
            continue
        length = min(len(s) for s in by_rank.values())
        first = next(iter(by_rank.values()))
        out[name] = [
            (x(first, i), sum(s.values[i] for s in by_rank.values()) / len(by_rank))
            for i in range(length)
        ]
    return out


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
    """The index-aligned mean over ranks (ranks log the same steps in data-parallel runs)."""
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
    return out


# -- logs: a bounded tail ------------------------------------------------------------------


class LogTail:
    """The last lines of one growing log file, read from its end.

    A first poll reads at most ``max_bytes`` from the end of the file; later polls read what
    was appended, and if more than ``max_bytes`` arrived since, they skip to the end again
    (``skipped`` counts the bytes never read). A line longer than ``max_line`` characters is
    cut. Memory and time per poll are bounded whatever the size of the log.
    """

    def __init__(
        self, path: Path, max_lines: int = 2000, max_bytes: int = 256 << 10, max_line: int = 4000
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_line = max_line
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.offset = 0
        self.skipped = 0
        self.starts: list[int] = []  # byte offset in the file of each line the last poll returned
        self._partial = b""

    def poll(self) -> list[str]:
        """New complete lines since the last poll (also appended to ``lines``)."""
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # truncated or replaced: start over
            self.offset, self._partial = 0, b""
        if size == self.offset:
            self.starts = []
            return []
        start = self.offset
        cut = size - start > self.max_bytes
        if cut:
            start = size - self.max_bytes
            self.skipped += start - self.offset
            self._partial = b""
        with open(self.path, "rb") as fh:
            fh.seek(start)
            data = fh.read(size - start)
        self.offset = start + len(data)
        base = start - len(self._partial)
        if cut:
            first = data.find(b"\n")
            data = data[first + 1 :] if first >= 0 else b""
            base = start + first + 1
        data = self._partial + data
        end = data.rfind(b"\n") + 1
        self._partial = data[end:]
        if len(self._partial) > self.max_line * 4:  # a line with no end in sight: show it cut
            data, end, self._partial = data + b"\n", len(data) + 1, b""
        raw = data[:end].split(b"\n")[:-1]
        starts, at = [], base
        for line in raw:
            starts.append(at)
            at += len(line) + 1
        new = [self._clip(line.decode(errors="replace")) for line in raw]
        if self.lines.maxlen and len(new) > self.lines.maxlen:
            new, starts = new[-self.lines.maxlen :], starts[-self.lines.maxlen :]
        self.starts = starts
        self.lines.extend(new)
        return new

    def _clip(self, line: str) -> str:
        line = line.rstrip("\r")
        if "\r" in line:  # progress bars redraw a line with \r: keep what the terminal shows
            line = line.rsplit("\r", 1)[-1]
        return line if len(line) <= self.max_line else line[: self.max_line] + " …[cut]"


class LogTimes:
    """When each line of one rank's log was written, from the rank's ``rank-<r>.times``
    marks ("<log size> <unix time>", written before the output they precede; see the
    runtime's ``_LogMarks``). A line gets the time of the last mark at or before its offset;
    a log without marks (an older run) gets 0 for every line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.sizes: list[int] = []
        self.times: list[float] = []

    def at(self, starts: Sequence[int]) -> list[float]:
        """Times of the lines that start at ``starts`` (byte offsets, ascending)."""
        self._read()
        out = []
        for start in starts:
            i = bisect_right(self.sizes, start) - 1
            out.append(self.times[i] if i >= 0 else (self.times[0] if self.times else 0.0))
        return out

    def _read(self) -> None:
        try:
            data, self.offset = read_complete_lines(self.path, self.offset, None)
        except FileNotFoundError:
            return
        for line in data.split(b"\n"):
            size, _, when = line.partition(b" ")
            try:
                size_i, when_f = int(size), float(when)
            except ValueError:
                continue
            if not self.sizes or size_i >= self.sizes[-1]:
                self.sizes.append(size_i)
                self.times.append(when_f)
