"""Whether a file may decide what runs as this user, or which processes this user signals.

In a shared workspace every member can make entries in the team's folders. So a file found
there (a target's settings, an environment's definition, a run's record of its pids, a model
version's folder) may have been put there by someone else, and whoever wrote it would run
code as whoever reads it. As OpenSSH's ``StrictModes`` does for ``authorized_keys``, sudo
for ``sudoers`` and Git for a repository another user owns (``safe.directory``), such a file
is used only when:

- its owner (``fstat``/``lstat``, never what a record says) is this user, root, the owner
  of the workspace's folder (who set it up) or a member of its admin group;
- nobody else may write it: no write bit for the group or for others;
- it is not a link, and is a regular file (or a folder, where a folder is asked for);
- each folder from the workspace's root down to it is no link, and one that others may
  write has the sticky bit, so that nobody can rename or replace an entry they do not own.

Otherwise ``Untrusted`` is raised, naming the file, its owner and the fix. The checks read
the descriptor that is then read (``read_text``), so a file swapped after the check is not
the one used.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import Untrusted

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_DECIDING_FILE = 4 << 20  # a target's or environment's settings: far below this


class UntrustedFileWarning(UserWarning):
    """A file that may not decide what runs as this user was left out, so that what another
    member wrote neither runs as this user nor stops this user's runs; says which and why."""


@dataclass(frozen=True)
class Trust:
    """Whose files may decide what runs as this user, in the store at ``home``."""

    home: Path
    me: int
    home_owner: int | None
    admin_group: str | None = None

    @classmethod
    def of(cls, home: Path, admin_group: str | None = None) -> Trust:
        """The trust of this process's user in ``home`` (``admin_group``: the workspace's,
        from its trusted ``config.toml``)."""
        try:
            owner: int | None = os.lstat(home).st_uid
        except OSError:
            owner = None
        return cls(Path(home), os.geteuid(), owner, admin_group)

    def trusts(self, uid: int) -> bool:
        """Whether a file ``uid`` owns may decide what runs as this user."""
        return uid == self.me or self.administers(uid)

    def administers(self, uid: int) -> bool:
        """Whether ``uid`` may write the team's own files (the team's targets, environments
        every member uses by name): root, the workspace's owner, its admin group."""
        if uid == 0 or uid == self.home_owner:
            return True
        return bool(self.admin_group) and _in_group(uid, str(self.admin_group))

    def admins(self) -> str:
        """Who besides this user may write a deciding file, as a message says it."""
        names = ["root"]
        if self.home_owner not in (None, 0, self.me):
            names.append(f"{user_name(self.home_owner)} (the owner of {self.home})")
        if self.admin_group:
            names.append(f"members of the admin group {self.admin_group!r}")
        return ", ".join(names)

    # -- checks ---------------------------------------------------------------------------
    def refusal(
        self, found: os.stat_result, path: Path, what: str, *, folder: bool = False
    ) -> str | None:
        """Why ``found`` (the ``lstat``/``fstat`` of ``path``) may not decide; None if it may."""
        mode = found.st_mode
        if stat.S_ISLNK(mode):
            return f"{what} {path} is a link; links are not followed here: replace it with the file itself"
        if folder and not stat.S_ISDIR(mode):
            return f"{what} {path} is not a folder; remove it"
        if not folder and not stat.S_ISREG(mode):
            return f"{what} {path} is not a regular file; remove it"
        if not self.trusts(found.st_uid):
            who = user_name(found.st_uid)
            return (
                f"{what} {path} belongs to {who}, not to you ({user_name(self.me)}) nor to "
                f"{self.admins()}; whoever writes it decides what runs as you. Remove it "
                f"(or ask {who} to), or make it yourself"
            )
        if others_may_write(found):
            return (
                f"{what} {path} may be written by others (mode {stat.S_IMODE(mode):04o}); "
                f"whoever writes it decides what runs as you. Fix: chmod go-w {path}"
            )
        return None

    def check_folders_above(self, path: Path, what: str) -> None:
        """``Untrusted`` unless every folder from the store's root down to ``path``'s own
        folder is no link and, where others may write it, has the sticky bit. A path
        outside the store is the user's own: its folders are not checked."""
        for folder in self._folders_to(path):
            try:
                found = os.lstat(folder)
            except FileNotFoundError:
                return
            mode = found.st_mode
            if stat.S_ISLNK(mode):
                raise Untrusted(
                    f"{what} {path}: the folder {folder} above it is a link; a link could "
                    "send it anywhere: replace the link with the folder itself",
                    path=str(path),
                )
            if others_may_write(found) and not mode & stat.S_ISVTX:
                fix = (
                    f"chmod +t {folder}"
                    if found.st_uid == self.me
                    else f"ask {user_name(found.st_uid)} (its owner) to run chmod +t {folder}"
                )
                raise Untrusted(
                    f"{what} {path}: others may write the folder {folder} and it has no "
                    f"sticky bit (mode {stat.S_IMODE(mode):04o}), so anyone there could "
                    f"replace {path.name}; fix: {fix}",
                    path=str(path),
                )

    def _folders_to(self, path: Path) -> Iterator[Path]:
        home = Path(os.path.abspath(self.home))
        try:
            rel = Path(os.path.abspath(path)).parent.relative_to(home)
        except ValueError:
            return
        yield home
        here = home
        for part in rel.parts:
            here = here / part
            yield here

    def check(self, path: Path, what: str, *, folder: bool = False) -> os.stat_result | None:
        """The ``lstat`` of ``path`` if it may decide what runs as this user; None when it
        does not exist; else ``Untrusted``."""
        self.check_folders_above(path, what)
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return None
        problem = self.refusal(found, path, what, folder=folder)
        if problem:
            raise Untrusted(problem, path=str(path))
        return found

    def read_text(self, path: Path, what: str, *, limit: int = MAX_DECIDING_FILE) -> str | None:
        """The text of ``path`` if it may decide what runs as this user (checked on the
        descriptor that is read); None when it does not exist; else ``Untrusted``."""
        self.check_folders_above(path, what)
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Untrusted(
                    f"{what} {path} is a link; links are not followed here: replace it with "
                    "the file itself",
                    path=str(path),
                ) from None
            raise
        try:
            problem = self.refusal(os.fstat(fd), path, what)
            if problem:
                raise Untrusted(problem, path=str(path))
            data = os.read(fd, limit + 1)
            chunks = [data]
            while data and sum(map(len, chunks)) <= limit:
                data = os.read(fd, limit + 1)
                chunks.append(data)
        finally:
            os.close(fd)
        raw = b"".join(chunks)
        if len(raw) > limit:
            raise Untrusted(
                f"{what} {path} is over {limit >> 20} MiB; it cannot be a settings file",
                path=str(path),
            )
        return raw.decode("utf-8", errors="replace")


