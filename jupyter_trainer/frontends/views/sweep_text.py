"""A sweep as text: its trials table and one-line summary (``jupyter-trainer sweep show``,
the sweep monitor under papermill) and the list of sweeps (``jupyter-trainer sweeps``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ...core.printable import printable
from ...core.redact import redact_url
from ...core.units import fmt_value
from .cost import sweep_cost
from .sweep_charts import with_reported
from .text import columns, fmt_duration


def _value(value: Any) -> str:
    """A value on one line: control characters and newlines (of a swept string, say) are
    escaped as ``repr`` writes them."""
    if value is None:
        return "-"
    return (
        fmt_value(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        else printable(str(value))
    )


def _param(value: Any) -> str:
    text = _value(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _objective(row: dict[str, Any]) -> str:
    """A trial's objective, else the value it reported, starred (see ``REPORTED_NOTE``)."""
    if row.get("objective") is not None or not row.get("reported"):
        return _value(row.get("objective"))
    return f"{_value(row['reported']['value'])}*"


REPORTED_NOTE = (
    "* the {kind} {metric} a trial reported without completing: not an objective, "
    "so not in the running for the best trial"
)


def trials_table(rows: Sequence[dict[str, Any]], metric: str) -> str:
    """One line per trial (``Sweep.table()`` rows): number, status, objective, last step,
    duration, each param, and why a trial was pruned or failed. A trial without an objective
    shows the value it reported (rows with ``reported``), starred and explained below."""
    if not rows:
        return "no trials yet"
    keys = sorted({key for row in rows for key in row["params"]})
    header = ("#", "STATUS", metric.upper(), "STEP", "TIME", *keys, "RUN", "NOTE")
    body = []
    for row in rows:
        note = row.get("reason") or ""
        if row["status"] == "pruned" and row.get("pruned_at") is not None:
            note = f"pruned at step {row['pruned_at']}: {note}"
        body.append(
            (
                row["number"],
                row["status"],
                _objective(row),
                _value(row.get("step")),
                fmt_duration(row["duration"]) if row.get("duration") is not None else "-",
                *(_param(row["params"].get(k)) for k in keys),
                row.get("run") or "-",
                printable(note)[:120],
            )
        )
    table = columns(header, body)
    starred = [
        row["reported"] for row in rows if row.get("objective") is None and row.get("reported")
    ]
    if starred:
        kinds = sorted({r["kind"] for r in starred})
        table += "\n" + REPORTED_NOTE.format(kind="/".join(kinds), metric=metric)
    return table


def sweep_line(state: dict[str, Any], spec: dict[str, Any]) -> str:
    """``sweep ID: running, 5 of 12 trials (2 running, 2 completed, 1 pruned); best #3 ...``"""
    counts = state.get("counts") or {}
    started = len(state.get("trials", []))
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    line = (
        f"sweep {state['id']}: {state['status']}, {started} of "
        f"{state.get('trials_total', spec['trials'])} trials"
    )
    if parts:
        line += f" ({parts})"
    best = state.get("best")
    if best:
        params = ", ".join(f"{k}={_param(v)}" for k, v in best["params"].items())
        line += f"; best #{best['number']} {spec['metric']}={_value(best['objective'])} ({params})"
    elif state["status"] in ("completed", "canceled", "failed"):
        line += "; no trial completed (the best trial is among the completed ones)"
    if state.get("error"):
        line += f"; error: {printable(state['error'])}"
    elif state.get("reason") and state["status"] != "running":
        line += f"; {state['reason']}"
    return line


def sweep_text(sweep: Any) -> str:
    """The sweep's summary line and its trials table."""
    state, spec = sweep.state, sweep.sweeps.read_spec(sweep.id)
    rows = with_reported(sweep.table(), state.get("trials", []), spec.get("objective") or "last")
    text = sweep_line(state, spec) + "\n" + trials_table(rows, spec["metric"])
    cost = sweep_cost(sweep.trials(), time.time())
    if cost:
        text += f"\n{cost}"
    if state["status"] == "interrupted":
        text += f"\nits driver is gone: resume it with `jupyter-trainer sweep resume {sweep.id}`"
    return text


def sweeps_table(sweeps: Sequence[Any]) -> str:
    """One line per sweep, newest first."""
    if not sweeps:
        return "no sweeps yet"
    body = []
    for sweep in sweeps:
        state, spec = sweep.state, sweep.sweeps.read_spec(sweep.id)
        best = state.get("best")
        body.append(
            (
                sweep.id,
                state["status"],
                f"{len(state.get('trials', []))}/{state.get('trials_total', spec['trials'])}",
                f"{spec['metric']} ({spec['goal']})",
                _value(best["objective"]) if best else "-",
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state["created"])),
            )
        )
    return columns(("SWEEP", "STATUS", "TRIALS", "METRIC", "BEST", "CREATED"), body)


def sweep_json(sweep: Any) -> dict[str, Any]:
    """A sweep as JSON (``sweep show --json`` and the REST API): its spec, state and one row
    per trial, each with what it reported when it has no objective (``reported``)."""
    state = sweep.state
    spec = sweep.sweeps.read_spec(sweep.id)
    return {
        "id": sweep.id,
        "status": state["status"],
        "spec": spec,
        "storage": redact_url(sweep.storage),  # shown: no database password
        "best": state.get("best"),
        "counts": state.get("counts", {}),
        "trials_total": state.get("trials_total"),
        "error": state.get("error"),
        "trials": with_reported(
            sweep.table(), state.get("trials") or [], spec.get("objective") or "last"
        ),
    }
