"""Start a pool: detach, import the modules (refusing every request if that initialised
CUDA), take the key's lock, listen on the socket (0600) and serve until idle.

``python -m jupyter_trainer.rankside.hotstart --socket PATH --key KEY --idle S --modules a,b``."""

from __future__ import annotations

import argparse
import fcntl
import importlib
import json
import os
import socket
import sys
import time
from pathlib import Path

from ..host import procs
from .records import read_json, write_json
from .server import DEFAULT_IDLE_S, Pool, unix_address


def import_modules(modules: list[str]) -> tuple[str | None, dict[str, float], dict[str, str]]:
    """Import ``modules``; the reason to refuse (CUDA got initialised), the files to watch
    for changes, and the modules that could not be imported (the ranks import them)."""
    skipped: dict[str, str] = {}
    culprit: list[str] = []  # where CUDA was first initialised, once it was
    # torch first, so that CUDA's first use by any module after it is seen
    for name in sorted(modules, key=lambda module: module != "torch"):
        try:
            importlib.import_module(name)
        except BaseException as exc:  # a module's own SystemExit included
            skipped[name] = f"{type(exc).__name__}: {exc}"[:300]
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        watch_cuda_init(cuda, culprit)
        try:
            initialised = bool(cuda is not None and cuda.is_initialized())
        except Exception:
            initialised = False
        if initialised:
            unwatch_cuda_init(cuda)
            where = f" ({culprit[0]})" if culprit else ""
            return (
                (
                    f"importing {name} initialised CUDA{where}, and a process that did "
                    f"cannot fork ranks that use it"
                ),
                {},
                skipped,
            )
    unwatch_cuda_init(getattr(sys.modules.get("torch"), "cuda", None))  # the ranks run unwatched
    watched = {}
    for name in modules:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            try:
                watched[path] = os.stat(path).st_mtime
            except OSError:
                pass
    return None, watched, skipped


def watch_cuda_init(cuda: object, culprit: list[str]) -> None:
    """Have ``torch.cuda._lazy_init`` (what every first use of CUDA goes through, from Python
    or from C++) note in ``culprit`` the line of code that called it first, outside torch
    and the import machinery: ``mymodule.py:12 in setup: torch.zeros(1, device="cuda")``."""
    lazy = getattr(cuda, "_lazy_init", None)
    if lazy is None or getattr(lazy, "_jt_watched", False):
        return

    def noted(*args: object, **kwargs: object) -> object:
        if not culprit:
            culprit.append(first_caller())
        return lazy(*args, **kwargs)

    noted._jt_watched = True  # type: ignore[attr-defined]
    noted._jt_original = lazy  # type: ignore[attr-defined]
    cuda._lazy_init = noted  # type: ignore[attr-defined]


def unwatch_cuda_init(cuda: object) -> None:
    original = getattr(getattr(cuda, "_lazy_init", None), "_jt_original", None)
    if original is not None:
        cuda._lazy_init = original  # type: ignore[attr-defined]


def first_caller() -> str:
    import traceback

    for frame in reversed(traceback.extract_stack()[:-2]):
        path = frame.filename.replace(os.sep, "/")
        if "/torch/" in path or path.startswith("<frozen") or "/hotstart/" in path:
            continue
        code = f": {frame.line.strip()}" if frame.line else ""
        return f"at {os.path.basename(path)}:{frame.lineno} in {frame.name}{code}"
    return "where, it could not be seen"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_trainer.rankside.hotstart")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE_S)
    parser.add_argument("--modules", default="torch")
    ns = parser.parse_args(argv)
    folder = os.path.dirname(ns.socket)
    procs.detach()
    procs.redirect_output(Path(folder, f"{ns.key}.log"))
    lock_fd = os.open(os.path.join(folder, f"{ns.key}.lock"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another pool serves this key
    started = time.monotonic()
    modules = [m for m in ns.modules.split(",") if m]
    refused, watched, skipped = import_modules(modules)
    record_path = os.path.join(folder, f"{ns.key}.json")
    record = {
        "pid": os.getpid(),
        "start_ticks": procs.start_ticks(os.getpid()),
        "key": ns.key,
        "python": sys.executable,
        "started": time.time(),
        "modules": modules,
        "skipped": skipped,
        "refused": refused,
        "socket": ns.socket,
        "idle_s": ns.idle,
        "import_s": round(time.monotonic() - started, 3),
    }
    if os.path.exists(ns.socket):
        os.unlink(ns.socket)  # a dead pool's: this one holds the key's lock
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    address, dir_fd = unix_address(ns.socket)
    try:
        sock.bind(address)
        os.chmod(ns.socket, 0o600)
        sock.listen(64)
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    write_json(record_path, record)
    print(f"[jt pool] {json.dumps(record)}", flush=True)
    try:
        Pool(sock, ns.idle, refused, watched, lock_fd).serve()
    finally:
        if read_json(record_path).get("pid") == os.getpid():
            for path in (ns.socket, record_path):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        print("[jt pool] exits", flush=True)
    return 0
