"""Following a run from wherever it is asked for: a notebook front end, papermill, a terminal.

``monitor(run)`` is the switch: the live widget when a person is looking at the notebook
(see ``mode.monitor_mode``), else ``show(run)``, the text monitor that follows the run to
its end and leaves a summary and static charts, which papermill keeps.
"""

from __future__ import annotations

import base64
import html
from typing import Any

from ..views.text import TextMonitor
from .mode import kernel_shell, monitor_mode


def _in_kernel() -> bool:
    return kernel_shell() is not None


def monitor(run: Any, **kwargs: Any) -> Any:
    """The run's monitor: a ``RunMonitor`` widget (shown when it is a cell's value, or with
    ``display``) in a live front end; elsewhere the text monitor, followed to the run's end."""
    if monitor_mode() == "widget":
        from .widget import RunMonitor

        return RunMonitor(run)
    return show(run, **kwargs)


def show(
    run: Any,
    *,
    interval: float = 5.0,
    timeout: float | None = None,
    charts: bool | None = None,
    traceback: bool = True,
) -> Any:
    """Follow ``run`` to its end with throttled progress lines, then show its summary.

    In a notebook kernel the summary is displayed as HTML with a text fallback, followed
    by one ``image/png`` chart per metric, so headless runs (papermill) keep them too.
    ``traceback=False`` leaves a failed rank's traceback out of the summary, for callers
    that raise it next.
    """
    monitor = TextMonitor(run, interval=interval)
    follower = monitor.follow(timeout)
    text = monitor.summary(traceback)
    if _in_kernel():
        display_summary(text, follower, charts=True if charts is None else charts)
    else:
        print(text, flush=True)
    return follower


def display_summary(text: str, follower: Any, charts: bool = True) -> None:
    from IPython.display import display

    status = follower.state.get("status", "")
    colour = {"completed": "#1a7f37", "failed": "#cf222e", "lost": "#cf222e"}.get(status, "#9a6700")
    body = (
        f'<div class="jt-summary" style="border-left:4px solid {colour};padding-left:8px">'
        f'<pre style="margin:0">{html.escape(text)}</pre></div>'
    )
    display({"text/plain": text, "text/html": body}, raw=True)
    if charts:
        from ..views.charts import metric_pngs

        for name, png in metric_pngs(follower).items():
            display(
                {
                    "image/png": base64.b64encode(png).decode("ascii"),
                    "text/plain": f"<chart of {name}>",
                },
                raw=True,
            )
