"""The notebook widgets (anywidget): the run monitor, the sweep monitor and the launch
form, with their built front end in ``static/``; ``mode.py`` and ``display.py`` choose the
live widget or the text monitor for a notebook."""

from .display import monitor, show
from .mode import MODE_ENV, monitor_mode

__all__ = ["MODE_ENV", "monitor", "monitor_mode", "show"]
