"""The index of a shared workspace, on PostgreSQL (through psycopg).

The same tables as SQLite's (``index_base``), in a database a team shares; the folders stay
files on the shared filesystem, and stay the truth: ``doctor --fix`` rebuilds a table from
them. Writers take turns through a transaction-scoped advisory lock per table, as SQLite's
take turns through ``BEGIN IMMEDIATE``; a rebuild takes the same lock, so it never misses a
run being created. A database serves one workspace: the workspace's id, in its
``workspace.json``, is recorded in the database the first time, and a folder with another id
is refused.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core import bounded_json
from ..core.errors import StoreError, Untrusted
from ..core.redact import redact_text as redact  # a URL or a message, without its secrets
from ..core.trust import Trust
from ..core.workspace import settings
from ..rankside.host.atomic import write_json_atomic
from .index_base import IndexBase, RunQueries, T

WORKSPACE_FILE = "workspace.json"
_log = logging.getLogger(__name__)
_SETUP_KEY = zlib.crc32(b"jupyter_trainer:setup")


def pg_schema(schema: str) -> list[str]:
    """SQLite's ``schema`` in PostgreSQL's types: 64-bit integers, double-precision reals."""
    text = re.sub(r"\bREAL\b", "DOUBLE PRECISION", schema)
    text = re.sub(r"\bINTEGER\b", "BIGINT", text)
    return [s.strip() for s in text.split(";") if s.strip()]


class _Row(Sequence[Any]):
    """A row that reads by column name or position, and converts with ``dict(row)``."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: dict[str, int], values: Sequence[Any]) -> None:
        self._names, self._values = names, values

    def __getitem__(self, key: Any) -> Any:
        return self._values[self._names[key] if isinstance(key, str) else key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def keys(self) -> list[str]:
        return list(self._names)


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], _Row]:
    names = {c.name: i for i, c in enumerate(cursor.description or ())}
    return lambda values: _Row(names, values)


class _Conn:
    """A psycopg connection that takes SQLite's ``?`` parameters."""

    def __init__(self, conn: Any) -> None:
        self.raw = conn

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        if not isinstance(params, Mapping):
            sql = sql.replace("?", "%s")
        return self.raw.execute(sql, params)


