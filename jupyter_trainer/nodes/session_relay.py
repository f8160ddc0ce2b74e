"""A live session's requests carried from the run store to nodes whose ranks keep the run's
folder elsewhere (ssh hosts, a remote Slurm cluster).

The notebook writes each request into the store's ``session/`` folder
(``store/sessions.py``); the supervisor, which holds a follow session with every node, sends
the new files down it (the agent's ``session_files`` in ``rankside/agent/follow.py`` writes
them into the node's run folder and wakes its ranks). The ranks' results, their readiness and
the session's end come back by the same follow session as the run's other files.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ..rankside.rank.session_loop import socket_name


class Requests(Protocol):
    """A node's follow session, as far as a relay needs it."""

    def request(self, body: dict[str, Any]) -> bool: ...


class SessionRelay:
    """What of one run's ``session/`` folder has gone to its nodes, and what is still to go."""

    def __init__(self, run_dir: str | Path, run_id: str, world_size: int) -> None:
        self.folder = Path(run_dir) / "session"
        self.run_id = run_id
        self.world_size = world_size
        self.sent = 0  # requests 1..sent went to every node
        self.interrupts: set[int] = set()
        self.stopped = False

    def pump(self, nodes: Sequence[Requests | None]) -> None:
        """Send every new request, interrupt and stop to each of ``nodes`` (a node without a
        follow session yet gets them at a later pump)."""
        if self.stopped or not self.folder.is_dir():
            return
        while (body := self._request(self.sent + 1)) is not None:
            if not _to_all(nodes, body):
                return
            self.sent += 1
        for n in (self.sent - 1, self.sent):
            if n > 0 and n not in self.interrupts and (self.folder / f"interrupt.{n}").exists():
                body = self._body({f"interrupt.{n}": b""}, f"interrupt {n}")
                if _to_all(nodes, body):
                    self.interrupts.add(n)
        stop = self.folder / "stop"
        if stop.exists() and _to_all(nodes, self._body({"stop": stop.read_bytes()}, "wake")):
            self.stopped = True

    def _request(self, n: int) -> dict[str, Any] | None:
        requests = self.folder / "requests"
        try:
            last = (requests / f"{n}.json").read_bytes()
        except FileNotFoundError:
            return None
        files = {}
        here = requests / str(n)
        for path in sorted(here.iterdir()) if here.is_dir() else ():
            files[f"requests/{n}/{path.name}"] = path.read_bytes()
        files[f"requests/{n}.json"] = last  # the request itself last, as the notebook wrote it
        return self._body(files, "wake")

    def _body(self, files: dict[str, bytes], message: str) -> dict[str, Any]:
        return {
            "session": {
                "files": {
                    f"session/{rel}": base64.b64encode(data).decode() for rel, data in files.items()
                },
                "wake": [
                    [socket_name(self.run_id, rank).decode(), message]
                    for rank in range(self.world_size)
                ],
            }
        }


def _to_all(nodes: Sequence[Requests | None], body: dict[str, Any]) -> bool:
    if any(node is None for node in nodes):
        return False
    return all(node.request(body) for node in nodes if node is not None)
