"""The frame protocol between the node agent (rankside/agent/) and this machine.

The agent answers with frames on its standard output: a line ``\\x1eJT {json header}``
then ``n`` raw bytes (the header's ``n``). The marker lets a reader skip whatever a login
shell's rc files print before the agent starts. One call's answer is its last frame's
header; a follow session is an endless stream of them.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

from ..core.errors import TargetError
from .ssh import classify

MARK = b"\x1eJT "


class FrameReader:
    """Splits the agent's output into (header, payload) frames; skips any noise before a
    marker (a login shell's rc files may print)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[dict[str, Any], bytes]]:
        self.buf += data
        while True:
            start = self.buf.find(MARK)
            if start < 0:
                del self.buf[: max(0, len(self.buf) - len(MARK))]
                return
            end = self.buf.find(b"\n", start)
            if end < 0:
                del self.buf[:start]
                return
            try:
                header = json.loads(self.buf[start + len(MARK) : end])
            except ValueError:
                del self.buf[: end + 1]
                continue
            size = int(header.get("n", 0))
            if len(self.buf) < end + 1 + size:
                del self.buf[:start]
                return
            payload = bytes(self.buf[end + 1 : end + 1 + size])
            del self.buf[: end + 1 + size]
            yield header, payload


def parse_answer(host: str, done: subprocess.CompletedProcess, what: str) -> dict[str, Any]:
    """The one JSON answer of an agent call, or a TargetError naming the node and why."""
    frames = list(FrameReader().feed(done.stdout))
    if done.returncode == 0 and frames:
        return frames[-1][0]
    err = done.stderr.decode(errors="replace") if isinstance(done.stderr, bytes) else done.stderr
    if done.returncode == 255:
        raise TargetError(f"node {host}: {what} failed: {classify(host, 255, err)}")
    tail = " ".join(err.split())[-800:] or f"exit code {done.returncode}"
    raise TargetError(f"node {host}: {what} failed: {tail}")
