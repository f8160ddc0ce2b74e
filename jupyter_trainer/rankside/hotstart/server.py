"""The pool's serving loop: fork ranks on request (``warm`` starts the process).

The pool listens on its socket (mode 0600, in a 0700 folder) and serves one JSON line per
request on each connection:

- ``{"op": "run", "run_dir", "cwd", "log", "argv", "ranks": [{"rank", "env"}], ...}``: fork
  the ranks into one new process group, record them in the run folder, then let them run;
  answer ``{"ok": true, "pool", "pgid", "ranks": {r: {"pid", "start_ticks"}}}`` and later one
  ``{"rank": r, "exit": code}`` per rank and ``{"done": true, "exit": code}`` (0, or 1 when a
  rank failed, as torchrun exits), once what the ranks left behind outside the run's
  process group has ended too (``left_behind``). A rank that fails ends the others (SIGTERM, then SIGKILL
  after ``KILL_GRACE_S``), as torchrun does; so does the client's going away (its
  connection closes, or its process ends; with ``"supervisor_grace": S``, S seconds after
  the supervisor's end, so that whoever follows the run sees that end first).
- ``{"op": "stop"}`` on a run's connection: end its ranks as a failing rank would (the
  client, a node's launcher that got SIGTERM, still reads their exits and ``done``).
- ``{"op": "ping"}``: ``{"ok": true, "pool": pid}``, or ``{"ok": false, "why": ...}``.

A run request with ``"store": {"port": P}`` has the pool bind and listen on the
rendezvous port itself before it forks (P = 0: any free port), so the port is held from the
moment it is chosen: the ranks get it as ``MASTER_PORT``, rank 0 gets the listening socket
(``JT_STORE_LISTEN_FD``) and hosts the store on it, as torchrun's agent hosts its store on a
port it holds. A port chosen by probing and releasing could be taken by another process
before rank 0 binds it (seconds later, after its imports), and the run's ranks would then
rendezvous with a stranger.

Single-threaded on purpose: ``PR_SET_PDEATHSIG`` fires when the *thread* that forked a rank
ends, so every fork happens on the one thread that lives as long as the pool.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from ..host import procs
from . import left_behind
from .records import RUN_RECORD, write_json

KILL_GRACE_S = 10.0  # SIGTERM -> SIGKILL for the ranks of a run that is ending
DEFAULT_IDLE_S = 600.0


def unix_address(path: str) -> tuple[str, int | None]:
    """An address for ``path`` that fits AF_UNIX's 108 bytes: through ``/proc/self/fd`` of
    an open folder when the path itself is too long. Close the returned fd after use."""
    if len(os.fsencode(path)) < 100:
        return path, None
    folder = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{folder}/{os.path.basename(path)}", folder


def _listen(where: dict[str, Any]) -> socket.socket:
    """A socket listening on the rendezvous port ``where["port"]`` (0: any free one) of
    every address, IPv4 and IPv6, as torch's own store server listens, for rank 0 to host
    the run's store on."""
    port = int(where.get("port") or 0)
    try:
        return socket.create_server(
            ("", port), family=socket.AF_INET6, backlog=512, reuse_port=False, dualstack_ipv6=True
        )
    except OSError:
        pass  # no IPv6 on this node
    try:
        return socket.create_server(("", port), family=socket.AF_INET, backlog=512)
    except OSError as exc:
        raise OSError(
            f"the rendezvous port {port or '(any)'} of this node cannot be listened "
            f"on: {exc.strerror or exc}"
        ) from None


class _Run:
    def __init__(self, conn: socket.socket, pgid: int) -> None:
        self.conn, self.pgid = conn, pgid
        self.ranks: dict[int, int] = {}  # pid -> rank
        self.fds: dict[int, int] = {}  # pidfd -> pid
        self.failed = False
        self.kill_at: float | None = None
        self.end_at: float | None = None  # the supervisor ended: end the ranks then
        self.supervisor_fd: int | None = None
        self.supervisor_grace = 0.0
        self.record: dict[str, Any] = {}  # what the run folder's RUN_RECORD says
        self.record_path = ""
        # its ranks have all ended: what they left behind is being ended (left_behind)
        self.ending_since: float | None = None
        self.killed = False  # ... and has had SIGKILL


