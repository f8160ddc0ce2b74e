"""``jupyter-trainer doctor``'s checks of a workspace's own folders: its root and its top
folders (``runs/``, ``models/``, ``environments/definitions/``, ...).

Every member may make entries in them, so each must be as ``core.modes`` sets it up:
``rwxrwx--T`` with the setgid bit (``chmod 3770``). Without the sticky bit a member could
rename or replace a colleague's entry (``config.toml``, a run's folder, a definition); with
any access for others, users outside the team could read or change the workspace. A top
folder's owner may remove anyone's entries in it, whatever the sticky bit, so each belongs to
the administrator (the owner of the root, or a member of the admin group): ``doctor --fix``
run by the administrator once, when the workspace is set up, makes them.

``--fix`` changes a folder's mode only where this user owns it (nobody else can); for the
others the finding names the owner who can, and the command.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ...core.modes import TOP_MODE, make_top
from ...core.top_folders import TOP_FOLDERS
from ...core.trust import Trust, user_name
from .report import Finding, Report, add

_OTHERS = 0o007


def check_workspace(home: Path, trust: Trust, report: Report) -> None:
    """Check the root of the workspace at ``home`` and its top folders (``trust``: whose
    folders they may be)."""
    home = Path(home)
    _check_folder(home, trust, report, root=True)
    present = {
        entry.name
        for entry in os.scandir(home)
        if entry.is_dir(follow_symlinks=False) or entry.is_symlink()
    }
    for name in [*TOP_FOLDERS, *sorted(present - set(TOP_FOLDERS))]:
        path = home / name
        if not os.path.lexists(path):
            if name in present:
                continue
            _missing(path, trust, report)
            continue
        _check_folder(path, trust, report, root=False)


def _missing(path: Path, trust: Trust, report: Report) -> None:
    """A top folder nobody has made yet: the first member to need it would own it."""
    if not trust.administers(trust.me):
        return  # made by whoever needs it first; the administrator's doctor --fix makes it
    add(
        report,
        Finding(
            "workspace-missing",
            "missing: the first member to need it would own it, and a top folder's owner "
            "can remove anyone's entries in it",
            fix=f"make it, yours, with mode {TOP_MODE:04o}",
            subject=f"workspace folder {path}",
        ),
        lambda: make_top(path, True),
        f"made with mode {TOP_MODE:04o}",
    )


def _check_folder(path: Path, trust: Trust, report: Report, *, root: bool) -> None:
    found = os.lstat(path)
    subject = f"workspace {'folder' if root else 'top folder'} {path}"
    if stat.S_ISLNK(found.st_mode) or not stat.S_ISDIR(found.st_mode):
        report.findings.append(
            Finding(
                "workspace-link",
                "is a link or a file, not a folder: it could send the workspace's entries "
                "anywhere. Fix by hand: remove it; the administrator's doctor --fix then "
                "makes the folder",
                subject=subject,
            )
        )
        return
    owner = user_name(found.st_uid)
    if not root and not trust.administers(found.st_uid):
        report.findings.append(
            Finding(
                "workspace-owner",
                f"belongs to {owner}, a member, not to the administrator "
                f"({trust.admins()}): as its owner {owner} can rename or remove anyone's "
                f"entries in it. Fix by hand, as root: chown {_admin_name(trust)} {path}",
                subject=subject,
            )
        )
    mode = stat.S_IMODE(found.st_mode)
    problems = []
    if mode & _OTHERS:
        problems.append(f"users outside the team have access ({mode:04o})")
    if mode & stat.S_IWGRP and not mode & stat.S_ISVTX:
        problems.append(
            "members may write it and it has no sticky bit, so any of them can rename or "
            "replace another's entries" + (" (config.toml, workspace.json, runs/)" if root else "")
        )
    if not problems:
        return
    wanted = (mode | stat.S_ISVTX | stat.S_ISGID) & ~_OTHERS
    message = "; ".join(problems)
    if found.st_uid != trust.me:
        report.findings.append(
            Finding(
                "workspace-mode",
                f"{message}. Fix: {owner} (its owner) runs chmod {wanted:04o} {path}",
                subject=subject,
            )
        )
        return
    add(
        report,
        Finding("workspace-mode", message, fix=f"chmod {wanted:04o} {path}", subject=subject),
        lambda: os.chmod(path, wanted),
        f"chmod {wanted:04o}",
    )


def _admin_name(trust: Trust) -> str:
    if trust.home_owner not in (None, 0):
        return user_name(int(trust.home_owner))
    return "ADMIN"
