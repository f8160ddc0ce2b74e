"""A run's metric points as readers get them after restarts: the current history, or every
point each attempt logged.

A rank started again after a failure goes back to its last checkpoint and logs the steps
after it once more. As TensorBoard does with the events of a run resumed from a checkpoint,
the later attempt supersedes what the earlier attempts of that rank logged from the first
step it logged on: a point of attempt ``a`` at step ``s`` is superseded when some later
attempt of the same rank began at a step at or below ``s``. A point without a step is never
superseded. The events files keep every point; ``points(..., attempts=True)`` gives them
all, each with its attempt.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .follow import Series

if TYPE_CHECKING:
    from .follow import Indices, RunFollower

Point = tuple[float | None, float]
AttemptPoint = tuple[float | None, float, int]


def kept_indices(series: Series, rewinds: Mapping[int, float] | None) -> Indices | None:
    """Indices of the points of ``series`` that no later attempt supersedes, given its
    rank's ``rewinds`` (attempt -> the first step that attempt logged); None: all of them."""
    if not rewinds:
        return None
    import numpy as np

    steps = np.frombuffer(series.steps, dtype=np.float64)
    keep = np.ones(len(series), dtype=bool)
    dropped = False
    for start, end, attempt in series.segments():
        later = [step for a, step in rewinds.items() if a > attempt]
        if later:
            part = steps[start:end]
            keep[start:end] = ~(part >= min(later))  # NaN steps compare False: kept
            dropped = dropped or not keep[start:end].all()
    return np.flatnonzero(keep) if dropped else None


def current(series: Series, rewinds: Mapping[int, float] | None) -> Series:
    """``series`` with the points later attempts supersede left out (itself when none is)."""
    idx = kept_indices(series, rewinds)
    if idx is None:
        return series
    import numpy as np

    out = Series()
    for name in ("steps", "values", "times"):
        taken = np.frombuffer(getattr(series, name), dtype=np.float64)[idx]
        setattr(out, name, array("d", taken.tobytes()))
    for start, end, attempt in series.segments():
        at = int(np.searchsorted(idx, start))
        if at < len(idx) and idx[at] < end and out.attempt != attempt:
            out.starts.append((at, attempt))
    return out


class CurrentView:
    """A follower's series as ``current`` leaves them, kept up to date as it reads more:
    a rank that never restarted has its series as read; a restarted one gets a copy that
    is extended with each new point and made again when a rank rewinds (``generation``)."""

    def __init__(self, follower: RunFollower) -> None:
        self.follower = follower
        self.generation = follower.rewound
        self._cache: dict[tuple[str, int], tuple[int, Series]] = {}

    def by_rank(self, name: str) -> dict[int, Series]:
        return {rank: self.series(name, rank) for rank in self.follower.series.get(name, {})}

    def items(self) -> Iterator[tuple[str, dict[int, Series]]]:
        for name in list(self.follower.series):
            yield name, self.by_rank(name)

    def series(self, name: str, rank: int) -> Series:
        raw = self.follower.series[name][rank]
        rewinds = self.follower.rewinds.get(rank)
        if not rewinds:
            return raw
        if self.generation != self.follower.rewound:
            self.generation = self.follower.rewound
            self._cache.clear()
        seen, kept = self._cache.get((name, rank), (0, None))
        if kept is None:
            kept = current(raw, rewinds)
            kept = kept if kept is not raw else _copy(raw)
        elif seen < len(raw):  # points of the newest attempt, which nothing supersedes yet
            for i, attempt in raw.starts:
                if i >= seen and kept.attempt != attempt:
                    kept.starts.append((len(kept) + i - seen, attempt))
            kept.steps.extend(raw.steps[seen:])
            kept.values.extend(raw.values[seen:])
            kept.times.extend(raw.times[seen:])
        self._cache[(name, rank)] = (len(raw), kept)
        return kept


def _copy(series: Series) -> Series:
    return Series(
        array("d", series.steps),
        array("d", series.values),
        array("d", series.times),
        [*series.starts],
    )


def points(
    series: Mapping[str, Mapping[int, Series]],
    rank: int | None,
    origin: float | None = None,
    attempts: bool = False,
) -> dict[str, list[Point]] | dict[str, list[AttemptPoint]]:
    """Each name's (x, value) points of ``rank``; ``rank=None``: the mean across the ranks,
    point by point. x is the point's step (None where none was given), or with ``origin``
    its time in seconds since then. With ``attempts``, (x, value, attempt) triples."""

    def x(s: Series, i: int) -> float | None:
        if origin is not None:
            return round(s.times[i] - origin, 3)
        return None if s.steps[i] != s.steps[i] else s.steps[i]

    def attempt_of(s: Series) -> list[int]:
        return [a for start, end, a in s.segments() for _ in range(start, end)]

    out: dict[str, list[Any]] = {}
    for name, by_rank in series.items():
        if rank is not None:
            if rank not in by_rank:
                continue
            s = by_rank[rank]
            values = list(s.values)
            length = len(values)
        else:
            length = min(len(s) for s in by_rank.values())
            s = next(iter(by_rank.values()))
            values = [
                sum(r.values[i] for r in by_rank.values()) / len(by_rank) for i in range(length)
            ]
        if attempts:
            numbers = attempt_of(s)
            out[name] = [(x(s, i), values[i], numbers[i]) for i in range(length)]
        else:
            out[name] = [(x(s, i), values[i]) for i in range(length)]
    return out


def current_series(follower: RunFollower) -> dict[str, dict[int, Series]]:
    """Every series of ``follower`` as ``current`` leaves it."""
    view = CurrentView(follower)
    return dict(view.items())
