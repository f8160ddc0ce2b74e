"""Replacing a file whole, so that a reader sees the old file or the new one, never a part.

The one way the package writes a record file in one step, on this machine and in the ranks
(standard library only: it ships in every snapshot and with the hot-start pool;
``core.files`` re-exports it for the layers above). The data goes to a temporary file of
this writer's own beside the target (``.<name>.<pid>.<random>.tmp``, created exclusively, so
two writers never share one, and readers that list the folder skip it: its name starts with
"." and ends with ".tmp"), then is renamed over the target.
"""

from __future__ import annotations

import json
import os
from typing import Any


def write_atomic(
    path: str | os.PathLike[str], data: str | bytes, *, mode: int = 0o644, sync: bool = False
) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8).

    ``mode`` is the new file's permissions (less the umask, as for any new file); ``sync``
    flushes the data to the disk before the rename, for a file that must survive a crash of
    the machine. On any failure the temporary file is removed and ``path`` is as it was.
    """
    target = os.fspath(path)
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json_atomic(
    path: str | os.PathLike[str], record: Any, *, indent: int | None = None, mode: int = 0o644
) -> None:
    """``write_atomic`` of ``record`` as JSON."""
    write_atomic(path, json.dumps(record, indent=indent), mode=mode)
