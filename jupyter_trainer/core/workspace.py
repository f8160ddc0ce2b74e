"""A store's settings: where its index lives and who administers it.

``$JUPYTER_TRAINER_HOME/config.toml`` may hold::

    index = "postgresql://db.example.org/team"   # the index of a shared workspace
    admin_group = "ml-admins"                    # may cancel and delete anyone's
    storage = "s3://bucket/runs"                 # where runs upload checkpoints and outputs

``JUPYTER_TRAINER_INDEX`` and ``JUPYTER_TRAINER_ADMIN_GROUP`` override them. Without an index
URL the store is a personal one, indexed by SQLite in ``runs.db``. A store whose index is
on PostgreSQL is shared: its folders are made readable by their group.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from .errors import StoreError, Untrusted
from .modes import make_top
from .redact import redact_text
from .trust import Trust, UntrustedFileWarning, own_folder, user_name

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

INDEX_ENV = "JUPYTER_TRAINER_INDEX"
ADMIN_GROUP_ENV = "JUPYTER_TRAINER_ADMIN_GROUP"
CONFIG = "config.toml"
_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class Settings:
    home: Path
    index: str | None  # a PostgreSQL URL; None: SQLite, in the store's folder
    admin_group: str | None
    storage: str | None = None  # a storage URL for runs' checkpoints and outputs

    @property
    def shared(self) -> bool:
        return self.index is not None

    def trust(self) -> Trust:
        """Whose files may decide what runs as this user here (``core/trust.py``)."""
        return Trust.of(self.home, self.admin_group)

    def user_dir(self) -> Path:
        """Where this user's own state lives (pools, caches, credentials, targets of their
        own): the store itself when it is personal, ``users/<name>/`` in a workspace. It is
        made if missing, and refused when someone else made it."""
        if not self.shared:
            return self.home
        users = self.home / "users"
        make_top(users, True)
        try:
            return own_folder(
                users / user_name(os.geteuid()), "your folder in the workspace", 0o2750
            )
        except Untrusted as exc:
            # Another member made it first: what would be kept there stays in this user's
            # own home instead, so that the squat stops none of this user's runs.
            key = hashlib.sha256(os.path.realpath(self.home).encode()).hexdigest()[:16]
            instead = Path.home() / ".jupyter_trainer" / "workspaces" / key
            warnings.warn(
                f"{exc}; until then your own state in this workspace (warm pools, caches, "
                f"credentials, your targets and environments' locks) is kept in {instead}",
                UntrustedFileWarning,
                stacklevel=2,
            )
            return own_folder(instead, "your folder for this workspace", 0o700)


def settings(home: Path) -> Settings:
    """The settings of the store at ``home``: its ``config.toml``, under the environment's."""
    found: dict[str, object] = {}
    path = home / CONFIG
    try:
        # the settings decide who administers the workspace: only the workspace's owner
        # (or root, or this user) may have written them
        text = Trust.of(home).read_text(path, "the workspace settings")
        found = tomllib.loads(text) if text is not None else {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise StoreError(f"cannot read the workspace settings {path}: {exc}; fix it") from None
    unknown = sorted(set(found) - {"index", "admin_group", "storage"})
    if unknown:
        raise StoreError(
            f"{path}: unknown setting {unknown[0]!r}; a workspace's config.toml holds "
            "index, admin_group and storage"
        )
    index = os.environ.get(INDEX_ENV) or found.get("index") or None
    group = _admin_group(home, found.get("admin_group") or None, index is not None)
    where = f"${INDEX_ENV}" if os.environ.get(INDEX_ENV) else f"index in {path}"
    if index is not None:
        if not isinstance(index, str) or not index.startswith(_SCHEMES):
            raise StoreError(
                f"{where} is {redact_text(repr(index))}, not a PostgreSQL URL; write it as "
                "postgresql://[user@]host[:port]/database (a password belongs in ~/.pgpass), "
                "or leave it out for the personal SQLite index"
            )
    if group is not None and (not isinstance(group, str) or not re.fullmatch(r"[\w.-]+", group)):
        raise StoreError(f"admin_group is {group!r}, not a Unix group name")
    storage = found.get("storage") or None
    if storage is not None and not isinstance(storage, str):
        raise StoreError(f"{path}: storage is {storage!r}, not a URL such as s3://bucket/runs")
    return Settings(home, index, group, storage)


def _admin_group(home: Path, written: object, shared: bool) -> object:
    """The admin group: ``config.toml``'s (the administrator's), which the environment may
    repeat but not replace, so no member makes their own group the workspace's admins by
    setting a variable. Where ``config.toml`` names none, the variable names it in a
    personal store, and in a workspace only for its owner (or root)."""
    claimed = os.environ.get(ADMIN_GROUP_ENV) or None
    if claimed is None or claimed == written:
        return written
    if written is not None:
        raise StoreError(
            f"${ADMIN_GROUP_ENV} is {claimed!r}, but the workspace {home} names {written!r} as "
            f"its admin group in {home / CONFIG}, which only its administrator writes; "
            f"unset {ADMIN_GROUP_ENV}"
        )
    try:
        owner = home.stat().st_uid
    except OSError:
        owner = os.geteuid()  # a store not made yet is made by this user
    if shared and os.geteuid() not in (0, owner):
        raise StoreError(
            f"${ADMIN_GROUP_ENV} is {claimed!r}, but only the workspace's administrator "
            f"({user_name(owner)}, who owns {home}) names its admin group: unset "
            f'{ADMIN_GROUP_ENV}, and ask them to write admin_group = "..." in {home / CONFIG}'
        )
    return claimed
