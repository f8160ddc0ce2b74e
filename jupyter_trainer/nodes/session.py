"""One connection to a node's agent, kept for a run's steps.

A call of its own costs a login on the node for each step (ssh, the login shell's rc files,
an interpreter). A session is opened with the pre-flight (the agent's ``preflight`` with
``session``), then asked for the snapshot (``stage``) and the launch (``start``), and at
last becomes the node's follow session: one login per node for the whole run.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from typing import Any

from ..core.errors import TargetError
from .frames import FrameReader, parse_answer
from .transport import NodeShell, Pipes


def request(body: dict[str, Any], payload: bytes = b"") -> bytes:
    """The bytes of one request: its JSON line, then ``payload``."""
    return json.dumps(body).encode() + b"\n" + payload


class AgentSession:
    """The agent, started by ``command`` on ``shell``'s node and kept running. Open it from
    the thread that will outlive it (the main one): the session ends with that thread."""

    def __init__(self, shell: NodeShell, command: str) -> None:
        self.host = shell.host
        self.command = command
        self.reader = FrameReader()
        self.proc = shell.popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.pipes = Pipes.of(self.proc, self.host)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, data: bytes, what: str, timeout: float) -> dict[str, Any]:
        """Send ``data`` (a request line, and what follows it) and return the next answer;
        a TargetError that names the node, as a call's would, if the session ends first."""
        try:
            self.pipes.stdin.write(data)
            self.pipes.stdin.flush()
        except OSError:
            pass  # it ended: its exit and stderr say why, below
        fd = self.pipes.stdout.fileno()
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([fd], [], [], min(left, 1.0))[0]:
                continue
            data = os.read(fd, 1 << 20)
            if not data:
                break
            for header, _ in self.reader.feed(data):
                header.pop("n", None)
                return header
        else:
            self.close()
            raise TargetError(f"node {self.host}: {what} did not finish within {timeout:.0f} s")
        code = self.proc.wait()
        done = subprocess.CompletedProcess(self.command, code, b"", self.pipes.stderr.read())
        return parse_answer(self.host, done, what)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.pipes.stdin, self.pipes.stdout, self.pipes.stderr):
            try:
                stream.close()
            except OSError:
                pass
