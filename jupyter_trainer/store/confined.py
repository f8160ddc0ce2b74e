"""Files read and written beneath a folder without following any link below it.

A path recorded on disk (a model version's ``lineage.json``) or found by a scan (a run's
``outputs/``) is not trusted when a file is opened: whoever can write the folder can change
it between the scan and the open, or record ``..`` in it. So every part of such a path is
opened relative to the folder above it (``openat``) with ``O_NOFOLLOW``: a part that is a
link, or that is not a folder (a file that is not a regular file, at the end), is refused
whatever it points to, and the opened file itself is checked (``fstat``), not its name.

The folder a caller starts from (a version folder, a run's ``outputs/``, the ``DEST`` a
user gives) is opened as given: a link in the user's own path to it is theirs to make.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO swapped in for a file must not wait for a writer
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(OSError):
    """A path part is a link, or not a folder or regular file where one is needed."""


def safe_parts(text: object) -> tuple[str, ...] | None:
    """The parts of ``text`` if it is a relative POSIX path of plain names (no ``..``, no
    ``.``, no empty part, not absolute, no NUL or backslash), else None."""
    if not isinstance(text, str) or not text or "\x00" in text or "\\" in text:
        return None
    if text.startswith("/") or "//" in text or text.endswith("/"):
        return None
    parts = tuple(text.split("/"))
    if any(p in ("", ".", "..") for p in parts):
        return None
    return parts


def _plain(parts: Sequence[str]) -> Sequence[str]:
    """``parts`` if each is one plain name; a ``/``, ``.`` or ``..`` would let ``openat``
    walk where the parts do not say."""
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\x00" in part:
            raise Refused(errno.EINVAL, "is not a plain name", "/".join(parts))
    return parts


def open_folder(path: Path) -> int:
    """A descriptor of the folder ``path`` (links in ``path`` itself followed)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_beneath(root_fd: int, parts: Sequence[str], *, folder: bool = False) -> int:
    """A descriptor of ``parts`` below the folder ``root_fd``, no link followed on the way:
    a regular file (or with ``folder``, a folder); else ``Refused`` (or the ``OSError`` of
    a part that is missing)."""
    fd = root_fd
    try:
        for depth, part in enumerate(_plain(parts)):
            last = depth == len(parts) - 1
            flags = _FILE_FLAGS if last and not folder else _DIR_FLAGS
            try:
                new = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    wanted = "a regular file" if last and not folder else "a folder"
                    raise Refused(
                        exc.errno,
                        f"is a link (or not {wanted}); links are not followed",
                        "/".join(parts[: depth + 1]),
                    ) from None
                raise
            if fd != root_fd:
                os.close(fd)
            fd = new
        if fd == root_fd:
            return os.dup(root_fd)
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)):
            raise Refused(
                errno.EINVAL, f"is not a {'folder' if folder else 'regular file'}", "/".join(parts)
            )
        return fd
    except BaseException:
        if fd != root_fd:
            os.close(fd)
        raise


def make_folders_beneath(root_fd: int, parts: Sequence[str]) -> int:
    """A descriptor of the folder ``parts`` below ``root_fd``, each part made if missing;
    a part that exists as a link or a file is ``Refused``, never followed."""
    fd = root_fd
    try:
        for depth, part in enumerate(_plain(parts)):
            try:
                os.mkdir(part, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                new = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(
                        exc.errno,
                        "is a link (or a file) where a folder is needed; links are not followed",
                        "/".join(parts[: depth + 1]),
                    ) from None
                raise
            if fd != root_fd:
                os.close(fd)
            fd = new
        return fd if fd != root_fd else os.dup(root_fd)
    except BaseException:
        if fd != root_fd:
            os.close(fd)
        raise


def write_beneath(
    dir_fd: int, name: str, fill: Callable[[int], str], check: Callable[[str], None] | None = None
) -> str:
    """Make the file ``name`` in the folder ``dir_fd`` from ``fill(fd)`` (which writes the
    descriptor it is given, open for reading and writing, and returns the sha256 of what it
    wrote) under a temporary name, then rename it over ``name``: a reader sees the old file
    or the whole new one, and a link at ``name`` is replaced, never followed. ``check(digest)``
    may refuse the copy before it replaces anything. Returns the digest."""
    _plain([name])
    tmp = f".{name}.{secrets.token_hex(6)}"
    fd = os.open(
        tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd
    )
    try:
        try:
            digest = fill(fd)
        finally:
            os.close(fd)
        if check is not None:
            check(digest)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        raise
    return digest


def real_parts(root: Path, path: Path) -> tuple[str, ...] | None:
    """The parts of ``path``, links resolved, below ``root`` (links resolved); None when it
    is not below ``root``."""
    try:
        rel = Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
    except ValueError:
        return None
    return PurePosixPath(rel.as_posix()).parts if rel.parts else ()
