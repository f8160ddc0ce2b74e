"""A rank's debugger, served to one person at a time on a private socket on the rank's node.

Under ``--debug`` a rank that raises does not exit: boot hands its traceback to ``post_mortem``,
which waits for someone to attach and runs pdb's post-mortem for them. ``jt.breakpoint``
stops a rank where it is called, the same way. Meanwhile the other ranks are held where they
are (in their next collective, waiting for this one), not killed.

The socket is ``rank-<r>.sock`` in a folder of its own that only this user can open
(``tempfile.mkdtemp``: mode 0700), so nobody else on the node can connect. The rank's record
says where it is (``debugging``: the socket, since when, until when, where it stopped), so
the supervisor shows the run as debugging that rank and ``jupyter-trainer debug`` or
``%train debug`` can find it: on this machine directly, on a node through ``debug_relay``
over the target's own transport (ssh, ``srun --overlap``).

The wait has a time limit, for the attach and for every answer after it, counted anew for
each: when it passes, the rank goes on as it would have without a debugger (a post-mortem
rank records its failure and exits). One line a person sends is held up to
``MAX_COMMAND_BYTES``; a longer one is refused, so a client cannot make the rank grow.
Standard library only: it ships in every snapshot.
"""

from __future__ import annotations

import os
import pdb
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from types import FrameType, TracebackType
from typing import Any

from jupyter_trainer.rankside.observe import death_watch
from jupyter_trainer.rankside.rank import cell_run

ENDED_BY_TIME = "time limit"
DEFAULT_LIMIT_S = 1800.0  # core.spec.DEFAULT_DEBUG_TIMEOUT
MAX_COMMAND_BYTES = 1 << 20  # of one line a person sends; what pdb is sent is far shorter
PROMPT = "(Pdb) "
_CELL_MARKER = "# --- cell ---"  # capture.cellscript.CELL_MARKER


class _Stream:
    """pdb's stdin and stdout over the attached connection. Each line read waits at most
    ``limit`` seconds, counted on the monotonic clock from the moment pdb asks (the wall
    clock may be set back or forward meanwhile), and holds at most ``MAX_COMMAND_BYTES`` of
    the line: a longer one is read to its end without being kept, and refused."""

    def __init__(self, conn: socket.socket, limit: float, asking: Callable[[], None]) -> None:
        self.conn, self.limit, self.asking = conn, limit, asking
        self.file = conn.makefile("w", buffering=1, encoding="utf-8", errors="replace")
        self.pending = bytearray()  # what was received after the last line read

    def readline(self) -> str:
        while True:
            self.asking()
            line = self._line(time.monotonic() + self.limit)
            self.conn.settimeout(self.limit)  # for the answer's writes
            if line is not None:
                return line.decode("utf-8", errors="replace")
            self.write(
                f"*** command refused: it is longer than {MAX_COMMAND_BYTES} bytes; "
                f"send a shorter one\n{PROMPT}"
            )
            self.flush()

    def _line(self, deadline: float) -> bytes | None:
        """The next line, its newline included (at the end of the input, what is left of
        it), or None when it was longer than ``MAX_COMMAND_BYTES``."""
        kept, self.pending = self.pending, bytearray()
        searched, too_long = 0, False
        while True:
            end = kept.find(b"\n", searched)
            if end >= 0:
                self.pending = kept[end + 1 :]
                return None if too_long or end > MAX_COMMAND_BYTES else bytes(kept[: end + 1])
            if len(kept) > MAX_COMMAND_BYTES:
                too_long, kept = True, bytearray()
            searched = len(kept)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.conn.settimeout(left)
            data = self.conn.recv(1 << 16)
            if not data:
                return b"" if too_long else bytes(kept)
            kept += data

    def write(self, text: str) -> int:
        return self.file.write(text)

    def flush(self) -> None:
        self.file.flush()


