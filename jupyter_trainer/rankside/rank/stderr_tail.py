"""The last lines a rank's script wrote to ``sys.stderr``, kept for its record.

A script that ends with ``sys.exit(2)`` (argparse's error, say) raises no exception, so the
rank has no traceback to record; what the script said before it left is the error. Boot
puts ``Tail`` in front of ``sys.stderr``: every write still goes where it went, and the last
few kilobytes stay in memory. Standard library only: copied into every snapshot.
"""

from __future__ import annotations

from typing import Any

KEEP = 4000  # characters: a usage message and its error line, or a logged error


class Tail:
    """``stream``, which also keeps the last ``KEEP`` characters written to it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._kept = ""

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        if isinstance(text, str):
            self._kept = (self._kept + text)[-KEEP:]
        return written

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def text(self) -> str:
        """What was kept, without the blank end."""
        return self._kept.rstrip()

    def last_line(self) -> str:
        """The last line written that is not blank, or ``""``."""
        lines = [line.strip() for line in self._kept.splitlines() if line.strip()]
        return lines[-1] if lines else ""
