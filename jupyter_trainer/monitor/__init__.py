"""What a person sees of a run: a text monitor (terminals, papermill) and summaries.

``show(run)`` follows a run to its end wherever it is called; in a notebook kernel it
also displays the summary and one chart per metric as ``image/png``.
"""

from .text import TextMonitor, progress_line, summary_text
from .display import show

__all__ = ["TextMonitor", "progress_line", "show", "summary_text"]
