"""Small file helpers shared by every layer."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..rankside.host.atomic import write_atomic, write_json_atomic  # noqa: F401 (re-exported)


def write_text_atomic(path: Path, text: str, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``text`` in one step (``rankside.host.atomic``): readers see the old
    file or the new one, never a part; the folder is made if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text, mode=mode)


def private_folder(path: Path) -> Path:
    """``path`` made if needed and owner-only (0700), tightened if it was looser."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def private_file(path: Path) -> Path:
    """``path`` made if needed and owner-only (0600), tightened if it was looser, with the
    files SQLite keeps beside a database (``-wal``, ``-shm``, ``-journal``): SQLite gives
    those the database's mode when it makes them, but one made looser earlier stays so."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for each in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm", "-journal"))):
        try:
            if stat.S_IMODE(each.stat().st_mode) & 0o077:
                os.chmod(each, 0o600)
        except FileNotFoundError:
            pass
    return path


def current_umask() -> int:
    """This process's umask, read without changing it (``/proc/self/status``, Linux 4.7+);
    where that cannot be read, by setting it and back (then not safe beside other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
