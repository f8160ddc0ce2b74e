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

from .. import procs
from .records import read_json, write_json
from .server import DEFAULT_IDLE_S, Pool, unix_address


def import_modules(modules: list[str]) -> tuple[str | None, dict[str, float], dict[str, str]]:
    """Import ``modules``; the reason to refuse (CUDA got initialised), the files to watch
    for changes, and the modules that could not be imported (the ranks import them)."""
    skipped: dict[str, str] = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # a module's own SystemExit included
            skipped[name] = f"{type(exc).__name__}: {exc}"[:300]
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        try:
            initialised = bool(cuda is not None and cuda.is_initialized())
        except Exception:
            initialised = False
        if initialised:
            return (
                (
                    f"importing {name} initialised CUDA, and a process that did cannot fork "
                    f"ranks that use it"
                ),
                {},
                skipped,
            )
    watched = {}
    for name in modules:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            try:
                watched[path] = os.stat(path).st_mtime
            except OSError:
                pass
    return None, watched, skipped


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
