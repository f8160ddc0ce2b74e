"""Cancel requests an admin leaves for another user's run or sweep.

A run's folder (and a sweep's) is its owner's alone to write: ``rwxr-s---`` in a shared
workspace. So a member of the admin group cannot leave ``cancel.request`` there. They leave
``requests/<kind>-<id>.<uid>.cancel`` in the workspace instead. Every member may write that
folder, which is ``rwxrwx--T`` with setgid, like the other top folders; the sticky bit keeps
each request its writer's alone.

Anyone in the group can write such a file, so the run's supervisor (or the sweep's driver)
acts on one only when its *file's* owner, as the kernel reports it, may act on the run: the
run's owner, or a member of the admin group. What the file says is read only after that
check: the reason, and who asked. Nothing else trusts it. A request older than the process
that reads it is stale (a sweep resumed after an admin's cancel) and is skipped.

A live supervisor or driver acts on a request within seconds, and only its writer may remove
it (the folder is sticky). So each new request first removes its writer's own requests older
than a day: ``requests/`` holds about a day of each admin's cancels, not all of them.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

from ..core.modes import make_top
from .owners import Identity, may_act
from .records import write_json_atomic

REQUESTS_DIR = "requests"
_MAX_BYTES = 4096
KEEP_SECONDS = 24 * 3600
_NAME = re.compile(r"(?:run|sweep)-[A-Za-z0-9._-]+\.(\d+)\.cancel")


def write_cancel(home: Path, kind: str, ident: str, reason: str, shared: bool) -> Path:
    """Leave this user's request to cancel ``kind`` ``ident`` (a checked id) in ``home``."""
    actor = Identity.current()
    folder = home / REQUESTS_DIR
    make_top(folder, shared)
    _prune_own(folder, actor.uid, time.time() - KEEP_SECONDS)
    path = folder / f"{kind}-{ident}.{actor.uid}.cancel"
    write_json_atomic(path, {"requested": time.time(), "reason": reason, "by": actor.record()})
    return path


def _prune_own(folder: Path, uid: int, before: float) -> None:
    """Remove ``uid``'s own requests in ``folder`` last written before ``before``."""
    for name in os.listdir(folder):
        found = _NAME.fullmatch(name)
        if found is None or int(found.group(1)) != uid:
            continue
        path = folder / name
        try:
            info = path.lstat()
            if stat.S_ISREG(info.st_mode) and info.st_uid == uid and info.st_mtime < before:
                path.unlink()
        except OSError:
            continue


def read_cancel(
    home: Path, kind: str, ident: str, owner: Any, admin_group: str | None, since: float = 0.0
) -> dict[str, Any] | None:
    """The first request to cancel ``kind`` ``ident`` that someone allowed to made at or
    after ``since``, or None. ``owner`` is the run's (or sweep's) owner record."""
    if not admin_group or owner is None:
        return None  # only an admin asks here: an owner writes into their own folder
    folder = home / REQUESTS_DIR
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    wanted = re.compile(rf"{re.escape(kind)}-{re.escape(ident)}\.\d+\.cancel")
    for name in sorted(names):
        if not wanted.fullmatch(name):
            continue
        found = _read(folder / name, owner, admin_group, since)
        if found is not None:
            return found
    return None


def _read(path: Path, owner: Any, admin_group: str, since: float) -> dict[str, Any] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_mtime < since:
            return None
        writer = Identity.of_uid(info.st_uid)
        if not may_act(owner, writer, admin_group):
            return None
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        request = json.loads(data) if len(data) <= _MAX_BYTES else {}
    except ValueError:
        request = {}
    reason = request.get("reason") if isinstance(request, dict) else None
    reason = reason if isinstance(reason, str) and reason else "canceled"
    return {"reason": f"{reason} (asked by {writer.name}, an admin)", "by": writer.record()}
