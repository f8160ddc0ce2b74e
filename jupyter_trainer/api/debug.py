"""Attaching to a rank that waits in a debugger, under ``--debug`` or at ``jt.breakpoint``:
from a terminal (``jupyter-trainer debug RUN``), the notebook (``%train debug RUN``) or Python
(``Run.debug``).

The rank serves pdb on a private socket on its node and says where in its record
(``rankside/debug/debugger.py``). On this host the socket is connected to directly; on a node the
run's target starts the relay there over its own transport (``Target.debug_relay``: ssh,
``srun --overlap``).
"""

from __future__ import annotations

import os
import select
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from ..core.errors import RunStateError, SpecError, TargetError
from ..store import TERMINAL, Store
from ..store.attempts import current_records
from ..targets import get_target
from ..targets.base import debug_socket

PROMPT = "(Pdb) "
READ_S = 30.0  # how long ``read`` waits for pdb to finish answering


class DebugSession:
    """A connection to the pdb of one rank: ``command("p lr")`` sends a line and returns
    pdb's answer up to its next prompt; ``ended`` once pdb is done (the rank goes on to
    fail, or to run on after a breakpoint)."""

    def __init__(self, rank: int, where: str, conn: socket.socket | None, relay: Any) -> None:
        self.rank, self.where = rank, where
        self.conn, self.relay = conn, relay
        self.ended = False

    def _fd(self) -> int:
        return self.conn.fileno() if self.conn is not None else self.relay.stdout.fileno()

    def _chunk(self) -> bytes:
        if self.conn is not None:
            return self.conn.recv(65536)
        return os.read(self._fd(), 65536)

    def read(self, timeout: float = READ_S) -> str:
        """What pdb writes until its prompt (included), or until it ends."""
        got = b""
        deadline = time.monotonic() + timeout
        while not self.ended and not got.endswith(PROMPT.encode()):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._fd()], [], [], left)[0]:
                raise TimeoutError(f"rank {self.rank}'s debugger said nothing for {timeout:g} s")
            chunk = self._chunk()
            if not chunk:
                self.ended = True
            got += chunk
        return got.decode("utf-8", errors="replace")

    def send(self, line: str) -> None:
        data = (line.rstrip("\n") + "\n").encode()
        try:
            if self.conn is not None:
                self.conn.sendall(data)
            else:
                self.relay.stdin.write(data)
                self.relay.stdin.flush()
        except OSError:  # pdb is gone: the rank went on
            self.ended = True

    def command(self, line: str, timeout: float = READ_S) -> str:
        """Send one pdb command and return its answer, up to the next prompt or pdb's end."""
        self.send(line)
        return self.read(timeout)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.relay is not None:
            for pipe in (self.relay.stdin, self.relay.stdout, self.relay.stderr):
                try:
                    pipe.close()
                except (OSError, AttributeError):
                    pass
            try:
                self.relay.wait(timeout=10)
            except Exception:
                self.relay.kill()
                self.relay.wait()

    def __enter__(self) -> DebugSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def waiting(store: Store, run_id: str) -> dict[int, dict[str, Any]]:
    """The ranks of the run's current attempt that wait in a debugger: rank -> record."""
    records = current_records(store.existing(run_id).ranks)
    return {
        rank: rec
        for rank, rec in sorted(records.items())
        if isinstance(rec.get("debugging"), dict) and rec.get("exit_code") is None
    }


def attach(store: Store, run_id: str, rank: int | None = None, wait: float = 0.0) -> DebugSession:
    """Connect to the debugger of ``rank`` of ``run_id`` (default: the lowest rank that
    waits in one), waiting up to ``wait`` seconds for one to wait."""
    deadline = time.monotonic() + wait
    while True:
        state = store.read_state(run_id)
        found = waiting(store, run_id)
        if (rank is None and found) or rank in found or state.get("status") in TERMINAL:
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if not found:
        raise RunStateError(
            f"no rank of run {run_id} waits in a debugger (its status: {state.get('status')}); "
            "a rank waits in one when it raises in a run started with --debug, or at "
            "jt.breakpoint()"
        )
    if rank is not None and rank not in found:
        raise SpecError(
            f"rank {rank} of run {run_id} does not wait in a debugger; these do: "
            + ", ".join(map(str, found))
        )
    rank = min(found) if rank is None else rank
    record = found[rank]
    entry = record["debugging"]
    path = debug_socket(record)
    spec = store.read_spec(run_id)
    target = get_target(spec.target.name, store.home)
    handle: dict[str, Any] = {**(state.get("launcher") or {}), "python": state.get("python")}
    relay = target.debug_relay(handle, record)
    conn = None
    if relay is None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
        except OSError as exc:
            conn.close()
            raise TargetError(
                f"cannot reach rank {rank}'s debugger at {path}: {exc}; it runs "
                f"on {record.get('host')}"
            ) from None
    return DebugSession(rank, str(entry.get("where") or f"rank {rank}"), conn, relay)


def converse(
    session: DebugSession,
    ask: Callable[[str], str],
    show: Callable[[str], None],
    idle: float = 24 * 3600.0,
) -> None:
    """Run a pdb session for a person: show pdb's words, ask for each command, until pdb
    ends (``q`` or ``c``) or the person's input ends (EOF: the session is closed)."""
    while True:
        text = session.read(idle)
        prompt = text.endswith(PROMPT)
        show(text[: -len(PROMPT)] if prompt else text)
        if session.ended or not prompt:
            return
        try:
            line = ask(PROMPT)
        except EOFError:
            return
        session.send(line)


def terminal(session: DebugSession) -> None:
    """``jupyter-trainer debug``: pdb in this terminal."""
    converse(session, input, lambda text: print(text, end="", flush=True))
    if session.ended:
        print(f"[the debugger of rank {session.rank} ended]", file=sys.stderr)
