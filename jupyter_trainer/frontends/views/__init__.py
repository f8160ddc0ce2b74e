"""What a person sees of a run: the live widget, a text monitor (terminals, papermill), summaries.

``monitor(run)`` picks the live widget in a notebook front end and the text monitor
elsewhere (``JUPYTER_TRAINER_MONITOR=widget|text|auto`` overrides); ``show(run)`` is the
text monitor, which in a kernel also displays the summary and one PNG chart per metric.
The widget (``monitor.widget.RunMonitor``) is imported only when it is used.
"""

from .text import TextMonitor, progress_line, runs_table, summary_text, targets_table
from ..widgets.display import monitor, show
from ..widgets.mode import MODE_ENV, monitor_mode

__all__ = ["MODE_ENV", "TextMonitor", "monitor", "monitor_mode", "progress_line", "runs_table",
           "show", "summary_text", "targets_table"]