def own_folder(path: Path, what: str, mode: int = 0o700) -> Path:
    """``path``, a folder only this user writes (made with ``mode`` if missing, its parents
    with the defaults): ``Untrusted`` when it exists as a link, as a file, or as someone
    else's, since state kept there (a pool's socket, a cache, credentials) is this user's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    found = os.lstat(path)
    me = os.geteuid()
    if stat.S_ISLNK(found.st_mode) or not stat.S_ISDIR(found.st_mode):
        raise Untrusted(
            f"{what} {path} is not a folder (a link or a file is there); remove it", path=str(path)
        )
    if found.st_uid != me:
        who = user_name(found.st_uid)
        raise Untrusted(
            f"{what} {path} belongs to {who}, not to you ({user_name(me)}): what you keep "
            f"there would be theirs to read or change. Ask {who} or the workspace's "
            "administrator to remove it",
            path=str(path),
        )
    if stat.S_IMODE(found.st_mode) & _OTHERS_WRITE:
        os.chmod(path, stat.S_IMODE(found.st_mode) & ~_OTHERS_WRITE)
    return path


def others_may_write(found: os.stat_result) -> bool:
    """Whether someone besides the owner may write what ``found`` describes: a write bit for
    others, or for a group other than the owner's private one. A user private group (the
    group named as the user, with no other member, the default of Debian and Fedora, where
    umask 002 is usual) lets only its user write, so its write bit is the owner's own."""
    mode = stat.S_IMODE(found.st_mode)
    if mode & stat.S_IWOTH:
        return True
    return bool(mode & stat.S_IWGRP) and not _private_group(found.st_gid, found.st_uid)


def _private_group(gid: int, uid: int) -> bool:
    try:
        account = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return group.gr_name == account.pw_name and set(group.gr_mem) <= {account.pw_name}


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _in_group(uid: int, group: str) -> bool:
    try:
        wanted = grp.getgrnam(group)
        account = pwd.getpwuid(uid)
    except KeyError:
        return False
    return account.pw_name in wanted.gr_mem or account.pw_gid == wanted.gr_gid
