"""What a data input holds: its files (relative path, size, SHA-256) and one content hash.

Hashing a large input every run would cost more than staging it, so each file's hash is
kept in a small SQLite table keyed by its path, size, mtime and inode: a file that has not
changed since it was last hashed is only stat'ed. A file that cannot be read stops here,
naming the file.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import SpecError
from ..core.files import private_file

HASH_LEN = 32  # hex digits of a content hash: the node cache's folder names
CHUNK = 1 << 20  # bytes read at a time when hashing a file


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the input (the file's own name for a single file)
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    kind: str  # "dir" or "file"
    entries: tuple[Entry, ...]

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries)

    @property
    def hash(self) -> str:
        digest = hashlib.sha256(self.kind.encode() + b"\n")
        for e in self.entries:
            digest.update(f"{e.path}\0{e.size}\0{e.sha256}\n".encode())
        return digest.hexdigest()[:HASH_LEN]

    def to_json(self) -> dict:
        return {"kind": self.kind, "files": [[e.path, e.size, e.sha256] for e in self.entries]}

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        return cls(data["kind"], tuple(Entry(p, int(s), h) for p, s, h in data["files"]))


class HashCache:
    """``(path, size, mtime_ns, inode) -> sha256`` in ``cache/data-hashes.db`` of the user's
    own folder of the store, which only they may read (0600): it lists the path of every
    file they gave as data."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        private_file(path)
        self.db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INT, "
            "mtime INT, inode INT, sha256 TEXT)"
        )
        self.new: list[tuple] = []

    def lookup(self, path: str, st: os.stat_result) -> str | None:
        row = self.db.execute(
            "SELECT size, mtime, inode, sha256 FROM files WHERE path = ?", (path,)
        ).fetchone()
        if row and tuple(row[:3]) == (st.st_size, st.st_mtime_ns, st.st_ino):
            return row[3]
        return None

    def remember(self, path: str, st: os.stat_result, sha: str) -> None:
        self.new.append((path, st.st_size, st.st_mtime_ns, st.st_ino, sha))

    def close(self) -> None:
        if self.new:
            self.db.executemany("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)", self.new)
        self.db.close()


def file_sha256(path: str) -> str:
    """The file's SHA-256, read in chunks (``hashlib.file_digest`` is Python 3.11's)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _files(root: Path) -> Iterator[tuple[str, str]]:
    """(relative path, absolute path) of every regular file under ``root``, sorted; links
    to files are followed, links to folders are not (a cycle cannot loop)."""
    for folder, dirs, files in os.walk(root, onerror=_walk_error):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(folder, name)
            yield os.path.relpath(full, root), full


def _walk_error(exc: OSError) -> None:
    raise SpecError(
        f"cannot read the folder {exc.filename}: {exc.strerror}; make it readable "
        "(chmod) or leave it out of the data input"
    )


def manifest(source: Path, cache: HashCache) -> Manifest:
    """The manifest of a file or folder; a file that cannot be read raises ``SpecError``."""
    if source.is_file():
        kind, items = "file", [(source.name, str(source))]
    else:
        kind, items = "dir", sorted(_files(source))
    entries = []
    for rel, full in items:
        try:
            st = os.stat(full)
            if not stat.S_ISREG(st.st_mode):
                continue  # sockets, fifos, devices: not data
            sha = cache.lookup(full, st)
            if sha is None:
                sha = file_sha256(full)
                cache.remember(full, st, sha)
        except OSError as exc:
            raise _unreadable(full, exc) from None
        entries.append(Entry(rel, st.st_size, sha))
    return Manifest(kind, tuple(entries))


def _unreadable(path: str, exc: OSError) -> SpecError:
    """Why ``path`` cannot be hashed, as what it is: a link to nothing, a file that went
    away, one the user may not read, or another error (a loop of links)."""
    if isinstance(exc, FileNotFoundError) and os.path.islink(path):
        return SpecError(
            f"{path} is a symbolic link to {os.readlink(path)}, which does not "
            "exist: fix the link, remove it, or leave it out of the data input"
        )
    if isinstance(exc, FileNotFoundError):
        return SpecError(
            f"{path} was removed while it was being hashed; submit again once "
            "the data input stops changing"
        )
    if isinstance(exc, PermissionError):
        return SpecError(
            f"cannot read {path} ({exc.strerror}): a data input must be readable "
            "by you; fix its permissions or leave it out"
        )
    return SpecError(
        f"cannot read {path} ({exc.strerror}); fix it or leave it out of the data input"
    )
