"""A live session's files in its run's folder, ``session/``: requests written whole, results
read back, interrupt and stop. What each file holds is the rank side's protocol
(``rankside/rank/session_loop.py``); this module is the notebook's end of it.

The folder is the owner's alone (0700): its requests hold the cells' parameters and pickled
values, its results the values pulled from the ranks.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
from pathlib import Path
from typing import Any

from ..core.files import write_atomic, write_json_atomic
from ..rankside.rank.session_loop import socket_name

NAMES_FILE = "names.json"  # the names the session's cells and pushes bound on the ranks
RESTARTS_FILE = "restarts.json"  # the ranks brought back after they died


class SessionFiles:
    """The ``session/`` folder of one run."""

    def __init__(self, folder: Path, run_id: str) -> None:
        self.folder = folder
        self.run_id = run_id
        self.requests = folder / "requests"
        self.results = folder / "results"
        self.taken = 0  # the last request number this handle took

    def create(self) -> None:
        for path in (self.folder, self.requests, self.results):
            path.mkdir(mode=0o700, exist_ok=True)

    def exists(self) -> bool:
        return self.folder.is_dir()

    # -- requests -------------------------------------------------------------------------
    def new_request(self) -> tuple[int, Path]:
        """The next request's number and its folder, made here so no other writer takes it
        (the folder is looked through once per handle; then the numbers go on from the last
        this handle took, past those other writers took since)."""
        if not self.taken:
            self.taken = max(
                (int(p.name) for p in self.requests.iterdir() if p.name.isdigit()), default=0
            )
        n = self.taken + 1
        while True:
            here = self.requests / str(n)
            try:
                here.mkdir(mode=0o700)
                self.taken = n
                return n, here
            except FileExistsError:
                n += 1

    def post(self, n: int, request: dict[str, Any], ranks: range) -> None:
        """Make request ``n`` visible to the ranks, then wake them."""
        write_json_atomic(self.requests / f"{n}.json", request, mode=0o600)
        for rank in ranks:
            send(socket_name(self.run_id, rank), b"wake")

    def request(self, n: int) -> dict[str, Any] | None:
        try:
            found = json.loads((self.requests / f"{n}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def count(self) -> int:
        return max(
            (int(p.stem) for p in self.requests.glob("*.json") if p.stem.isdigit()), default=0
        )

    # -- results --------------------------------------------------------------------------
    def result(self, n: int, rank: int) -> dict[str, Any] | None:
        try:
            found = json.loads((self.results / f"{n}.{rank}.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {"ok": False, "error": f"rank {rank}'s result of request {n} is damaged\n"}
        return found if isinstance(found, dict) else None

    def value(self, n: int, rank: int) -> Any:
        """The value rank ``rank`` pulled for request ``n``, unpickled."""
        with open(self.results / f"{n}.{rank}.pkl", "rb") as f:
            return pickle.load(f)

    def ready(self) -> set[int]:
        return {
            int(p.name.split(".", 1)[1])
            for p in self.folder.glob("ready.*")
            if p.name.split(".", 1)[1].isdigit()
        }

    # -- interrupt and stop ---------------------------------------------------------------
    def interrupt(self, n: int, ranks: range) -> None:
        write_atomic(self.folder / f"interrupt.{n}", b"", mode=0o600)
        for rank in ranks:
            send(socket_name(self.run_id, rank), f"interrupt {n}".encode())

    def stop(self, reason: str, ranks: range) -> None:
        write_json_atomic(self.folder / "stop", {"reason": reason}, mode=0o600)
        for rank in ranks:
            send(socket_name(self.run_id, rank), b"wake")

    def stopped(self) -> str | None:
        try:
            found = json.loads((self.folder / "stop").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return "stopped"
        return str(found.get("reason") or "stopped") if isinstance(found, dict) else "stopped"

    # -- ranks that died, and their restarts --------------------------------------------
    def dead(self) -> dict[int, dict[str, Any]]:
        """The ranks whose process died and was not restarted yet, with how and when
        (``session_holder`` writes ``dead.<rank>``)."""
        found: dict[int, dict[str, Any]] = {}
        for path in self.folder.glob("dead.*"):
            rank = path.name.split(".", 1)[1]
            try:
                info = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                continue  # restarted meanwhile
            except (OSError, ValueError):
                info = {"how": "died"}
            if rank.isdigit() and isinstance(info, dict):
                found[int(rank)] = info
        return found

    def ask_restart(self, rank: int, n: int, generation: int) -> None:
        """Ask rank ``rank``'s holder for a new worker that starts at request ``n``."""
        path = self.folder / f"restart.{rank}"
        write_json_atomic(path, {"request": n, "generation": generation}, mode=0o600)

    def restarts(self) -> list[dict[str, Any]]:
        """The ranks restarted so far, oldest first: ``{"ranks", "at", "generation",
        "request", "how", "lost"}`` (the names their namespaces lost)."""
        try:
            found = json.loads((self.folder / RESTARTS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []

    def add_restart(self, entry: dict[str, Any]) -> None:
        write_json_atomic(self.folder / RESTARTS_FILE, [*self.restarts(), entry], mode=0o600)

    # -- what the ranks hold --------------------------------------------------------------
    def names(self) -> set[str]:
        try:
            found = json.loads((self.folder / NAMES_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return set()
        return {n for n in found if isinstance(n, str)} if isinstance(found, list) else set()

    def add_names(self, names: set[str]) -> None:
        known = self.names()
        if not names <= known:
            write_json_atomic(self.folder / NAMES_FILE, sorted(known | names), mode=0o600)


def send(name: bytes, data: bytes) -> None:
    """A datagram to the abstract Unix socket ``name``; nothing when nobody listens there
    (a rank on another node: it finds the files by looking)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.sendto(data, name)
    except OSError:
        pass
    finally:
        sock.close()


def client_socket(run_id: str) -> tuple[socket.socket, str]:
    """A socket the ranks' answers wake, and its name as a request carries it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"\0jt-session-client-{run_id}-{os.getpid()}-{os.urandom(6).hex()}"
    sock.bind(name.encode())
    return sock, name