class _Session:
    """One wait for a person, and the pdb session they get."""

    def __init__(self, record_path: str, limit: float, where: str, post_mortem: bool) -> None:
        self.record_path, self.where, self.limit = record_path, where, limit
        self.deadline = time.monotonic() + limit
        self.folder = tempfile.mkdtemp(prefix="jt-debug-")
        rank = os.path.basename(record_path).split(".")[0]  # rank-<r>
        self.path = os.path.join(self.folder, f"{rank}.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.conn: socket.socket | None = None
        self._on_terminate(self._remove_folder)
        now = time.time()
        self._mark(
            {
                "socket": self.path,
                "since": now,
                "until": now + limit,  # shown as a time of day; the wait is timed monotonically
                "where": where,
                "post_mortem": post_mortem,
            }
        )

    def attach(self) -> _Stream | None:
        """The stream of the first person to connect, or None once the time limit passed."""
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                return None
            self.server.settimeout(left)
            try:
                self.conn, _ = self.server.accept()
            except TimeoutError:
                return None
            except InterruptedError:
                continue
            self.conn.settimeout(None)
            self._mark({"attached": time.time()})
            return _Stream(self.conn, self.limit, self._asking)

    def _asking(self) -> None:
        """pdb waits for the next command: the record says until when."""
        self._mark({"until": time.time() + self.limit})

    def close(self) -> None:
        for closable in (self.conn, self.server):
            if closable is not None:
                try:
                    closable.close()
                except OSError:
                    pass
        self._remove_folder()
        self._on_terminate(self._remove_folder, add=False)
        self._mark(None)

    def _remove_folder(self, signum: int | None = None) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    @staticmethod
    def _on_terminate(hook: Any, add: bool = True) -> None:
        """Run ``hook`` first when the rank is ended by a signal (a cancel), since boot's own
        hook records the end and exits at once; or no longer (``add=False``)."""
        from jupyter_trainer.rankside.rank import runtime

        hooks = getattr(runtime, "_terminate_hooks", None)
        if hooks is None:
            return
        if add:
            hooks.insert(0, hook)
        elif hook in hooks:
            hooks.remove(hook)

    def _mark(self, fields: dict[str, Any] | None) -> None:
        """Add ``fields`` to the record's ``debugging``, or remove it (None)."""
        with death_watch.records_locked(os.path.dirname(self.record_path)):
            record = death_watch.read_record(self.record_path)
            if record is None or record.get("pid") != os.getpid():
                return
            if fields is None:
                record.pop("debugging", None)
            else:
                record["debugging"] = {**(record.get("debugging") or {}), **fields}
            death_watch.write_json(self.record_path, record)


class _RankPdb(pdb.Pdb):
    """pdb on the attached connection. ``ended`` says how the session ended when it was not
    by a command: ``ENDED_BY_TIME``, or "detached" when the connection closed. Stopped at a
    breakpoint, a closed connection continues the rank rather than quit it."""

    def __init__(self, stream: _Stream, session: _Session, at_breakpoint: bool) -> None:
        super().__init__(stdin=stream, stdout=stream)  # type: ignore[arg-type]
        self.use_rawinput = False
        self.prompt = PROMPT
        self.session, self.at_breakpoint = session, at_breakpoint
        self.ended: str | None = None

    def canonic(self, filename: str) -> str:
        """A cell's name (``Cell In [7]``) as it is: pdb would make it a path in the working
        directory, where no such file is, and show no line of it."""
        if cell_run.is_cell(filename):
            return filename
        return super().canonic(filename)

    def cmdloop(self, intro: str | None = None) -> None:
        try:
            super().cmdloop(intro)
        except TimeoutError:
            self.ended = ENDED_BY_TIME
        except OSError:
            self.ended = "detached"
        else:
            return
        if self.at_breakpoint:
            self.set_continue()

    def do_EOF(self, arg: str) -> bool | None:
        if not self.at_breakpoint:
            return super().do_EOF(arg)
        self.ended = "detached"
        self.set_continue()
        return True

    def set_continue(self) -> None:
        super().set_continue()
        if self.at_breakpoint:
            self.session.close()

    def set_quit(self) -> None:
        super().set_quit()
        if self.at_breakpoint:
            self.session.close()


def post_mortem(record_path: str, limit: float, tb: TracebackType, where: str) -> str:
    """Wait up to ``limit`` seconds for someone to attach, then run pdb's post-mortem on
    ``tb`` for them until they quit or continue. How it ended: "quit", or ``ENDED_BY_TIME``
    (nobody came, or nobody answered in time), or "detached" (the connection closed)."""
    session = _Session(record_path, limit, where, post_mortem=True)
    print(f"[jt] waiting for a debugger: {where}", file=sys.stderr, flush=True)
    try:
        stream = session.attach()
        if stream is None:
            return ENDED_BY_TIME
        debugger = _RankPdb(stream, session, at_breakpoint=False)
        stream.write(f"[jt] post-mortem of {where}\n")
        try:
            debugger.reset()
            debugger.interaction(None, tb)
        except OSError:
            return "detached"
        return debugger.ended or "quit"
    finally:
        session.close()


def breakpoint_here(record_path: str, limit: float, frame: FrameType, where: str) -> None:
    """Stop in pdb at ``frame`` (the caller of ``jt.breakpoint``) for whoever attaches within
    ``limit`` seconds; without anyone, go on. ``c`` (or closing the connection) goes on and
    detaches; ``q`` ends the rank with ``bdb.BdbQuit``, as pdb's own ``breakpoint()`` does."""
    session = _Session(record_path, limit, where, post_mortem=False)
    print(f"[jt] waiting for a debugger: {where}", file=sys.stderr, flush=True)
    stream = session.attach()
    if stream is None:
        session.close()
        return
    stream.write(f"[jt] stopped at {where}\n")
    _RankPdb(stream, session, at_breakpoint=True).set_trace(frame)


def rank_breakpoint(rank: int | Iterable[int] | None = None, timeout: float | None = None) -> None:
    """``jt.breakpoint``: stop this rank here in pdb, for ``jupyter-trainer debug RUN`` or
    ``%train debug RUN`` to attach to. ``rank`` picks the ranks that stop (one, several, or
    None for every rank); the others go on. It waits ``timeout`` seconds for someone to
    attach (default: the run's ``--debug-timeout``, else 30 minutes), then goes on. Outside
    a run it is pdb's own ``set_trace``, in the terminal."""
    from jupyter_trainer.rankside.rank import run_inputs, runtime

    picked = rank is None or (
        runtime.rank == rank if isinstance(rank, int) else runtime.rank in set(rank)
    )
    if not picked:
        return
    frame = sys._getframe(1)
    run_dir = os.environ.get("JT_RUN_DIR")
    if not run_dir:
        pdb.Pdb().set_trace(frame)
        return
    if timeout is None:
        timeout = (run_inputs.from_spec(run_dir, "watch") or {}).get("debug") or DEFAULT_LIMIT_S
    where = f"rank {runtime.rank}: jt.breakpoint() at {_place(frame)}"
    record_path = os.path.join(run_dir, "ranks", f"rank-{runtime.rank}.json")
    breakpoint_here(record_path, float(timeout), frame, where)


def _place(frame: FrameType) -> str:
    """``file:line`` of ``frame``; in a notebook cell, the cell's name and its own line
    (``Cell In [7], line 9``), as tracebacks and pdb give it (``cell_run``)."""
    file, line = frame.f_code.co_filename, frame.f_lineno
    if cell_run.is_cell(file):
        return f"{file}, line {line}"
    if os.path.basename(file) == "cell.py" and os.path.basename(os.path.dirname(file)) == "_jt":
        try:  # a cell's script run whole (an older snapshot): its lines below the marker
            with open(file, encoding="utf-8") as f:
                marker = f.read().splitlines().index(_CELL_MARKER) + 1
        except (OSError, ValueError):
            marker = 0
        if 0 < marker < line:
            return f"the cell, line {line - marker}"
    return f"{os.path.basename(file)}:{line}"
