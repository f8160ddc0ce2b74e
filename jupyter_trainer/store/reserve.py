"""Room kept on disk for a run's state, so that its end is recorded on a full disk.

A run's supervisor writes ``state.json`` atomically: a new file, then a rename. On a full
disk the new file cannot be written, and the run would stay "running" for ever. So when it
starts, the supervisor reserves ``SPARES`` spare files of ``SPARE_BYTES`` (written with
spaces, so their blocks are allocated) beside the state. When a write finds the disk full,
the state is written *into* a spare, in place and padded with spaces to the spare's size
(trailing spaces are valid JSON), which needs no new block; the current state is kept as a
spare under a new name (a hard link) and the filled spare is renamed over it. Readers see the
old state or the new one, as always. Two spares are enough for any number of such writes:
each write turns the state it replaces back into a spare.

``is_disk_full`` tells an ``OSError`` of a full disk (or of a spent quota) from others, and
``fullness`` asks the file system itself, for a supervisor that writes nothing while ranks
fill the disk.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

from .records import RunPaths

SPARE_BYTES = 256 << 10
SPARES = 2
_PREFIX = ".state-spare-"
_FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _FULL


def disk_full_error(run_id: str, path: Path | str) -> str:
    """The run's error when the disk filled under it."""
    return (
        f"disk full ({path}): the run store's file system has no space left, so the run "
        "was stopped; its logs and events end where the disk filled. Free some space, "
        f"then start it again with `jupyter-trainer rerun {run_id}`"
    )


def is_full(path: Path) -> bool:
    """True when the file system holding ``path`` has no block left for this user (root
    may also use the blocks a file system reserves for it)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    free = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return free == 0


def spares(paths: RunPaths) -> list[Path]:
    """The spare files, largest first."""
    found = []
    for entry in os.scandir(paths.root):
        if entry.name.startswith(_PREFIX):
            try:
                found.append((entry.stat().st_size, Path(entry.path)))
            except OSError:
                continue
    return [p for _, p in sorted(found, reverse=True)]


def ready(paths: RunPaths) -> bool:
    """Whether the run has its ``SPARES`` spares of full size."""
    return sum(_size(p) >= SPARE_BYTES for p in spares(paths)) >= SPARES


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def reserve(paths: RunPaths) -> bool:
    """Top the spares up to ``SPARES`` of ``SPARE_BYTES`` (a smaller one, the small state a
    disk-full write replaced, is dropped); False when the disk has no room for them now."""
    have = spares(paths)
    for small in [p for p in have if _size(p) < SPARE_BYTES]:
        small.unlink(missing_ok=True)
        have.remove(small)
    for _ in range(SPARES - len(have)):
        path = paths.root / f"{_PREFIX}{secrets.token_hex(4)}"
        try:
            with open(path, "xb") as fh:
                fh.write(b" " * SPARE_BYTES)
        except OSError:
            path.unlink(missing_ok=True)
            return False
    return True


def release(paths: RunPaths) -> None:
    """Remove the spares (the run's state is final)."""
    for path in spares(paths):
        path.unlink(missing_ok=True)


def write_in_reserve(paths: RunPaths, text: str) -> bool:
    """Write ``text`` as the run's state through a spare (see the module's docstring);
    False when no spare is large enough."""
    data = text.encode()
    for spare in spares(paths):
        size = _size(spare)
        if size < len(data):
            continue
        with open(spare, "r+b") as fh:  # in place: neither truncated nor extended
            fh.write(data)
            fh.write(b" " * (size - len(data)))
        kept = paths.root / f"{_PREFIX}{secrets.token_hex(4)}"
        try:
            os.link(paths.state, kept)  # the state being replaced becomes a spare
        except FileNotFoundError:
            pass
        os.replace(spare, paths.state)
        return True
    return False
