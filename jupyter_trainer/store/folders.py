"""Small helpers for the store's folders: a run or sweep name's slug, whether a folder name
is a run id, and removing a folder whole (read-only parts included, no link followed).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

from ..core.errors import SpecError
from ..core.spec import validate_run_id


def slug(name: str) -> str:
    """``name`` as the first part of an id: lower case, ``-`` between words, 40 at most."""
    found = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return found[:40].strip("-") or "run"


def is_run_id(name: str) -> bool:
    try:
        validate_run_id(name)
    except SpecError:
        return False
    return True


def rmtree(path: Path) -> None:
    """Remove ``path``, read-only folders in it included. No link is followed: a link is
    removed, never what it points to (nor its mode changed)."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(found.st_mode):
        os.unlink(path)
        return
    # fwalk opens each folder without following links and hands over its descriptor:
    # fchmod changes that very folder, whatever has been renamed or linked meanwhile
    for _dir, _dirs, _files, dir_fd in os.fwalk(path, follow_symlinks=False):
        os.chmod(dir_fd, 0o700)
    shutil.rmtree(path, onerror=_gone_already)


def _gone_already(func: Any, path: str, exc_info: Any) -> None:
    """What ``shutil.rmtree`` does when one entry fails: one removed meanwhile is fine."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]
