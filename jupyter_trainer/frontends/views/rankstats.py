"""Which rank a figure is of: a metric's last, minimum and maximum over the ranks that logged
it, each with the rank it came from.

The run view's chips and the text summary say "min 0.406 (rank 1)" rather than rank 0's
minimum alone; the chart header does the same over the ranks its chart shows
(``labextension/src/view/rankstats.ts`` applies this same rule in the browser). Pure: no
widget, no store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple


class RankStat(NamedTuple):
    """One rank's series of one metric: its last value, finite minimum and maximum (NaN
    when it has no finite value), number of points and of NaN/inf values."""

    rank: int
    last: float
    min: float
    max: float
    points: int  # (not ``count``: a tuple's method of that name)
    non_finite: int


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def rank_summary(stats: Sequence[RankStat]) -> dict[str, Any]:
    """The figures of one metric over ``stats`` (one per rank), each with its rank:

    ``{"ranks": [0, 1], "last": {"lo": v, "lo_rank": r, "hi": v, "hi_rank": r,
    "non_finite": [[rank, "nan"], ...]}, "min": v, "min_rank": r, "max": v, "max_rank": r,
    "count": most points of a rank, "non_finite": NaN/inf values of all ranks}``.

    ``last`` spans the finite last values (``lo`` = ``hi`` when the ranks agree);
    ``last.non_finite`` lists the ranks whose last value is NaN or inf. On a tie the lowest
    rank is named. A figure with no finite value is None and its rank too.
    """
    ordered = sorted(stats, key=lambda s: s.rank)
    finite_last = [s for s in ordered if _finite(s.last)]
    lo = min(finite_last, key=lambda s: s.last, default=None)
    hi = max(finite_last, key=lambda s: s.last, default=None)
    with_min = [s for s in ordered if _finite(s.min)]
    with_max = [s for s in ordered if _finite(s.max)]
    low = min(with_min, key=lambda s: s.min, default=None)
    high = max(with_max, key=lambda s: s.max, default=None)
    # max() keeps the first of equal values: with the ranks in order, the lowest rank
    return {
        "ranks": [s.rank for s in ordered],
        "last": {
            "lo": lo.last if lo else None,
            "lo_rank": lo.rank if lo else None,
            "hi": hi.last if hi else None,
            "hi_rank": hi.rank if hi else None,
            "non_finite": [[s.rank, repr(float(s.last))] for s in ordered if not _finite(s.last)],
        },
        "min": low.min if low else None,
        "min_rank": low.rank if low else None,
        "max": high.max if high else None,
        "max_rank": high.rank if high else None,
        "count": max((s.points for s in ordered), default=0),
        "non_finite": sum(s.non_finite for s in ordered),
    }


def ranks_label(ranks: Sequence[int], total: int | None = None) -> str:
    """``rank 0``, ``ranks 0-3``, ``ranks 0, 2, 5``; with ``total`` more than shown,
    ``ranks 0-7 of 16``."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        text = f"rank {ranks[0]}"
    elif len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        text = f"ranks {ranks[0]}-{ranks[-1]}"
    else:
        text = "ranks " + ", ".join(str(r) for r in ranks)
    return f"{text} of {total}" if total is not None and total > len(ranks) else text