class PgIndex(IndexBase):
    """One table of the workspace's index in the PostgreSQL database at ``url``."""

    KEY: tuple[str, ...] = ()

    def __init__(self, home: Path, url: str, folder_rows: Callable[[], list[dict[str, Any]]]):
        self.home, self.url = home, url
        self.where = f"{redact(url)} (table {self.TABLE})"
        self._folder_rows = folder_rows
        self._ready = False
        names = ", ".join(self.COLUMNS)
        values = ", ".join(f"%({c})s" for c in self.COLUMNS)
        self._insert = f"INSERT INTO {self.TABLE} ({names}) VALUES ({values})"
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in self.COLUMNS if c not in self.KEY)
        self._upsert = f"{self._insert} ON CONFLICT ({', '.join(self.KEY)}) DO UPDATE SET {updates}"
        self._lock_key = zlib.crc32(f"jupyter_trainer:{self.TABLE}".encode())

    # -- use ---------------------------------------------------------------------------
    def _open(self) -> Any:
        """A connection to the database, without the tables' set-up."""
        psycopg = _psycopg()
        try:
            return psycopg.connect(
                self.url, autocommit=True, connect_timeout=10, row_factory=_row_factory
            )
        except psycopg.Error as exc:
            raise self.error(exc) from None

    def _connect(self) -> Any:
        conn = self._open()
        try:
            if not self._ready:
                self._setup(conn)
                self._ready = True
        except BaseException:
            conn.close()
            raise
        return conn

    def run(self, work: Callable[[Any], T], *, creating: bool = False) -> T:
        import psycopg

        conn = self._connect()
        try:
            return work(_Conn(conn))
        except psycopg.Error as exc:
            raise self.error(exc) from None
        finally:
            conn.close()

    def transact(self, work: Callable[[Any], T], undo: Callable[[], Any] | None = None) -> T:
        import psycopg

        conn = self._connect()
        try:
            conn.execute("BEGIN")
            try:
                _take_turn(conn, self._lock_key)
                result = work(_Conn(conn))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                if undo is not None:
                    undo()
                raise
            return result
        except psycopg.Error as exc:
            raise self.error(exc) from None
        finally:
            conn.close()

    def upsert(self, row: dict[str, Any]) -> None:
        self.run(lambda conn: conn.execute(self._upsert, row))

    def insert(self, conn: Any, row: dict[str, Any]) -> None:
        conn.execute(self._insert, row)

    def exists(self) -> bool:
        return True  # made, with its tables, the first time the workspace is opened

    def check_writable(self) -> None:
        self.transact(lambda conn: None)

    # -- healing -----------------------------------------------------------------------
    def problem(self) -> str | None:
        def look(conn: Any) -> str | None:
            have = self._columns(conn)
            if not have:
                return "is missing"
            return None if set(self.COLUMNS) <= have else "was made by an older version"

        conn = self._open()
        try:
            return look(conn)
        finally:
            conn.close()

    def rebuild(self, problem: str) -> tuple[Path | None, int]:
        """Replace the table's rows with those the folders call for, in one transaction. It
        also takes the set-up's lock: a table dropped and made again under another process's
        set-up of it can fail that set-up's statements (PostgreSQL's "cache lookup failed")."""
        return None, self.transact(lambda conn: self._remake(conn) or 0)

    def _remake(self, conn: Any, *, unless_sound: bool = False) -> int | None:
        """Drop the table, make it again and fill it from the folders, in ``conn``'s open
        transaction, so that it is never seen made but not filled; how many rows it got.
        ``unless_sound``: None, doing nothing, when another process made it meanwhile."""
        _take_turn(conn, _SETUP_KEY)
        if unless_sound and set(self.COLUMNS) <= self._columns(conn):
            return None
        conn.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
        for statement in pg_schema(self.SCHEMA):
            conn.execute(statement)
        rows = self._folder_rows()
        if rows:
            conn.raw.cursor().executemany(self._insert, rows)
        return len(rows)

    def _columns(self, conn: Any) -> set[str]:
        found = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s",
            (self.TABLE,),
        ).fetchall()
        return {r[0] for r in found}

    def _setup(self, conn: Any) -> None:
        """Bind the database to this workspace, and make the table (once, whoever gets
        there first). A table that is missing, or one an older version made, is made and
        filled from the folders in one transaction: a fill that fails, or a process killed
        while it fills, leaves it missing, and the next process to open the workspace
        fills it, rather than leaving it made and empty for good."""
        conn.execute("BEGIN")
        try:
            _take_turn(conn, _SETUP_KEY)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS jt_workspace (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            self._bind(conn)
            have = self._columns(conn)
            if set(self.COLUMNS) <= have:  # its indexes, should a newer version add one
                for statement in pg_schema(self.SCHEMA):
                    conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        problem = None if set(self.COLUMNS) <= have else "was made by an older version"
        if not have:  # new, or dropped: the folders say which rows it holds, as on SQLite
            problem = "is missing"
        if problem is not None:
            self._ready = True  # the fill's own connection skips this set-up
            try:
                count = self.transact(lambda conn: self._remake(conn, unless_sound=True))
            except BaseException:
                self._ready = False
                raise
            if count:
                _log.warning(
                    "jupyter-trainer: the %s index %s %s; rebuilt it from %s",
                    self.LABEL,
                    self.where,
                    problem,
                    self.folders(count),
                )

    def _bind(self, conn: Any) -> None:
        """Bind the database to this folder, or refuse a database bound to another one.

        The binding is the id in ``workspace.json`` and in the database, with the folder's
        path beside it there. The file is read only when the workspace's administrator (or
        root, or this user) wrote it and nobody else may write it, so that no member can
        rebind the workspace for the others; it is written only by someone every member
        trusts. Until then the path recorded in the database binds it."""
        path = self.home / WORKSPACE_FILE
        trust = settings(self.home).trust()
        mine = _workspace_id(path, trust)
        found = dict(conn.execute("SELECT key, value FROM jt_workspace").fetchall())
        theirs, where = found.get("id"), found.get("home")
        here = str(self.home.resolve())
        if theirs is None:
            theirs = mine or uuid.uuid4().hex
            conn.execute("INSERT INTO jt_workspace VALUES ('id', %s)", (theirs,))
        elif mine is None and where != here and _has_rows(conn):
            raise StoreError(
                f"the index {redact(self.url)} holds the runs of another workspace "
                f"({theirs}), and {self.home} has no {WORKSPACE_FILE}; give this workspace a "
                "database of its own (or restore that file, if this folder is that workspace)"
            )
        elif mine is not None and mine != theirs:
            raise StoreError(
                f"the index {redact(self.url)} belongs to another workspace ({theirs}), not to "
                f"{self.home} ({mine}); give each workspace a database of its own"
            )
        if where is None:
            conn.execute("INSERT INTO jt_workspace VALUES ('home', %s)", (here,))
        if mine is None and _trusted_by_every_member(trust):
            self.home.mkdir(parents=True, exist_ok=True)
            record = {"id": theirs, "index": "postgresql"}
            write_json_atomic(path, record, indent=2)

    def error(self, exc: Exception) -> StoreError:
        import psycopg

        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        text = redact(text)
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return StoreError(
                f"the workspace index {self.where} refused this user ({text}); ask the "
                "database's owner to GRANT this user SELECT, INSERT, UPDATE and DELETE on it"
            )
        if isinstance(exc, psycopg.OperationalError):
            from .workspace import CONFIG, INDEX_ENV

            return StoreError(
                f"cannot reach the workspace index {redact(self.url)} ({text}); start the "
                f"PostgreSQL server, or fix {INDEX_ENV} (or index in {self.home / CONFIG})"
            )
        return StoreError(
            f"the workspace index {self.where} refused the change ({text}); check the "
            "store with `jupyter-trainer doctor`"
        )


class PgRunIndex(RunQueries, PgIndex):
    """The workspace's run index: one row per run folder."""

    KEY: tuple[str, ...] = ("id",)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError(
            "this workspace keeps its index on PostgreSQL, which needs psycopg: "
            "pip install 'jupyter-trainer[postgres]'"
        ) from None
    return psycopg


def _take_turn(conn: Any, key: int) -> None:
    """Wait for ``key``'s transaction-scoped advisory lock; the transaction's end frees it."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))


_BINDING = "the workspace's binding to its index"


def _trusted_by_every_member(trust: Trust) -> bool:
    """Whether every member trusts a file this user writes: this user is root, the owner
    of the workspace's folder or in its admin group (``trust`` as anyone else sees it)."""
    return replace(trust, me=-1).trusts(os.geteuid())


def _read_binding(path: Path, trust: Trust) -> Any:
    """What ``workspace.json`` holds (None if it is missing), read only if it may decide
    which database this workspace is; ``Untrusted`` says whose it is and the fix."""
    try:
        text = trust.read_text(path, _BINDING)
    except Untrusted as exc:
        raise Untrusted(
            f"{exc}. It decides which database is this workspace's index, so only the "
            f"workspace's administrator may write it: ask them to remove it (their next use "
            "of the workspace writes it again)",
            path=exc.path,
        ) from None
    except OSError as exc:
        raise StoreError(f"cannot read {path} ({exc}); restore it from a backup") from None
    if text is None:
        return None
    try:
        return bounded_json.loads(text)
    except ValueError as exc:
        raise StoreError(f"cannot read {path} ({exc}); restore it from a backup") from None


def _workspace_id(path: Path, trust: Trust) -> str | None:
    found = _read_binding(path, trust)
    if found is None:
        return None
    if not isinstance(found, dict) or not isinstance(found.get("id"), str):
        raise StoreError(f"{path} names no workspace id; restore it from a backup")
    return str(found["id"])


def workspace_index_kind(home: Path, trust: Trust | None = None) -> str | None:
    """The index ``workspace.json`` says the workspace at ``home`` has (``postgresql``),
    read as ``_bind`` reads it (``trust``: the workspace's, from its settings)."""
    try:
        found = _read_binding(home / WORKSPACE_FILE, trust or Trust.of(home))
    except Untrusted:
        raise
    except StoreError:
        return None
    return found.get("index") if isinstance(found, dict) else None


def _has_rows(conn: Any) -> bool:
    for table in ("runs", "models"):
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
            continue
        if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
            return True
    return False
