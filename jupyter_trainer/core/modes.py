"""File modes in a shared workspace: the team reads, only the owner writes, others nothing.

A workspace is shared when its index is on PostgreSQL (``workspace.Settings.shared``). Its
root and its top folders (``runs/``, ``models/``, ``sweeps/``, ``staging/``, ``requests/``,
``users/``, ``environments/definitions/``) are ``rwxrwx--T`` with the setgid bit: every
member can make an entry, the entries take the folder's group, and the sticky bit lets only
an entry's owner (and the folder's) rename or remove it; so the folders are the
administrator's (``store/doctor/workspace.py`` checks this). What a run writes is
``rwxr-s---`` for folders and ``rw-r-----`` for files (the supervisor and its ranks run with
umask 027), so a colleague can read a run, and only its owner can change it. Nothing is ever
made writable by others. A personal store keeps the user's own umask.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..rankside.rank import run_secrets

SHARED_UMASK = 0o027
TOP_MODE = 0o3770  # sticky + setgid, rwx for owner and group
RUN_DIR_MODE = 0o2750


def make_top(folder: Path, shared: bool) -> None:
    """Make ``folder`` (a top folder of the store) if missing; in a shared workspace, give
    it the mode members share it by (only when this user owns it)."""
    folder.mkdir(parents=True, exist_ok=True)
    if shared:
        found = os.lstat(folder)
        if found.st_uid == os.geteuid() and stat.S_IMODE(found.st_mode) != TOP_MODE:
            os.chmod(folder, TOP_MODE)


def share_tree(root: Path) -> None:
    """Give a tree this user wrote the shared modes: folders ``rwxr-s---``; files keep the
    owner's bits, the group gets the owner's read and execute, others nothing; a run's
    ``secrets.json`` stays its owner's alone (``rankside/rank/run_secrets.py``)."""
    for _path, _dirs, files, dir_fd in os.fwalk(root, follow_symlinks=False):
        os.chmod(dir_fd, RUN_DIR_MODE)
        for name in files:
            found = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISREG(found.st_mode):
                own = stat.S_IMODE(found.st_mode) & 0o700
                shared = 0 if name == run_secrets.FILE else (own & 0o500) >> 3
                os.chmod(name, own | shared, dir_fd=dir_fd)
