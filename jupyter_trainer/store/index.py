"""The store's indexes: SQLite caches of folders that heal themselves from them.

``runs.db`` indexes the run folders (``RunIndex``); the model registry keeps its own
(``store.models``) on the same ``FolderIndex``. A missing index, or a folder in its place,
is rebuilt from the folders when it is opened; a corrupt one (garbage, a damaged page) is
moved aside to ``runs.db.corrupt-<UTC stamp>`` with its ``-wal``/``-shm`` and rebuilt, never
deleted. Rebuilds hold ``runs.db.lock`` exclusively; creating a run holds it shared, so a
rebuild never misses a run being made, and concurrent openers rebuild once.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import stat
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from ..core.errors import StoreError
from ..rankside.host.home import HOME_ENV
from .filesystems import refuse_network
from .index_base import IndexBase, RunQueries, T, index_row, unwritable
from .pg_index import PgRunIndex, workspace_index_kind
from .workspace import CONFIG, INDEX_ENV, Settings, settings

__all__ = [
    "FolderIndex",
    "RunIndex",
    "index_row",
    "index_url",
    "open_existing",
    "run_index",
    "unwritable",
]

# SQLite primary result codes (``sqlite3.Error.sqlite_errorcode & 0xff``).
_PERM, _BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = (
    3,
    5,
    6,
    8,
    10,
    11,
    13,
    14,
    26,
)
OUTDATED = "was made by an older version"
_SIDE_FILES = ("", "-wal", "-shm", "-journal")
_log = logging.getLogger("jupyter_trainer.store")


class FolderIndex(IndexBase):
    """``home/<FILE>``: the index in SQLite (WAL), for a store on a local filesystem."""

    def __init__(self, home: Path, folder_rows: Callable[[], list[dict[str, Any]]]) -> None:
        self.home = home
        self.path = home / self.FILE
        self.where = str(self.path)
        self._folder_rows = folder_rows
        self._ready = False
        self._local = False
        self._insert = (
            f"INSERT %s INTO {self.TABLE} ("
            + ", ".join(self.COLUMNS)
            + ") VALUES ("
            + ", ".join(":" + c for c in self.COLUMNS)
            + ")"
        )

    # -- use ---------------------------------------------------------------------------
    def run(self, work: Callable[[sqlite3.Connection], T], *, creating: bool = False) -> T:
        """``work(conn)``; a corrupt index met on the way is moved aside and rebuilt, and
        ``work`` runs once more. Any other SQLite failure becomes a ``StoreError``."""
        self._check_local()
        for attempt in (1, 2):
            found = _lstat(self.path)
            try:
                conn = self.connect()
                try:
                    if not creating:
                        return work(conn)
                    with self.lock(shared=True):
                        return work(conn)
                finally:
                    conn.close()
            except sqlite3.DatabaseError as exc:
                if attempt == 1 and _is_corrupt(exc):
                    self.heal(found, f"was corrupt ({exc})")
                    continue
                if not creating and _disk_full(self.home):
                    return self._read_as_it_is(work, exc)
                raise self.error(exc) from None
        raise AssertionError("unreachable")

    def _read_as_it_is(self, work: Callable[[sqlite3.Connection], T], exc: sqlite3.Error) -> T:
        """``work`` on a full disk, where no ``-shm`` can be made: the index read as the file
        is (immutable), so listing still works; a write fails as the full disk ``exc``."""
        try:
            uri = "file:" + urllib.parse.quote(str(self.path)) + "?mode=ro&immutable=1"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None)
            try:
                conn.row_factory = sqlite3.Row
                return work(conn)
            finally:
                conn.close()
        except sqlite3.Error:
            raise self.error(exc) from None

    def connect(self) -> sqlite3.Connection:
        """A connection; a missing index (or a folder in its place) is rebuilt first.

        Only a rebuild makes the file: opening never creates it, so an opener that
        finds the index between another process's move-aside and its rebuild waits for
        that rebuild instead of reading (and leaving ``-wal``/``-shm`` beside) an empty
        index of its own."""
        for attempt in (1, 2, 3):
            found = _lstat(self.path)
            if found is None or not stat.S_ISREG(found.st_mode):
                self.heal(found, "was missing" if found is None else "was not a file")
            try:
                conn = open_existing(self.path, isolation_level=None)
                break
            except sqlite3.OperationalError:
                if attempt == 3 or _lstat(self.path) is not None:
                    raise
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout = 30000")
            # The index can be rebuilt from the run directories, so it need not survive a
            # power loss (a torn file is found corrupt and rebuilt; a stale row is what
            # `doctor --fix` rewrites). No fsync at all: with NORMAL, the write that
            # recreates the WAL and the checkpoint on close each wait for the disk, some
            # 5 ms apiece on an idle one, and a run writes its row at every stage.
            conn.execute("PRAGMA synchronous = OFF")
            if not self._ready:
                conn.execute("PRAGMA journal_mode = WAL")
                if self._outdated(conn):
                    conn.close()
                    self.heal(_lstat(self.path), OUTDATED)
                    return self.connect()
                conn.executescript(self.SCHEMA)
                self._ready = True
        except BaseException:
            conn.close()
            raise
        return conn

    def _outdated(self, conn: sqlite3.Connection) -> bool:
        """Whether the table lacks columns this version writes (an older version made it)."""
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({self.TABLE})")}
        return bool(have) and not set(self.COLUMNS) <= have

    def _check_local(self) -> None:
        """Refuse a store on a network filesystem, once per index (see ``filesystems``)."""
        if not self._local:
            refuse_network(self.home, self.LABEL)
            self._local = True

    def upsert(self, row: dict[str, Any]) -> None:
        self.run(lambda conn: conn.execute(self._insert % "OR REPLACE", row))

    def insert(self, conn: Any, row: dict[str, Any]) -> None:
        conn.execute(self._insert % "", row)

    def exists(self) -> bool:
        return os.path.lexists(self.path)

    def transact(
        self, work: Callable[[sqlite3.Connection], T], undo: Callable[[], Any] | None = None
    ) -> T:
        """``work(conn)`` in one write transaction (writers of the index take turns), while
        no rebuild runs; ``undo()`` reverts what ``work`` did to the folders when the
        commit fails."""

        def run(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(conn)
            except BaseException:
                _rollback(conn)
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                if undo is not None:
                    undo()
                _rollback(conn)
                raise
            return result

        return self.run(run, creating=True)

    def check_writable(self) -> None:
        """Raise ``StoreError`` unless the index accepts a write (rolled back at once)."""

        def probe(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                conn.execute(f"PRAGMA user_version = {version}")
            finally:
                _rollback(conn)

        self.run(probe)

    # -- healing -----------------------------------------------------------------------
    @contextmanager
    def lock(self, *, shared: bool = False) -> Iterator[None]:
        path = self.home / f"{self.FILE}.lock"
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise unwritable(path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def heal(
        self, found: os.stat_result | None, problem: str, *, quiet: bool = False
    ) -> tuple[Path | None, int] | None:
        """Move the index found broken aside and rebuild it from the folders, unless
        another process did so while this one waited (None). Returns (moved to, rows
        indexed); unless ``quiet``, logs a warning that says so."""
        with self.lock():
            now = _lstat(self.path)
            if (
                now is not None
                and stat.S_ISREG(now.st_mode)
                and (found is None or (now.st_dev, now.st_ino) != (found.st_dev, found.st_ino))
            ):
                return None
            try:
                label = "outdated" if problem == OUTDATED else "corrupt"
                moved = self._move_aside(label if now is not None else "orphan")
                count = self._rebuild()
            except (OSError, sqlite3.Error) as exc:
                fix = (
                    "the disk is full: free some space and try again"
                    if _disk_full(self.home)
                    else f"make {self.home} writable, or set {HOME_ENV} to a writable folder"
                )
                raise StoreError(
                    f"the {self.LABEL} index {self.path} {problem} and cannot be rebuilt "
                    f"({exc}); {fix}"
                ) from None
        if quiet:
            pass
        elif now is not None:
            _log.warning(
                "jupyter-trainer: the %s index %s %s; moved it aside to %s and rebuilt it from %s",
                self.LABEL,
                self.path,
                problem,
                moved,
                self.folders(count),
            )
        elif count:
            _log.warning(
                "jupyter-trainer: the %s index %s %s; rebuilt it from %s",
                self.LABEL,
                self.path,
                problem,
                self.folders(count),
            )
        return moved, count

    def rebuild(self, problem: str) -> tuple[Path | None, int]:
        """Move the index aside (if there is one) and rebuild it from the run folders."""
        self._check_local()
        return self.heal(_lstat(self.path), problem, quiet=True) or (None, 0)

    def problem(self) -> str | None:
        """What is wrong with the index file, or None; changes nothing."""
        found = _lstat(self.path)
        if found is None:
            return "is missing"
        if not stat.S_ISREG(found.st_mode):
            return "is not a file"

        def check(conn: sqlite3.Connection) -> list[str]:
            result = [r[0] for r in conn.execute("PRAGMA quick_check")]
            conn.execute(
                "SELECT " + ", ".join(self.COLUMNS) + f" FROM {self.TABLE} LIMIT 1"
            ).fetchall()
            return result

        try:
            conn = open_existing(self.path)
            try:
                result = check(conn)
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            if _disk_full(self.home):  # no -shm can be made: check the file as it is
                result = self._read_as_it_is(check, exc)
                return None if result == ["ok"] else f"is corrupt ({'; '.join(result[:3])})"
            if _lstat(self.path) is None:
                return "is missing"
            if "no such column" in str(exc):
                return OUTDATED
            if _is_corrupt(exc) or "no such" in str(exc):
                return f"is corrupt ({exc})"
            raise self.error(exc) from None
        return None if result == ["ok"] else f"is corrupt ({'; '.join(result[:3])})"

    def error(self, exc: sqlite3.Error) -> StoreError:
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
        if code in (_BUSY, _LOCKED):
            return StoreError(
                f"the {self.LABEL} index {self.path} stayed locked by another process "
                f"for 30 s ({exc}); try again"
            )
        if code == _FULL or _disk_full(self.home):
            return StoreError(
                f"the {self.LABEL} index {self.path} cannot grow: the disk is full; "
                "free some space and try again"
            )
        if code in (_PERM, _READONLY, _IOERR, _CANTOPEN):
            return StoreError(
                f"the {self.LABEL} index {self.path} cannot be written ({exc}); make it "
                f"and {self.home} writable, or set {HOME_ENV} to a writable folder"
            )
        return StoreError(
            f"the {self.LABEL} index {self.path} refused the change ({exc}); check the "
            "store with `jupyter-trainer doctor`"
        )

    def _move_aside(self, label: str) -> Path | None:
        """Rename the index and its side files to ``<FILE>.<label>-<UTC stamp>``."""
        present = [s for s in _SIDE_FILES if os.path.lexists(f"{self.path}{s}")]
        if not present:
            return None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        base, n = self.home / f"{self.path.name}.{label}-{stamp}", 1
        while any(os.path.lexists(f"{base}{s}") for s in _SIDE_FILES):
            n += 1
            base = self.home / f"{self.path.name}.{label}-{stamp}-{n}"
        for suffix in present:
            os.rename(f"{self.path}{suffix}", f"{base}{suffix}")
        return base if "" in present else None

    def _rebuild(self) -> int:
        rows = self._folder_rows()
        self.home.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.FILE}.rebuild-", dir=self.home)
        os.close(fd)
        try:
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = OFF")  # as in connect()
                conn.executescript(self.SCHEMA)
                conn.execute("BEGIN")
                conn.executemany(self._insert % "OR REPLACE", rows)
                conn.execute("COMMIT")
            finally:
                conn.close()
            os.replace(tmp, self.path)
            self._ready = True  # it has the schema and WAL mode: connect() need not repeat it
        except BaseException:
            for suffix in ("", "-wal", "-shm"):
                Path(tmp + suffix).unlink(missing_ok=True)
            raise
        return len(rows)


class RunIndex(RunQueries, FolderIndex):
    """``home/runs.db``: one row per run folder."""


def index_url(home: Path, found: Settings | None = None) -> str | None:
    """The PostgreSQL URL of the workspace at ``home``'s index (``found``: its settings,
    read already); None for SQLite. A workspace whose index is on PostgreSQL is refused
    without its URL, rather than given an empty SQLite index beside it."""
    found = found or settings(home)
    if found.index is None and workspace_index_kind(home, found.trust()) == "postgresql":
        raise StoreError(
            f"the workspace {home} keeps its index on PostgreSQL, and no URL names it here; "
            f"set {INDEX_ENV}=postgresql://HOST/DATABASE, or write index = "
            f'"postgresql://HOST/DATABASE" in {home / CONFIG}'
        )
    return found.index


def run_index(
    home: Path, folder_rows: Callable[[], list[dict[str, Any]]], found: Settings
) -> RunQueries:
    """The run index of the store at ``home`` (with settings ``found``): SQLite, or its
    workspace's PostgreSQL."""
    url = index_url(home, found)
    if url is None:
        return RunIndex(home, folder_rows)
    return PgRunIndex(home, url, folder_rows)


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back what is still open (SQLite ends some transactions itself on an error)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def open_existing(
    path: Path,
    mode: Literal["rw", "ro"] = "rw",
    *,
    isolation_level: Literal["DEFERRED", "EXCLUSIVE", "IMMEDIATE"] | None = "DEFERRED",
) -> sqlite3.Connection:
    """A connection to the SQLite file at ``path``, which must exist: a missing file
    raises ``sqlite3.OperationalError`` (unable to open) instead of being created."""
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=" + mode
    return sqlite3.connect(uri, uri=True, timeout=30, isolation_level=isolation_level)


def _disk_full(folder: Path) -> bool:
    """Whether the file system of ``folder`` has no room left for this user (under 64 KiB),
    which SQLite reports as an I/O error, or as a file it cannot open, as often as full."""
    try:
        found = os.statvfs(folder)
    except OSError:
        return False
    free = found.f_bfree if os.geteuid() == 0 else found.f_bavail
    return free * found.f_frsize < 64 << 10


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _is_corrupt(exc: sqlite3.Error) -> bool:
    code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
    return code in (_CORRUPT, _NOTADB)
