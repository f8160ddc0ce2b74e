"""Pure view code every front end shares: what a run or sweep looks like as text, tables,
summaries, health notes and the feed the run view draws. Nothing here imports a front end
or IPython; the widgets, the command table, the CLI and the server build on it.
"""

from .text import TextMonitor, progress_line, runs_table, summary_text, targets_table

__all__ = ["TextMonitor", "progress_line", "runs_table", "summary_text", "targets_table"]
