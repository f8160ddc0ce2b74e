"""A bounded, incremental tail of one rank's log, and when each of its lines was written.

``LogTail`` follows one rank's log the way ``follow.RunFollower`` follows its events, but
keeps only a bounded tail, read from the end of the file; ``LogTimes`` reads the rank's time
marks so the views can put the ranks' lines in one time order.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from . import read_complete_lines


class LogTail:
    """The last lines of one growing log file, read from its end.

    A first poll reads at most ``max_bytes`` from the end of the file; later polls read what
    was appended, and if more than ``max_bytes`` arrived since, they skip to the end again
    (``skipped`` counts the bytes never read). A line longer than ``max_line`` characters is
    cut. Memory and time per poll are bounded whatever the size of the log.
    """

    def __init__(
        self, path: Path, max_lines: int = 2000, max_bytes: int = 256 << 10, max_line: int = 4000
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_line = max_line
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.offset = 0
        self.skipped = 0
        self.starts: list[int] = []  # byte offset in the file of each line the last poll returned
        self._partial = b""

    def poll(self) -> list[str]:
        """New complete lines since the last poll (also appended to ``lines``)."""
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # truncated or replaced: start over
            self.offset, self._partial = 0, b""
        if size == self.offset:
            self.starts = []
            return []
        start = self.offset
        cut = size - start > self.max_bytes
        if cut:
            start = size - self.max_bytes
            self.skipped += start - self.offset
            self._partial = b""
        with open(self.path, "rb") as fh:
            fh.seek(start)
            data = fh.read(size - start)
        self.offset = start + len(data)
        base = start - len(self._partial)
        if cut:
            first = data.find(b"\n")
            data = data[first + 1 :] if first >= 0 else b""
            base = start + first + 1
        data = self._partial + data
        end = data.rfind(b"\n") + 1
        self._partial = data[end:]
        if len(self._partial) > self.max_line * 4:  # a line with no end in sight: show it cut
            data, end, self._partial = data + b"\n", len(data) + 1, b""
        raw = data[:end].split(b"\n")[:-1]
        starts, at = [], base
        for line in raw:
            starts.append(at)
            at += len(line) + 1
        new = [self._clip(line.decode(errors="replace")) for line in raw]
        if self.lines.maxlen and len(new) > self.lines.maxlen:
            new, starts = new[-self.lines.maxlen :], starts[-self.lines.maxlen :]
        self.starts = starts
        self.lines.extend(new)
        return new

    def _clip(self, line: str) -> str:
        line = line.rstrip("\r")
        if "\r" in line:  # progress bars redraw a line with \r: keep what the terminal shows
            line = line.rsplit("\r", 1)[-1]
        return line if len(line) <= self.max_line else line[: self.max_line] + " …[cut]"


class LogTimes:
    """When each line of one rank's log was written, from the rank's ``rank-<r>.times``
    marks ("<log size> <unix time>", written before the output they precede; see the
    runtime's ``_LogMarks``). A line gets the time of the last mark at or before its offset;
    a log without marks (an older run) gets 0 for every line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.sizes: list[int] = []
        self.times: list[float] = []

    def at(self, starts: Sequence[int]) -> list[float]:
        """Times of the lines that start at ``starts`` (byte offsets, ascending)."""
        self._read()
        out = []
        for start in starts:
            i = bisect_right(self.sizes, start) - 1
            out.append(self.times[i] if i >= 0 else (self.times[0] if self.times else 0.0))
        return out

    def _read(self) -> None:
        try:
            data, self.offset = read_complete_lines(self.path, self.offset, None)
        except FileNotFoundError:
            return
        for line in data.split(b"\n"):
            size, _, when = line.partition(b" ")
            try:
                size_i, when_f = int(size), float(when)
            except ValueError:
                continue
            if not self.sizes or size_i >= self.sizes[-1]:
                self.sizes.append(size_i)
                self.times.append(when_f)
