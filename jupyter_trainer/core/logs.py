"""One logging set-up for the package's detached processes: a run's supervisor and a sweep's
driver each write their log file (``supervisor.log``, the sweep's ``driver.log``) through
``logging``, one line per message, ``HH:MM:SS message``.

Such a process calls ``process_log(name)`` once, after its stdout went to its log file, and
logs with the logger it returns; every other logger of the package (the store's warnings,
say) then writes to the same file in the same form.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

FORMAT = "%(asctime)s %(message)s"
DATE_FORMAT = "%H:%M:%S"
PACKAGE = "jupyter_trainer"


class _LogFileHandler(logging.StreamHandler):
    """A stream handler for a log file on a disk that may fill: a line that cannot be written
    is dropped (the run's state still says what happened), never a traceback into the same
    full file."""

    def handleError(self, record: logging.LogRecord) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handleError(record)


def process_log(name: str, stream: TextIO | None = None) -> logging.Logger:
    """Send the package's log records (INFO and above) to ``stream`` (this process's stdout
    by default) as ``HH:MM:SS message``, and return the logger ``name`` (under the package's,
    e.g. ``jupyter_trainer.supervisor``). A second call changes nothing."""
    package = logging.getLogger(PACKAGE)
    if not any(isinstance(h, _LogFileHandler) for h in package.handlers):
        handler = _LogFileHandler(stream if stream is not None else sys.stdout)
        handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
        package.addHandler(handler)
        package.setLevel(logging.INFO)
        package.propagate = False
    return logging.getLogger(name)