class Pool:
    def __init__(
        self,
        sock: socket.socket,
        idle: float,
        refused: str | None,
        watched: dict[str, float],
        lock_fd: int,
    ) -> None:
        self.sock, self.idle, self.refused, self.watched = sock, idle, refused, watched
        self.lock_fd = lock_fd
        self.sel = selectors.DefaultSelector()
        self.sel.register(sock, selectors.EVENT_READ, ("accept", None))
        self.buffers: dict[socket.socket, bytes] = {}
        self.runs: dict[int, _Run] = {}
        self.served = 0
        self.stopping = False
        self.last_busy = time.monotonic()
        self.left = left_behind.LeftBehind(self.sel)

    # -- the loop --------------------------------------------------------------------
    def serve(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        procs.become_subreaper()  # what a rank leaves behind comes here when it ends
        while not self.stopping:
            now = time.monotonic()
            deadlines = [
                t for r in self.runs.values() for t in (r.kill_at, r.end_at) if t is not None
            ]
            deadlines += [now + 0.05 for r in self.runs.values() if r.ending_since is not None]
            if not self.runs and not self.buffers:
                deadlines.append(self.last_busy + self.idle)
            timeout = max(0.0, min(deadlines) - now) if deadlines else None
            for key, _ in self.sel.select(min(timeout, 1.0) if timeout is not None else 1.0):
                kind, obj = key.data
                getattr(self, f"_on_{kind}")(key.fileobj, obj)
            now = time.monotonic()
            for run in list(self.runs.values()):
                if run.end_at is not None and now >= run.end_at:
                    run.end_at = None
                    self._end(run)
                if run.kill_at is not None and now >= run.kill_at:
                    procs.signal_group(run.pgid, signal.SIGKILL)
                    run.kill_at = None
                if run.ending_since is not None:
                    self._end_left_behind(run, now)
            if self.runs or self.buffers:
                self.last_busy = now
            elif now - self.last_busy >= self.idle:
                break
        for run in self.runs.values():
            procs.signal_group(run.pgid, signal.SIGKILL)
        self.left.close()

    def _on_accept(self, sock: socket.socket, _: Any) -> None:
        try:
            conn, _addr = sock.accept()
        except OSError:
            return
        self.buffers[conn] = b""
        self.sel.register(conn, selectors.EVENT_READ, ("conn", None))

    def _on_conn(self, conn: socket.socket, _: Any) -> None:
        try:
            data = conn.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        self.buffers[conn] += data
        while b"\n" in self.buffers.get(conn, b""):
            line, self.buffers[conn] = self.buffers[conn].split(b"\n", 1)
            try:
                request = json.loads(line)
            except ValueError:
                self._send(conn, {"ok": False, "why": "a request is one JSON object per line"})
                continue
            self._answer(conn, request)

    def _on_rank(self, fd: int, run: _Run) -> None:
        pid = run.fds.pop(fd)
        self.sel.unregister(fd)
        os.close(fd)
        try:
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            code = -signal.SIGKILL
        rank = run.ranks[pid]
        self.left.adopt({(run.pgid, rank)}, self._live_ranks())
        self._send(run.conn, {"rank": rank, "exit": code})
        if code != 0 and not run.failed:
            run.failed = True
            if run.fds:  # as torchrun does: one rank failed, so the others are stopped
                self._end(run)
        if not run.fds:  # the ranks' ending is over; what they left behind ends now
            run.kill_at = run.end_at = None
            run.ending_since = time.monotonic()
            self._end_left_behind(run, run.ending_since)

    def _on_adopted(self, fd: int, pid: int) -> None:
        self.left.adopt(self.left.collect(pid), self._live_ranks())

    def _live_ranks(self) -> dict[int, tuple[int, int]]:
        """The ranks whose exit is still to be collected: pid -> (run's group, rank)."""
        return {p: (r.pgid, r.ranks[p]) for r in self.runs.values() for p in r.fds.values()}

    def _on_supervisor(self, fd: int, run: _Run) -> None:
        self.sel.unregister(fd)
        os.close(fd)
        run.supervisor_fd = None
        self._orphaned(run)

    # -- requests --------------------------------------------------------------------
    def _answer(self, conn: socket.socket, request: dict[str, Any]) -> None:
        if request.get("op") == "stop":
            for run in list(self.runs.values()):
                if run.conn is conn:
                    self._end(run)
            return
        why = self.refused or self._stale()
        if why or request.get("op") == "ping":
            self._send(
                conn, {"ok": not why, "pool": os.getpid(), "why": why, "served": self.served}
            )
            if why and not self.refused:  # a changed package: let a new pool take the key
                self.stopping = True
            return
        if request.get("op") != "run":
            self._send(conn, {"ok": False, "why": f"unknown request {request.get('op')!r}"})
            return
        try:
            self._send(conn, self._fork(conn, request))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            self._send(conn, {"ok": False, "why": f"the pool could not fork the ranks: {exc}"})

    def _stale(self) -> str | None:
        for path, mtime in self.watched.items():
            try:
                if os.stat(path).st_mtime != mtime:
                    return f"{path} changed since the pool imported it"
            except OSError:
                return f"{path} is gone since the pool imported it"
        return None

    def _fork(self, conn: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
        from .child import STORE_FD_ENV

        store = _listen(request["store"]) if request.get("store") else None
        try:
            if store is not None:
                port = str(store.getsockname()[1])
                for rank in request["ranks"]:
                    rank["env"]["MASTER_PORT"] = port
                    if int(rank["rank"]) == 0:
                        rank["env"][STORE_FD_ENV] = str(store.fileno())
            return self._fork_ranks(conn, request, store)
        finally:
            if store is not None:
                store.close()  # rank 0 has it now

    def _fork_ranks(
        self, conn: socket.socket, request: dict[str, Any], store: socket.socket | None
    ) -> dict[str, Any]:
        from .child import run_rank

        go_read, go_write = os.pipe()
        own = [
            self.sock.fileno(),
            self.lock_fd,
            *(c.fileno() for c in self.buffers),
            *(fd for r in self.runs.values() for fd in r.fds),
            *(r.supervisor_fd for r in self.runs.values() if r.supervisor_fd is not None),
            *(known.fd for known in self.left.adopted.values()),
        ]
        pool, pgid, pids = os.getpid(), 0, {}
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            for rank in request["ranks"]:
                pid = os.fork()
                if pid == 0:
                    os.close(go_write)
                    os.read(go_read, 1)  # wait until the pool has recorded every rank
                    os.close(go_read)
                    keep_store = store is not None and int(rank["rank"]) == 0
                    run_rank(
                        request,
                        rank,
                        pool,
                        pgid,
                        own + ([store.fileno()] if store and not keep_store else []),
                    )
                pgid = pgid or pid
                try:
                    os.setpgid(pid, pgid)
                except OSError:
                    pass  # the child has set it already
                pids[pid] = int(rank["rank"])
        except BaseException:
            procs.signal_pids(list(pids), signal.SIGKILL)
            for pid in pids:
                os.waitpid(pid, 0)
            os.close(go_read)
            os.close(go_write)
            raise
        os.close(go_read)
        ranks = {str(r): {"pid": p, "start_ticks": procs.start_ticks(p)} for p, r in pids.items()}
        record = {
            "pool": pool,
            "pool_start_ticks": procs.start_ticks(pool),
            "pgid": pgid,
            "session": os.getsid(0),
            "ranks": ranks,
            "run_id": request.get("run_id"),
        }
        if store is not None:
            record["master_port"] = store.getsockname()[1]
        write_json(Path(request["run_dir"], RUN_RECORD), record)
        os.close(go_write)  # the ranks go
        run = _Run(conn, pgid)
        run.record, run.record_path = record, str(Path(request["run_dir"], RUN_RECORD))
        self.left.logs[pgid] = request["log"]
        for pid, rank in pids.items():
            fd = os.pidfd_open(pid)
            run.ranks[pid] = rank
            run.fds[fd] = pid
            self.sel.register(fd, selectors.EVENT_READ, ("rank", run))
        sup = request.get("supervisor") or {}
        run.supervisor_grace = float(request.get("supervisor_grace") or 0.0)
        if procs.is_alive(sup.get("pid"), sup.get("start_ticks")):
            try:
                run.supervisor_fd = os.pidfd_open(sup["pid"])
                self.sel.register(run.supervisor_fd, selectors.EVENT_READ, ("supervisor", run))
            except OSError:
                run.supervisor_fd = None
        self.runs[pgid] = run
        self.served += 1
        return {"ok": True, **record}

    # -- ending ----------------------------------------------------------------------
    def _end_left_behind(self, run: _Run, now: float) -> None:
        """End what the run's ranks left behind outside its group (``left_behind``), then
        report the run's end: once those are gone, or ``GONE_S`` after their SIGKILL."""
        alive, new = self.left.end(run.pgid)
        if new:  # the leftover checks see them too, until they are gone
            run.record.setdefault("left_behind", []).extend(
                {"pid": pid, "start_ticks": ticks} for pid, ticks in new
            )
            try:
                write_json(run.record_path, run.record)
            except OSError:
                pass
        waited = now - (run.ending_since or now)
        if alive and not run.killed and waited >= left_behind.GRACE_S:
            self.left.kill(run.pgid, alive)
            run.killed = True
        if not alive or waited >= left_behind.GRACE_S + left_behind.GONE_S:
            self._send(run.conn, {"done": True, "exit": 1 if run.failed else 0})
            self._close_run(run)

    def _end(self, run: _Run) -> None:
        """Stop a run's ranks: SIGTERM now, SIGKILL after KILL_GRACE_S."""
        if run.fds:
            procs.signal_group(run.pgid, signal.SIGTERM)
            if run.kill_at is None:
                run.kill_at = time.monotonic() + KILL_GRACE_S

    def _orphaned(self, run: _Run) -> None:
        """The run's client or supervisor is gone: end its ranks, now or after its grace."""
        if run.supervisor_grace <= 0:
            self._end(run)
        elif run.end_at is None and run.kill_at is None:
            run.end_at = time.monotonic() + run.supervisor_grace

    def _close_run(self, run: _Run) -> None:
        self.runs.pop(run.pgid, None)
        self.left.forget(run.pgid)
        if run.supervisor_fd is not None:
            self.sel.unregister(run.supervisor_fd)
            os.close(run.supervisor_fd)
            run.supervisor_fd = None

    def _drop(self, conn: socket.socket) -> None:
        self.sel.unregister(conn)
        self.buffers.pop(conn, None)
        conn.close()
        for run in list(self.runs.values()):
            if run.conn is conn:  # the client went away while its ranks run
                self._orphaned(run)

    def _send(self, conn: socket.socket, message: dict[str, Any]) -> None:
        if conn not in self.buffers:
            return
        try:
            conn.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            pass
