"""A sweep's two charts, from its state: the best objective so far against the trials
finished (in the order they finished), and parallel coordinates of each trial's params and
objective. ``sweep_chart_data`` gives what both draw (the widget draws it in the browser);
``sweep_pngs`` draws it with matplotlib's Agg canvas for papermill and terminals."""

from __future__ import annotations

import io
import math
from typing import Any


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def reported(trial: dict[str, Any], objective: str = "last") -> dict[str, Any] | None:
    """What a trial without an objective reported of the metric: ``{"value", "step",
    "kind"}``, the value the objective would have been taken from (its last one, or its best
    with ``--objective best``) had it completed; ``kind`` is ``so far`` while it runs, else
    ``last``/``best``. None for a completed trial (its objective says it) and for one that
    logged no finite value.

    A pruned, canceled or failed trial stopped before its end: its value is shown, marked,
    but it is no objective. Best-so-far and the sweep's best count completed trials only,
    as Optuna's ``best_trial`` does (``best_so_far``)."""
    if trial.get("status") == "completed" and _finite(trial.get("objective")):
        return None
    value = trial.get("best") if objective == "best" else trial.get("last")
    if not _finite(value):
        return None
    running = trial.get("status") in ("starting", "running")
    return {
        "value": value,
        "step": trial.get("step"),
        "kind": "so far" if running else ("best" if objective == "best" else "last"),
    }


def with_reported(
    rows: list[dict[str, Any]], trials: list[dict[str, Any]], objective: str = "last"
) -> list[dict[str, Any]]:
    """``rows`` (``Sweep.table()``'s, one per trial) each with its trial's ``reported``."""
    by_number = {t["number"]: t for t in trials}
    return [
        dict(row, reported=reported(by_number.get(row["number"], row), objective)) for row in rows
    ]


def best_so_far(state: dict[str, Any], goal: str) -> list[dict[str, Any]]:
    """``[{"n": k, "number": trial, "objective": v, "best": b}]`` over completed trials in the
    order they ended: ``b`` is the best objective among the first ``k``. Only a completed
    trial's objective is comparable with another's: a pruned or canceled trial's value is of
    an earlier step, so it never counts here (``reported``)."""
    done = sorted(
        (
            t
            for t in state.get("trials", [])
            if t["status"] == "completed" and _finite(t.get("objective"))
        ),
        key=lambda t: (t.get("end") or 0, t["number"]),
    )
    points, best = [], None
    for k, trial in enumerate(done, 1):
        value = trial["objective"]
        if best is None or (value > best if goal == "max" else value < best):
            best = value
        points.append({"n": k, "number": trial["number"], "objective": value, "best": best})
    return points


def parallel_axes(
    state: dict[str, Any], space: dict[str, str], objective: str = "last"
) -> list[dict[str, Any]]:
    """One axis per swept param (fixed ones left out), then the objective: ``{"name", "kind":
    "linear"|"log"|"category", "categories"?, "lo", "hi"}``. The objective axis spans the
    completed trials' objectives and the values the others reported."""
    trials = state.get("trials", [])
    axes: list[dict[str, Any]] = []
    for key, text in space.items():
        values = [t["params"].get(key) for t in trials if key in t["params"]]
        if text.startswith("choice(") or not all(_finite(v) for v in values):
            distinct = {repr(v): v for v in values}
            numeric = all(_finite(v) for v in distinct.values())
            categories = sorted(distinct, key=lambda r: (distinct[r], r) if numeric else (0, r))
            axes.append({"name": key, "kind": "category", "categories": categories})
        elif "(" in text:
            log = text.startswith("loguniform(") and all(v > 0 for v in values)
            finite = [math.log10(v) if log else v for v in values] or [0.0]
            axes.append(
                {
                    "name": key,
                    "kind": "log" if log else "linear",
                    "lo": min(finite),
                    "hi": max(finite),
                }
            )
    objectives = [
        value for t in trials if (value := _objective_or_reported(t, objective)) is not None
    ]
    axes.append(
        {
            "name": "objective",
            "kind": "linear",
            "lo": min(objectives or [0.0]),
            "hi": max(objectives or [1.0]),
        }
    )
    return axes


def _objective_or_reported(trial: dict[str, Any], objective: str) -> float | None:
    """Where a trial sits on the objective axis: its objective, else what it reported."""
    if _finite(trial.get("objective")):
        return trial["objective"]
    found = reported(trial, objective)
    return found["value"] if found else None


