"""A held Slurm allocation's keeper on one node (see ``targets/slurm/hold.py``).

``python keeper.py HOME IDLE_S``: one task on each node of the allocation's first step,
which lasts as long as the allocation. Slurm ends a step with every process in it, so a pool
started from a run's own step would die with that run: a run's launcher asks this keeper to
start the node's pools instead (``spawn``), and they live in the keeper's step, warm for the
next run. While a run trains, its launchers hold a ``lease``. When no lease has been held
for ``IDLE_S`` seconds, or Slurm ends the step (SIGTERM), the keeper stops the pools it
started and exits, and with it the allocation's job.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .records import POOLS_DIR, own_pools, read_json
from .server import unix_address

SPAWN_TIMEOUT_S = 60.0


def keeper_socket(home: str | os.PathLike, job_id: str, host: str) -> Path:
    """Where the keeper of ``job_id`` on ``host`` listens (a node reaches only its own): in
    this user's pool folder, refused (``PoolUnavailable``) when that is not theirs alone,
    since a keeper starts pools with the variables its callers send it."""
    return own_pools(Path(home, POOLS_DIR)) / f"keeper-{job_id}-{host}.sock"


def spawn(argv: Sequence[str], env: dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    """What a pool's starter would do, done by the keeper (in its step)."""
    return subprocess.run(
        list(argv),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=SPAWN_TIMEOUT_S,
        start_new_session=True,
    )


class Keeper:
    def __init__(self, sock: socket.socket, idle: float) -> None:
        self.sock, self.idle = sock, idle
        self.leases: dict[socket.socket, bytes] = {}
        self.others: dict[socket.socket, bytes] = {}
        self.pools: list[Path] = []  # the records of the pools this keeper started
        self.last_used = time.monotonic()
        self.stopping = False

    def serve(self) -> None:
        while not self.stopping:
            if not self.leases and time.monotonic() - self.last_used > self.idle:
                print(f"[jt keeper] idle for {self.idle:g} s: ending the allocation", flush=True)
                return
            try:
                ready, _, _ = select.select([self.sock, *self.leases, *self.others], [], [], 1.0)
            except InterruptedError:
                continue
            for conn in ready:
                if conn is self.sock:
                    self._accept()
                else:
                    self._read(conn)

    def _accept(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        self.others[conn] = b""
        self.last_used = time.monotonic()

    def _read(self, conn: socket.socket) -> None:
        held = conn in self.leases
        table = self.leases if held else self.others
        try:
            chunk = conn.recv(1 << 16)
        except OSError:
            chunk = b""
        if not chunk:  # a lease ends with its launcher's connection
            table.pop(conn, None)
            conn.close()
            self.last_used = time.monotonic()
            return
        table[conn] += chunk
        if held or b"\n" not in table[conn]:
            return
        line = table.pop(conn).split(b"\n", 1)[0]
        try:
            reply = self._answer(json.loads(line), conn)
        except (ValueError, KeyError, TypeError, OSError, subprocess.SubprocessError) as exc:
            reply = {"ok": False, "why": f"{type(exc).__name__}: {exc}"}
        try:
            conn.sendall(json.dumps(reply).encode() + b"\n")
        except OSError:
            self.leases.pop(conn, None)
        if conn not in self.leases:
            conn.close()

    def _answer(self, request: dict[str, Any], conn: socket.socket) -> dict[str, Any]:
        self.last_used = time.monotonic()
        if request["op"] == "lease":
            self.leases[conn] = b""
            return {"ok": True, "keeper": os.getpid()}
        if request["op"] == "spawn":
            done = spawn(request["argv"], request["env"], request["cwd"])
            if request.get("record"):
                self.pools.append(Path(request["record"]))
            return {
                "ok": True,
                "returncode": done.returncode,
                "stderr": done.stderr.decode(errors="replace")[-2000:],
            }
        return {"ok": False, "why": f"unknown op {request['op']!r}"}

    def stop_pools(self) -> None:
        for record in self.pools:
            pid = read_json(record).get("pid")
            if isinstance(pid, int) and pid > 1:
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: keeper.py HOME IDLE_S\n")
        return 2
    path = str(keeper_socket(argv[0], os.environ["SLURM_JOB_ID"], socket.gethostname()))
    idle = float(argv[1])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    address, dir_fd = unix_address(path)
    try:
        sock.bind(address)
        os.chmod(path, 0o600)
        sock.listen(64)
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    keeper = Keeper(sock, idle)

    def on_signal(signum: int, _frame: Any) -> None:
        keeper.stopping = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    print(f"[jt keeper] pid {os.getpid()} listening on {path}", flush=True)
    try:
        keeper.serve()
    finally:
        keeper.stop_pools()
        try:
            os.unlink(path)
        except OSError:
            pass
    return 0
