"""One PNG chart per metric, drawn with matplotlib's Agg canvas (no GUI, no pyplot state).

A restarted run's charts show the points later attempts left standing (``metric_points``),
each attempt's line apart from the next."""

from __future__ import annotations

import io
import math
from typing import Any

from ...store.follow import RunFollower, Series
from ...store.metric_points import current_series

MAX_POINTS = 4000


def _xy(series: Series) -> tuple[list[float], list[float]]:
    n = len(series)
    stride = max(1, math.ceil(n / MAX_POINTS))
    xs = [s if s == s else i for i, s in enumerate(series.steps)]
    idx = list(range(0, n, stride))
    if idx and idx[-1] != n - 1:
        idx.append(n - 1)  # keep the final value exact
    out_x: list[float] = []
    out_y: list[float] = []
    for start, end, _ in series.segments():
        if out_x:  # a NaN ends one attempt's line before the next begins
            out_x.append(math.nan)
            out_y.append(math.nan)
        part = sorted({i for i in idx if start <= i < end} | {start, end - 1})
        out_x += [xs[i] for i in part]
        out_y += [series.values[i] for i in part]
    return out_x, out_y


def metric_figures(
    follower: RunFollower, width: float = 5.0, height: float = 3.0
) -> dict[str, Any]:
    """metric name -> a matplotlib ``Figure``: one line per rank against step, ticked at
    whole steps only."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figures = {}
    for name, by_rank in sorted(current_series(follower).items()):
        fig = Figure(figsize=(width, height), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for rank in sorted(by_rank):
            xs, ys = _xy(by_rank[rank])
            ax.plot(xs, ys, label=f"rank {rank}", linewidth=1.2, alpha=1.0 if rank == 0 else 0.6)
        ax.set_title(f"{name} — {follower.run_id}", fontsize=9)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # never a step 0.25
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
        if len(by_rank) > 1:
            ax.legend(fontsize=7)
        fig.tight_layout()
        figures[name] = fig
    return figures


def metric_pngs(follower: RunFollower, width: float = 5.0, height: float = 3.0) -> dict[str, bytes]:
    """metric name -> PNG bytes of ``metric_figures``."""
    charts = {}
    for name, fig in metric_figures(follower, width, height).items():
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        charts[name] = buf.getvalue()
    return charts
