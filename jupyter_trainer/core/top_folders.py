"""A shared workspace's top folders, the ones every member makes entries in, and who makes
them: the administrator. A top folder's owner may remove anyone's entries in it, sticky bit
or not, so none may be a member's (``store/doctor/workspace.py`` checks this).
"""

from __future__ import annotations

import os
from pathlib import Path

from .modes import make_top

TOP_FOLDERS = (
    "runs",
    "models",
    "sweeps",
    "staging",
    "requests",
    "users",
    "environments",
    "environments/definitions",
    "damaged",  # runs doctor --fix set aside, each still its owner's
)


def set_up_workspace(home: Path) -> None:
    """Make the top folders of the shared workspace at ``home`` that are missing, when this
    user administers it (owns its root), so that no member is first to make one and own
    it. Best effort: what cannot be made now is for ``doctor`` to report."""
    try:
        if os.lstat(home).st_uid != os.geteuid():
            return
        for name in TOP_FOLDERS:
            if not os.path.lexists(home / name):
                make_top(home / name, True)
    except OSError:
        pass
