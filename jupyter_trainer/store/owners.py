"""Who owns a run, a sweep or a model version, and who may act on it.

An owner is recorded as ``{"user", "uid", "hub_user"}``: the Unix account that made it and,
under JupyterHub, the Hub user (``JUPYTERHUB_USER``). Everyone in a workspace may read
anything in it; cancelling a run, or deleting or overwriting a model version, is for its
owner and for members of the workspace's admin group (``admin_group`` in the workspace's
``config.toml``, or ``JUPYTER_TRAINER_ADMIN_GROUP``).
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import NotOwner

HUB_USER_ENV = "JUPYTERHUB_USER"


@dataclass(frozen=True)
class Identity:
    """A user acting on the store: a Unix account, and the Hub user when there is one."""

    user: str
    uid: int
    hub_user: str | None = None

    @classmethod
    def current(cls, hub_user: str | None = None) -> Identity:
        """This process's user; ``hub_user`` (a server's authenticated user) replaces
        ``$JUPYTERHUB_USER`` when given."""
        uid = os.geteuid()
        return cls(_user_name(uid), uid, hub_user or os.environ.get(HUB_USER_ENV) or None)

    @classmethod
    def of_uid(cls, uid: int) -> Identity:
        """The Unix account ``uid``, as the kernel names a file's owner."""
        return cls(_user_name(uid), uid)

    @classmethod
    def of(cls, record: Any) -> Identity | None:
        """The identity an ``owner`` record names, or None if it names none."""
        if not isinstance(record, Mapping) or not isinstance(record.get("uid"), int):
            return None
        hub = record.get("hub_user")
        return cls(str(record.get("user") or record["uid"]), record["uid"], hub or None)

    def record(self) -> dict[str, Any]:
        return {"user": self.user, "uid": self.uid, "hub_user": self.hub_user}

    @property
    def name(self) -> str:
        """How the owner is shown: the Hub user where it differs from the Unix one."""
        if self.hub_user and self.hub_user != self.user:
            return f"{self.hub_user} ({self.user})"
        return self.user

    def same_as(self, other: Identity) -> bool:
        """One user: the same Unix account, and no two different Hub users on it."""
        if self.uid != other.uid:
            return False
        return not (self.hub_user and other.hub_user and self.hub_user != other.hub_user)

    def in_group(self, group: str) -> bool:
        try:
            wanted = grp.getgrnam(group)
        except KeyError:
            return False
        if self.user in wanted.gr_mem:
            return True
        try:
            return pwd.getpwuid(self.uid).pw_gid == wanted.gr_gid
        except KeyError:
            return False


def owner_name(record: Any) -> str | None:
    """The owner as shown (``alice``, or ``alice-hub (alice)``), or None when unrecorded."""
    found = Identity.of(record)
    return found.name if found else None


def may_act(owner: Any, actor: Identity, admin_group: str | None) -> bool:
    """Whether ``actor`` may change what ``owner`` (a record) owns. A thing with no
    recorded owner (made before owners were recorded) is its folder owner's: the caller
    passes that instead."""
    found = Identity.of(owner)
    if found is not None and found.same_as(actor):
        return True
    return bool(admin_group) and actor.in_group(str(admin_group))


def check_may_act(
    owner: Any, actor: Identity, admin_group: str | None, what: str, nothing: str
) -> None:
    """``NotOwner`` unless ``actor`` may change ``what`` (a phrase: ``"cancel run X"``);
    ``nothing`` says what was left undone (``"the run goes on"``)."""
    if may_act(owner, actor, admin_group):
        return
    shown = owner_name(owner) or "another user"
    admins = (
        f"members of the admin group {admin_group!r}"
        if admin_group
        else "members of the workspace's admin group (admin_group in its config.toml)"
    )
    raise NotOwner(
        f"you ({actor.name}) cannot {what}: it belongs to {shown}; only its owner and "
        f"{admins} can; {nothing}"
    )


def folder_owner(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The owner record of something made before owners were recorded: its folder's."""
    try:
        uid = os.lstat(path).st_uid
    except OSError:
        return None
    return {"user": _user_name(uid), "uid": uid, "hub_user": None}


def verified_owner(record: Any, path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Who owns what is in the folder (or file) ``path``, by the kernel: its owner's uid
    and name. A record's ``owner`` (``record``) says only what its writer claims, so it
    adds nothing but its Hub user, and that only when it names the same account; None when
    ``path`` is gone."""
    found = folder_owner(path)
    if found is None:
        return None
    claimed = Identity.of(record)
    if claimed is not None and claimed.uid == found["uid"]:
        found["hub_user"] = claimed.hub_user
        if found["user"] == str(found["uid"]):  # an account this system does not name
            found["user"] = claimed.user
    return found


def verify_rows(
    rows: list[dict[str, Any]],
    folder_of: Callable[[dict[str, Any]], Path],
    wanted: Identity | None = None,
) -> list[dict[str, Any]]:
    """``rows`` of an index (``owner``, ``owner_uid``, ``hub_user``), each owner taken again
    from its folder (``folder_of(row)``) where the row says otherwise: anyone who can
    write the index could have written the row. With ``wanted``, only the rows whose folder
    that user owns."""
    kept = []
    for row in rows:
        owner = verified_owner(
            {
                "user": row.get("owner"),
                "uid": row.get("owner_uid"),
                "hub_user": row.get("hub_user"),
            },
            folder_of(row),
        )
        if owner is not None:
            row.update(owner=owner["user"], owner_uid=owner["uid"], hub_user=owner["hub_user"])
        identity = Identity.of(owner)
        if wanted is None or (identity is not None and identity.same_as(wanted)):
            kept.append(row)
    return kept


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
