"""What every rank of a live session runs: it joins the process group once, then runs the
requests the notebook sends, in order, in one namespace that lives as long as the session.

A session is a run whose script calls ``main()`` (``api/sessions.py`` writes it). Requests
and results are files in the run's ``session/`` folder, so they travel as the run's other
files do; a datagram on a Unix socket only wakes the reader early:

- ``requests/<n>/`` then ``requests/<n>.json``: request ``n`` (counted from 1). The folder
  holds a cell's script as capture renders it (``cell.py``, ``cell_parts.json``,
  ``carried.pkl``) or pushed values (``values.pkl``); the JSON says what to do with it:
  ``{"op": "run" | "pull" | "push", "cell": notebook cell number, "params": {...},
  "expr": "...", "ranks": [..] or null for all, "max_bytes": N, "client": socket name}``;
- ``results/<n>.<rank>.json``: what rank ``rank`` made of it: ``ok``, ``error`` (the
  traceback, with the cell's own name and lines), ``interrupted``, ``seconds``, ``log`` (where
  the request's output starts and ends in the rank's log), ``size`` of a pulled value, whose
  pickle is ``results/<n>.<rank>.pkl``;
- ``ready.<rank>``: the rank has joined the process group and waits for requests;
- ``interrupt.<n>``: interrupt request ``n`` (``KeyboardInterrupt`` in the ranks' cells, the
  session goes on); ``stop``: end the session (``{"reason": ...}``).

Rank 0 writes ``stop`` itself when no request came for ``--idle`` seconds. ``replay()`` runs
a saved session's requests the same way, as an ordinary run.

Standard library only (torch is imported where the rank has it by definition).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

from jupyter_trainer.rankside.host.atomic import write_atomic, write_json_atomic
from jupyter_trainer.rankside.rank import cell_run

POLL = 0.25  # seconds between looks at the folder when no datagram comes
ABANDONED = 60.0  # a request folder without its JSON for this long was given up by its writer
DEFAULT_MAX_BYTES = 64 << 20


def socket_name(run_id: str, rank: int | str) -> bytes:
    """The abstract Unix socket name rank ``rank`` of session ``run_id`` listens on."""
    return f"\0jt-session-{run_id}-{rank}".encode()


class Loop:
    """The requests of one session as one rank sees them."""

    def __init__(self, folder: str, rank: int, run_id: str, idle: float, start: int = 0) -> None:
        self.folder = folder
        self.requests = os.path.join(folder, "requests")
        self.results = os.path.join(folder, "results")
        self.rank = rank
        self.idle = idle
        self.namespace = _main_module().__dict__
        self.done = start  # a restarted rank's loop starts at the request that regroups
        self.current: int | None = None
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.main_thread = threading.get_ident()
        self.sock = _listen(socket_name(run_id, rank))
        for path in (self.requests, self.results):
            os.makedirs(path, mode=0o700, exist_ok=True)
        write_atomic(os.path.join(folder, f"ready.{rank}"), str(os.getpid()))

    # -- waiting ------------------------------------------------------------------------
    def serve(self) -> str:
        """Run requests until the session is stopped; the reason it was."""
        from jupyter_trainer.rankside.rank import runtime

        if self.sock is not None:
            threading.Thread(target=self._listen, name="jt-session", daemon=True).start()
        threading.Thread(target=self._watch_interrupts, name="jt-interrupt", daemon=True).start()
        last = time.monotonic()
        while True:
            try:
                stop = self._stopped()
                if stop is not None:
                    return stop
                request = self._next()
                if request is None:
                    runtime._waiting()
                    if self.rank == 0 and time.monotonic() - last > self.idle:
                        write_json_atomic(
                            os.path.join(self.folder, "stop"),
                            {"reason": f"idle for {self.idle:g} s"},
                        )
                    self.wake.wait(POLL)
                    self.wake.clear()
                    continue
                self.done += 1
                if self.rank in (request.get("ranks") or [self.rank]):
                    self._answer(self.done, request)
                last = time.monotonic()
            except KeyboardInterrupt:
                continue  # an interrupt that came as a request ended: nothing to stop

    def _stopped(self) -> str | None:
        return stop_reason(self.folder)

    def _next(self) -> dict[str, Any] | None:
        n = self.done + 1
        try:
            with open(os.path.join(self.requests, f"{n}.json"), encoding="utf-8") as f:
                request = json.load(f)
        except FileNotFoundError:
            if self._abandoned(n):
                self.done = n
            return None
        return request if isinstance(request, dict) else {"op": "unknown"}

    def _abandoned(self, n: int) -> bool:
        try:
            began = os.stat(os.path.join(self.requests, str(n))).st_mtime
        except FileNotFoundError:
            return False
        return time.time() - began > ABANDONED and os.path.exists(
            os.path.join(self.requests, f"{n + 1}.json")
        )

    def _listen(self) -> None:
        assert self.sock is not None
        while True:
            try:
                words = self.sock.recv(256).split()
            except OSError:
                return
            self.wake.set()
            if len(words) == 2 and words[0] == b"interrupt" and words[1].isdigit():
                self._interrupt_if_asked(int(words[1]))

    def _watch_interrupts(self) -> None:
        while True:
            time.sleep(POLL)
            current = self.current
            if current is not None:
                self._interrupt_if_asked(current)

    def _interrupt_if_asked(self, n: int) -> None:
        """Interrupt request ``n`` if its owner asked: a datagram only says when to look
        (anyone on the host can send one), the file in the owner's folder decides."""
        if os.path.exists(os.path.join(self.folder, f"interrupt.{n}")):
            self._interrupt(n)

    def _interrupt(self, n: int) -> None:
        with self.lock:
            if self.current == n:
                self.current = None  # once: a second datagram finds the cell ended
                signal.pthread_kill(self.main_thread, signal.SIGINT)

    # -- answering ----------------------------------------------------------------------
    def _answer(self, n: int, request: dict[str, Any]) -> None:
        start = _log_size()
        began = time.monotonic()
        result: dict[str, Any] | None = None
        while result is None:
            try:
                result = self._execute(n, request)
            except KeyboardInterrupt:
                result = {"ok": False, "interrupted": True, "error": "KeyboardInterrupt\n"}
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        result.update(seconds=time.monotonic() - began, log=[start, _log_size()])
        path = os.path.join(self.results, f"{n}.{self.rank}.json")
        while True:
            try:
                write_json_atomic(path, result, mode=0o600)
                break
            except KeyboardInterrupt:
                continue
        client = request.get("client")
        if isinstance(client, str) and client:
            _send(client.encode(), f"done {n} {self.rank}".encode())

    def _execute(self, n: int, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        here = os.path.join(self.requests, str(n))
        with self.lock:
            self.current = n
        try:
            if op == "run":
                run_cell(here, request, self.namespace)
                return {"ok": True}
            if op == "pull":
                value = eval(compile(str(request.get("expr")), "<pull>", "eval"), self.namespace)
                return self._pulled(n, value, request)
            if op == "regroup":
                regroup(int(request.get("generation") or 0), self.rank)
                return {"ok": True}
            if op == "push":
                with open(os.path.join(here, "values.pkl"), "rb") as f:
                    blobs = pickle.load(f)
                self.namespace.update({k: pickle.loads(v) for k, v in blobs.items()})
                return {"ok": True, "names": sorted(blobs)}
            return {"ok": False, "error": f"this rank does not know the request {op!r}\n"}
        except BaseException as exc:
            interrupted = isinstance(exc, KeyboardInterrupt)
            return {"ok": False, "interrupted": interrupted, "error": cell_traceback(exc)}
        finally:
            with self.lock:
                self.current = None

    def _pulled(self, n: int, value: Any, request: dict[str, Any]) -> dict[str, Any]:
        limit = request.get("max_bytes") or DEFAULT_MAX_BYTES
        try:
            data = _to_host_pickle(value)
        except Exception as exc:
            return {
                "ok": False,
                "error": f"the value of {request.get('expr')!r} cannot be sent back "
                f"({type(exc).__name__}: {exc}); pull a part of it that pickles "
                "(a number, a tensor, a state_dict)\n",
            }
        if len(data) > limit:
            return {
                "ok": False,
                "error": f"the value of {request.get('expr')!r} is {len(data)} bytes pickled, "
                f"over the limit of {limit}; pull a smaller part of it, or raise "
                "max_bytes\n",
            }
        write_atomic(os.path.join(self.results, f"{n}.{self.rank}.pkl"), data, mode=0o600)
        return {"ok": True, "size": len(data)}


def run_cell(here: str, request: dict[str, Any], namespace: dict[str, Any]) -> None:
    """Run the cell whose script is ``here/cell.py`` in ``namespace``, its parameters set
    where the script reads them (``jt.params``), each part under its cell's name."""
    from jupyter_trainer.rankside.rank import runtime

    entry = os.path.join(here, "cell.py")
    codes = cell_run.compile_parts(
        entry, cell_run.parts_of(entry) or [], cell_run.cell_name(request.get("cell"))
    )
    params = request.get("params")
    runtime.params = dict(params) if isinstance(params, dict) else {}
    namespace["__file__"] = entry
    for code in codes:
        exec(code, namespace)


def cell_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` from the cell's first frame on, as IPython cites a cell."""
    tb = exc.__traceback__
    while tb is not None and not cell_run.is_cell(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    if tb is None:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
    return cell_run.cited("".join(traceback.format_exception(type(exc), exc, tb)))


def _to_host_pickle(value: Any) -> bytes:
    """``value`` pickled with every tensor on a GPU moved to the host first, so the notebook
    that loads it never needs CUDA."""
    import io

    torch = sys.modules.get("torch")

    class HostPickler(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if torch is not None and isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
                return obj.detach().cpu().__reduce_ex__(pickle.DEFAULT_PROTOCOL)
            return NotImplemented

    out = io.BytesIO()
    HostPickler(out, protocol=pickle.DEFAULT_PROTOCOL).dump(value)
    return out.getvalue()


def _main_module() -> types.ModuleType:
    """A ``__main__`` of the session's own, kept for its life, so classes its cells define
    pickle by reference as a notebook's do."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__cached__=None, __loader__=None, __package__="", __spec__=None)
    sys.modules["__main__"] = main
    return main


def _log_size() -> int:
    try:
        return os.fstat(1).st_size
    except OSError:
        return 0


def _listen(name: bytes) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(name)
    except OSError:
        sock.close()
        return None  # the folder alone carries the requests, looked at every POLL seconds
    return sock


def _send(name: bytes, data: bytes) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.sendto(data, name)
    except OSError:
        pass  # nobody listens (the notebook went away): the result file says the same
    finally:
        sock.close()


def join_group() -> None:
    """Join the process group as ``torch.distributed.init_process_group()`` under torchrun
    would (``env://``), with the run's backend; nothing where torch is not installed."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return
    from jupyter_trainer.rankside.rank import runtime

    if not dist.is_available() or dist.is_initialized() or "MASTER_ADDR" not in os.environ:
        return
    backend = runtime.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(runtime.local_rank)
    dist.init_process_group(backend)


_stores: list[Any] = []  # the store of the newest group (rank 0 serves it): kept alive


def regroup(generation: int, rank: int) -> None:
    """Form the session's process group anew, as generation ``generation``: a rank that was
    restarted cannot join the old one, so every rank leaves it (a survivor keeps its
    namespace) and all join a new one, on a store rank 0 serves at MASTER_ADDR, port
    MASTER_PORT + generation."""
    import datetime

    import torch.distributed as dist

    from jupyter_trainer.rankside.rank import runtime

    backend = (dist.get_backend() if dist.is_initialized() else None) or runtime.backend
    if dist.is_initialized():
        dist.destroy_process_group()
    world = int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]) + generation,
        world,
        is_master=rank == 0,
        timeout=datetime.timedelta(seconds=120),
    )
    _stores[:] = [store]
    if backend is None:
        import torch

        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"jt-session-{generation}", store),
        rank=rank,
        world_size=world,
    )


def stop_reason(folder: str) -> str | None:
    """Why the session in ``folder`` was stopped; None while it was not."""
    try:
        with open(os.path.join(folder, "stop"), encoding="utf-8") as f:
            return str(json.load(f).get("reason") or "stopped")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError):
        return "stopped"


def replay(folder: str) -> None:
    """Run the requests saved in ``folder`` (``requests/<n>.json`` and ``requests/<n>/``,
    in order) as the session ran them: one namespace, the same process group."""
    join_group()
    namespace = _main_module().__dict__
    requests = os.path.join(folder, "requests")
    count = len([n for n in os.listdir(requests) if n.endswith(".json")])
    for n in range(1, count + 1):
        with open(os.path.join(requests, f"{n}.json"), encoding="utf-8") as f:
            request = json.load(f)
        here = os.path.join(requests, str(n))
        if request.get("op") == "run":
            print(f"[jt] replaying {cell_run.cell_name(request.get('cell'))}", flush=True)
            run_cell(here, request, namespace)
        elif request.get("op") == "push":
            with open(os.path.join(here, "values.pkl"), "rb") as f:
                blobs = pickle.load(f)
            namespace.update({k: pickle.loads(v) for k, v in blobs.items()})


def main(
    argv: list[str] | None = None, held: Callable[[str, str, float], Any] | None = None
) -> None:
    parser = argparse.ArgumentParser(prog="session")
    parser.add_argument("--idle", type=float, default=3600.0)
    parser.add_argument("--replay", default=None)
    parser.add_argument("--hold", action="store_true")  # a rank's death leaves the others
    opts = parser.parse_args(argv)
    from jupyter_trainer.rankside.rank import runtime

    if opts.replay is not None:  # a saved session: its folder is beside the script
        replay(os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), opts.replay))
        return
    run_dir, run_id = os.environ.get("JT_RUN_DIR"), runtime.run_id
    if not run_dir or not run_id:
        sys.exit("a session's ranks run inside a run (JT_RUN_DIR is not set)")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    runtime.tag(kind="session")
    folder = os.path.join(run_dir, "session")
    if opts.hold and held is not None:  # session_holder.main: the rank's process is held
        held(folder, run_id, opts.idle)
        return
    join_group()
    loop = Loop(folder, runtime.rank, run_id, opts.idle)
    print(f"[jt] session rank {runtime.rank} ready", flush=True)
    reason = loop.serve()
    print(f"[jt] session ended: {reason}", flush=True)
