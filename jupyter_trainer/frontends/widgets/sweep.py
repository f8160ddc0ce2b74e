"""Following a sweep: the live sweep widget in a notebook front end, else text that follows
the sweep to its end and leaves its trials table and two PNG charts (which papermill keeps)."""

from __future__ import annotations

import base64
import html
import sys
import time
from typing import Any, TextIO

from ..views.sweep_text import sweep_text
from .mode import kernel_shell, monitor_mode

RUNNING = ("created", "running")


def sweep_monitor(sweep: Any, **kwargs: Any) -> Any:
    """The sweep's ``SweepMonitor`` widget in a live front end; elsewhere ``show_sweep``."""
    if monitor_mode() == "widget":
        from .sweep_widget import SweepMonitor

        return SweepMonitor(sweep)
    return show_sweep(sweep, **kwargs)


def show_sweep(
    sweep: Any,
    *,
    out: TextIO | None = None,
    interval: float = 1.0,
    timeout: float | None = None,
    charts: bool = True,
) -> Any:
    """Print a line each time a trial starts or ends, to the sweep's end; then its table
    and, in a kernel, both charts as PNG."""
    out = out or sys.stdout
    spec = sweep.sweeps.read_spec(sweep.id)
    seen: dict[int, str] = {}
    start = time.monotonic()
    while True:
        state = sweep.state
        for trial in state["trials"]:
            if seen.get(trial["number"]) != trial["status"]:
                seen[trial["number"]] = trial["status"]
                print(trial_event(trial, spec["metric"]), file=out, flush=True)
        if state["status"] not in RUNNING:
            break
        if timeout is not None and time.monotonic() - start > timeout:
            break
        time.sleep(interval)
    text = sweep_text(sweep)
    if kernel_shell() is not None:
        display_sweep(text, sweep.state, spec, charts)
    else:
        print(text, file=out, flush=True)
    return sweep


def trial_event(trial: dict[str, Any], metric: str) -> str:
    params = ", ".join(f"{k}={v!r}" for k, v in trial["params"].items())
    what = {
        "starting": "starting",
        "running": f"running as run {trial.get('run')}",
        "completed": f"completed: {metric}={trial.get('objective')}",
        "pruned": f"pruned at step {trial.get('pruned_at')}: {trial.get('reason')}",
        "failed": f"failed: {trial.get('error')}",
        "canceled": f"canceled: {trial.get('error')}",
    }.get(trial["status"], trial["status"])
    return f"trial {trial['number']} ({params}) {what}"


def display_sweep(text: str, state: dict[str, Any], spec: dict[str, Any], charts: bool) -> None:
    from IPython.display import display

    colour = {"completed": "#1a7f37", "failed": "#cf222e"}.get(state["status"], "#9a6700")
    body = (
        f'<div class="jt-summary" style="border-left:4px solid {colour};padding-left:8px">'
        f'<pre style="margin:0">{html.escape(text)}</pre></div>'
    )
    display({"text/plain": text, "text/html": body}, raw=True)
    if charts:
        from ..views.sweep_charts import sweep_pngs

        for name, png in sweep_pngs(state, spec).items():
            display(
                {
                    "image/png": base64.b64encode(png).decode("ascii"),
                    "text/plain": f"<{name} chart of sweep {state['id']}>",
                },
                raw=True,
            )
