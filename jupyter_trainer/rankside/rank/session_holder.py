"""A session rank that outlives the death of its namespace: the launched rank process holds
the rank, and a process forked from it (the worker) runs the cell loop
(``session_loop.Loop``) with the namespace and the process group.

When the worker dies (a crash, ``os._exit``, ``kill``, the OOM killer), the launcher sees no
rank end, so it stops none of the others: the holder writes ``dead.<rank>`` in the session's
folder (``{"rank", "pid", "how", "at", "generation"}``) and waits. The notebook restarts the
rank by writing request ``n`` (``{"op": "regroup", "generation": g}``) and then
``restart.<rank>`` (``{"request": n, "generation": g}``): the holder forks a new worker, whose
loop starts at request ``n``, and every rank, the survivors keeping their namespaces, forms
a new process group there (``session_loop.regroup``). The new worker's namespace is empty.

A stop (``stop`` in the folder) while the rank is dead ends the holder as it ends the others.
Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from jupyter_trainer.rankside.host.atomic import write_json_atomic
from jupyter_trainer.rankside.rank import session_loop

POLL = 0.25  # seconds between looks for a restart while the worker is dead


def hold(folder: str, run_id: str, idle: float) -> str:
    """Run the rank's workers, one at a time, until the session is stopped; the reason."""
    from jupyter_trainer.rankside.rank import runtime

    rank = runtime.rank
    beats = runtime._beat_on
    _quiet(runtime)  # the worker writes the rank's events, heartbeat and system figures
    generation, start = 0, 0
    while True:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _become_rank(runtime, beats)
                worker(folder, run_id, idle, generation, start)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                _leave(runtime, code)
        how = _waited(pid)
        stopped = session_loop.stop_reason(folder)
        if how is None or stopped is not None:
            return stopped or "stopped"
        died = time.time()
        write_json_atomic(
            os.path.join(folder, f"dead.{rank}"),
            {"rank": rank, "pid": pid, "how": how, "at": died, "generation": generation},
            mode=0o600,
        )
        print(
            f"[jt] session rank {rank} died ({how}); the other ranks go on: restart it with "
            f"`%train session restart NAME --rank {rank}` (its namespace will be empty)",
            file=sys.stderr,
            flush=True,
        )
        asked = _restart_asked(folder, rank, generation, died, idle)
        if asked is None:
            return session_loop.stop_reason(folder) or "stopped"
        generation, start = asked
        try:
            os.unlink(os.path.join(folder, f"dead.{rank}"))
        except FileNotFoundError:
            pass


def worker(folder: str, run_id: str, idle: float, generation: int, start: int) -> None:
    """The rank's cell loop in this (forked) process, from request ``start + 1`` on; the first
    worker joins the process group as torchrun's ranks do, a restarted one in its first
    request (the regroup)."""
    from jupyter_trainer.rankside.host.procs import die_with_parent
    from jupyter_trainer.rankside.rank import runtime

    die_with_parent()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _own_rank_record(runtime.rank)
    if generation == 0:
        session_loop.join_group()
    loop = session_loop.Loop(folder, runtime.rank, run_id, idle, start=start)
    again = f" again (generation {generation})" if generation else ""
    print(f"[jt] session rank {runtime.rank} ready{again}", flush=True)
    reason = loop.serve()
    print(f"[jt] session ended: {reason}", flush=True)


def _waited(pid: int) -> str | None:
    """How the worker ``pid`` ended: None when it ended well, else what killed it."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            return "lost"
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    code = os.WEXITSTATUS(status)
    return None if code == 0 else f"exited with {code}"


def _restart_asked(
    folder: str, rank: int, generation: int, since: float, idle: float
) -> tuple[int, int] | None:
    """``(generation, start)`` of the restart the notebook asks for; None once stopped (rank 0
    stops an idle session here as its worker would)."""
    path = os.path.join(folder, f"restart.{rank}")
    while session_loop.stop_reason(folder) is None:
        try:
            with open(path, encoding="utf-8") as f:
                asked = json.load(f)
            if int(asked["generation"]) > generation:
                return int(asked["generation"]), int(asked["request"]) - 1
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if rank == 0 and time.time() - since > idle:
            write_json_atomic(os.path.join(folder, "stop"), {"reason": f"idle for {idle:g} s"})
        time.sleep(POLL)
    return None


def _quiet(runtime: Any) -> None:
    """The holder writes no heartbeat, events or system figures of its own: its worker is
    the rank's process that every view watches."""
    runtime.flush()  # what it logged so far (the session's tag) is written once
    runtime._beat_on = False
    runtime._closed = True  # its flusher thread ends
    # No thread may be inside an import when the worker is forked: the worker would wait
    # for that module's lock for ever. So the flusher is waited for, and torch is imported
    # here, on this thread, once (a restarted worker finds it loaded, too).
    flusher = runtime._flusher
    if flusher is not None and flusher is not threading.current_thread():
        flusher.join(5.0)
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        pass


def _become_rank(runtime: Any, beats: bool) -> None:
    """Make this forked worker the rank's process for the runtime: its pid in the heartbeat
    and system figures, its own flusher, SIGTERM handled as a rank's."""
    runtime._pid = os.getpid()
    runtime._heart = None
    runtime._beat_on = beats
    runtime._closed = False
    runtime._install()
    runtime._start_heartbeat()


def _own_rank_record(rank: int) -> None:
    """Name this worker in the rank's record (``ranks/rank-<r>.json``), so a stack or a stall
    is read from the process that runs the cells."""
    run_dir = os.environ.get("JT_RUN_DIR")
    if not run_dir:
        return
    path = os.path.join(run_dir, "ranks", f"rank-{rank}.json")
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        write_json_atomic(path, {**record, "pid": os.getpid()})
    except (OSError, ValueError):
        pass


def _leave(runtime: Any, code: int) -> None:
    """End the worker: its events written, its process group released, past the native
    teardown (which can abort a finished rank)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass
    try:
        runtime.flush()
    except Exception:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    """A session rank's entry: the cell loop, its process held (``--hold``) or not."""
    session_loop.main(argv, held=hold)