def position(axis: dict[str, Any], value: Any) -> float | None:
    """Where ``value`` sits on ``axis``, from 0 (bottom) to 1 (top); None if it has none."""
    if axis["kind"] == "category":
        cats = axis["categories"]
        return (cats.index(repr(value)) + 0.5) / len(cats) if repr(value) in cats else None
    if not _finite(value) or (axis["kind"] == "log" and value <= 0):
        return None
    x = math.log10(value) if axis["kind"] == "log" else value
    span = axis["hi"] - axis["lo"]
    return 0.5 if span == 0 else (x - axis["lo"]) / span


def sweep_chart_data(state: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """Both charts as plain data: ``{"best": [...], "axes": [...], "lines": [{"number",
    "status", "objective", "reported", "ys": [position per axis]}]}``; a trial without an
    objective sits on the objective axis at the value it reported (``reported``)."""
    objective = spec.get("objective") or "last"
    axes = parallel_axes(state, spec["space"], objective)
    lines = []
    for trial in state.get("trials", []):
        ys = [position(axis, trial["params"].get(axis["name"])) for axis in axes[:-1]]
        ys.append(position(axes[-1], _objective_or_reported(trial, objective)))
        lines.append(
            {
                "number": trial["number"],
                "status": trial["status"],
                "objective": trial.get("objective"),
                "reported": reported(trial, objective),
                "ys": ys,
            }
        )
    return {
        "best": best_so_far(state, spec["goal"]),
        "axes": axes,
        "lines": lines,
        "metric": spec["metric"],
        "goal": spec["goal"],
    }


def sweep_pngs(
    state: dict[str, Any], spec: dict[str, Any], width: float = 6.0, height: float = 3.2
) -> dict[str, bytes]:
    """``{"best-so-far": PNG, "parallel-coordinates": PNG}``."""
    from matplotlib import cm
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    data = sweep_chart_data(state, spec)
    out = {}

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    best = data["best"]
    if best:
        ax.scatter(
            [p["n"] for p in best],
            [p["objective"] for p in best],
            s=18,
            color="#8c959f",
            label="trial objective",
            zorder=2,
        )
        ax.step(
            [p["n"] for p in best],
            [p["best"] for p in best],
            where="post",
            color="#0969da",
            linewidth=2,
            label="best so far",
            zorder=3,
        )
        ax.legend(fontsize=7)
    ax.set_title(f"best {spec['metric']} so far ({spec['goal']}) — {state['id']}", fontsize=9)
    ax.set_xlabel("trials completed")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(spec["metric"])
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    out["best-so-far"] = _png(fig)

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    axes = data["axes"]
    xs = list(range(len(axes)))
    objectives = [ln["objective"] for ln in data["lines"] if _finite(ln["objective"])]
    lo, hi = (min(objectives), max(objectives)) if objectives else (0.0, 1.0)
    for line in data["lines"]:
        points = [(x, y) for x, y in zip(xs, line["ys"]) if y is not None]
        if len(points) < 2:
            continue
        if line["status"] == "completed" and _finite(line["objective"]):
            shade = 0.5 if hi == lo else (line["objective"] - lo) / (hi - lo)
            colour = cm.viridis(shade if spec["goal"] == "max" else 1 - shade)
            style: dict[str, Any] = dict(color=colour, linewidth=1.6, alpha=0.9)
        else:
            style = dict(color="#8c959f", linewidth=1, alpha=0.6, linestyle="--")
        ax.plot([p[0] for p in points], [p[1] for p in points], **style)
    for x, axis in zip(xs, axes):
        ax.axvline(x, color="#57606a", linewidth=0.8)
        if axis["kind"] == "category":
            for k, label in enumerate(axis["categories"]):
                ax.text(
                    x + 0.03,
                    (k + 0.5) / len(axis["categories"]),
                    label[:12],
                    fontsize=6,
                    va="center",
                )
        else:
            fmt = (lambda v: f"{10**v:.3g}") if axis["kind"] == "log" else (lambda v: f"{v:.3g}")
            ax.text(x + 0.03, 0, fmt(axis["lo"]), fontsize=6, va="bottom")
            ax.text(x + 0.03, 1, fmt(axis["hi"]), fontsize=6, va="top")
    ax.set_xticks(
        xs, [a["name"] if a["name"] != "objective" else spec["metric"] for a in axes], fontsize=8
    )
    ax.set_yticks([])
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"params against {spec['metric']} (pruned and failed trials dashed)", fontsize=9)
    fig.tight_layout()
    out["parallel-coordinates"] = _png(fig)
    return out


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
