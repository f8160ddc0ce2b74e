"""Each node's private working directory of a run, ``<run>/work/<node>/``: a writable copy
of the snapshot made by the first rank of the node, where ``./outputs`` is the run's
``outputs/`` and ``./logs`` its ``logs/user/``. The boot script enters it before it runs
the entry. Imported inside the ranks, so it uses the standard library only."""

from __future__ import annotations

import fcntl
import os
import re
import stat
import time
from typing import Any

_WORK = "work"  # <run>/work/<node>/: each node's working directory
_LINKED = {
    "outputs": os.path.join("..", "..", "outputs"),  # ./outputs -> <run>/outputs
    "logs": os.path.join("..", "..", "logs", "user"),
}  # ./logs -> <run>/logs/user
_FICLONE = 0x40049409  # ioctl: share the source's blocks (btrfs, XFS)


def node_key(world_size: int, local_world_size: int) -> str:
    """``node-<n>`` for this node of the run; ranks of one node share it."""
    for name in ("JT_NODE_RANK", "GROUP_RANK", "NODE_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return f"node-{int(value)}"
    if world_size == local_world_size:  # every rank is on this node
        return "node-0"
    return "host-" + re.sub(r"[^A-Za-z0-9_.-]", "_", os.uname().nodename)[:100]


def _copy_file(src: str, dst: str, mode: int) -> str:
    """Copy one file, sharing its blocks where the filesystem can; never a hardlink, which
    root could write through into the snapshot. Returns how it was copied."""
    fin = os.open(src, os.O_RDONLY)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            try:
                fcntl.ioctl(fout, _FICLONE, fin)
                return "reflink"
            except OSError:
                pass
            left = os.fstat(fin).st_size
            try:
                while left > 0:
                    done = os.copy_file_range(fin, fout, left)
                    if done == 0:
                        break
                    left -= done
                if left == 0:
                    return "copy_file_range"
            except OSError:
                pass
            os.lseek(fin, 0, os.SEEK_SET)
            os.lseek(fout, 0, os.SEEK_SET)
            os.ftruncate(fout, 0)
            while chunk := os.read(fin, 1 << 20):
                os.write(fout, chunk)
            return "copy"
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def _copy_snapshot(src: str, dest: str) -> dict[str, Any]:
    """A writable copy of the snapshot in ``dest`` (an empty folder). Its top-level
    ``outputs`` and ``logs`` are left out: there they are links into the run folder."""
    methods: dict[str, int] = {}
    files = size = 0
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        if rel == os.curdir:
            dirnames[:] = [d for d in dirnames if d not in _LINKED]
            filenames = [f for f in filenames if f not in _LINKED]
        here = dest if rel == os.curdir else os.path.join(dest, rel)
        for name in list(dirnames):
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                os.symlink(os.readlink(path), os.path.join(here, name))
                dirnames.remove(name)
            else:
                os.mkdir(os.path.join(here, name), 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(path), os.path.join(here, name))
                continue
            how = _copy_file(path, os.path.join(here, name), (info.st_mode & 0o755) | 0o200)
            methods[how] = methods.get(how, 0) + 1
            files += 1
            size += info.st_size
    return {"files": files, "bytes": size, "copied_by": methods}


def enter_workdir(run_dir: str, snapshot: str, key: str) -> tuple[str, dict[str, Any]]:
    """Make this node's private working directory (once per node, the first rank under a
    lock; the others wait and reuse it) and ``chdir`` into it.

    ``<run>/work/<key>/`` starts as a copy of the snapshot, with ``./outputs`` linked to the
    run's ``outputs/`` and ``./logs`` to ``logs/user/``. It is made beside itself and renamed
    into place, so a rank killed while copying leaves no half-made folder behind."""
    root = os.path.join(run_dir, _WORK)
    dest = os.path.join(root, key)
    os.makedirs(root, exist_ok=True)
    os.makedirs(os.path.join(run_dir, "outputs"), exist_ok=True)
    os.makedirs(os.path.join(run_dir, "logs", "user"), exist_ok=True)
    info: dict[str, Any] = {"path": dest}
    with open(os.path.join(root, f".{key}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isdir(dest):
            started = time.monotonic()
            tmp = os.path.join(root, f".{key}-{os.urandom(8).hex()}")
            os.mkdir(tmp, 0o755)
            try:
                info.update(_copy_snapshot(snapshot, tmp))
                for name, target in _LINKED.items():
                    os.symlink(target, os.path.join(tmp, name))
                os.rename(tmp, dest)
            except BaseException:
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
                raise
            info.update(created=True, seconds=round(time.monotonic() - started, 4))
    os.chdir(dest)
    return dest, info
