"""The one interface of the store's indexes, whichever database holds them.

An index is a cache of folders (run folders, model versions): one table of ``COLUMNS``, whose
rows ``folder_rows()`` lists from the folders, so it can always be rebuilt from them. The
personal store keeps it in SQLite (``index.SqliteIndex``), a shared workspace in PostgreSQL
(``pg_index.PgIndex``); the queries of each table (``RunQueries``, ``models.ModelQueries``)
are written once, in SQL both understand, with ``?`` for each parameter.
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ..core.errors import StoreError
from ..core.spec import RunSpec
from ..rankside.host.home import HOME_ENV
from .owners import Identity

T = TypeVar("T")

RUN_COLUMNS = (
    "id",
    "name",
    "status",
    "target",
    "launcher",
    "nodes",
    "procs",
    "code_hash",
    "created",
    "started",
    "ended",
    "failed_rank",
    "owner",
    "owner_uid",
    "hub_user",
    "updated",
)
RUN_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    target TEXT NOT NULL,
    launcher TEXT NOT NULL,
    nodes INTEGER NOT NULL,
    procs INTEGER NOT NULL,
    code_hash TEXT NOT NULL,
    created REAL NOT NULL,
    started REAL,
    ended REAL,
    failed_rank INTEGER,
    owner TEXT,
    owner_uid INTEGER,
    hub_user TEXT,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_created ON runs (created);
CREATE INDEX IF NOT EXISTS runs_newest ON runs (created, id);
CREATE INDEX IF NOT EXISTS runs_status_newest ON runs (status, created, id);
CREATE INDEX IF NOT EXISTS runs_owner_newest ON runs (owner_uid, created, id);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status);
CREATE INDEX IF NOT EXISTS runs_owner ON runs (owner_uid);
"""


def index_row(
    run_id: str, spec: RunSpec, state: Mapping[str, Any], owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The index row of a run with this spec and state; ``owner`` stands in for a state
    written before owners were recorded."""
    stages = state.get("stages", {})
    who = state.get("owner") or owner or {}
    return {
        "id": run_id,
        "name": spec.name,
        "status": state["status"],
        "target": spec.target.name,
        "launcher": spec.launch.launcher,
        "nodes": spec.launch.nodes,
        "procs": spec.launch.procs,
        "code_hash": spec.code.hash,
        "created": state["created"],
        "started": stages.get("running", {}).get("start"),
        "ended": state.get("ended"),
        "failed_rank": state.get("failed_rank"),
        "owner": who.get("user"),
        "owner_uid": who.get("uid"),
        "hub_user": who.get("hub_user"),
        "updated": time.time(),
    }


def unwritable(path: Path, exc: OSError) -> StoreError:
    return StoreError(
        f"cannot write {path} ({exc.strerror or exc}); make it writable, "
        f"or set {HOME_ENV} to a writable folder"
    )


class IndexBase(ABC):
    """One table of ``COLUMNS`` that caches folders; ``folder_rows`` lists the rows the
    folders call for (what a rebuild writes). ``where`` names it in messages."""

    FILE = TABLE = SCHEMA = LABEL = ""
    COLUMNS: tuple[str, ...] = ()
    home: Path
    where: str

    @abstractmethod
    def run(self, work: Callable[[Any], T], *, creating: bool = False) -> T:
        """``work(conn)``: ``conn.execute(sql, params)`` returns rows that read by column
        name or position. Failures become ``StoreError``."""

    @abstractmethod
    def transact(self, work: Callable[[Any], T], undo: Callable[[], Any] | None = None) -> T:
        """``work(conn)`` in one write transaction (writers take turns), while no rebuild
        runs; ``undo()`` reverts what ``work`` did to the folders when the commit fails."""

    @abstractmethod
    def upsert(self, row: dict[str, Any]) -> None: ...

    @abstractmethod
    def insert(self, conn: Any, row: dict[str, Any]) -> None:
        """Insert ``row`` inside ``transact`` (a duplicate key fails)."""

    @abstractmethod
    def exists(self) -> bool:
        """Whether the index was ever made (a store never used has none)."""

    @abstractmethod
    def check_writable(self) -> None:
        """Raise ``StoreError`` unless the index accepts a write."""

    @abstractmethod
    def problem(self) -> str | None:
        """What is wrong with the index, or None; changes nothing."""

    @abstractmethod
    def rebuild(self, problem: str) -> tuple[Path | None, int]:
        """Rebuild the index from the folders: (where the old one went, rows written)."""

    def folders(self, count: int) -> str:
        """``count`` of this index's folders, in words."""
        return f"{count} {self.LABEL} folder" + ("" if count == 1 else "s")

    def publish(self, row: dict[str, Any], tmp: Path, final: Path) -> None:
        """Insert ``row`` and rename the folder ``tmp`` to ``final`` in one transaction, so
        a failure of either leaves neither."""
        self.publish_with(tmp, lambda conn: (row, final))

    def publish_with(self, tmp: Path, decide: Callable[[Any], tuple[dict[str, Any], Path]]) -> None:
        """``publish`` the row and final path that ``decide(conn)`` returns: it runs inside
        the write transaction, so writers of the index call it one at a time."""
        import os

        moved: list[Path] = []

        def work(conn: Any) -> None:
            row, final = decide(conn)
            self.insert(conn, row)
            if os.path.lexists(final):
                raise StoreError(f"a {self.LABEL} folder {final} already exists; try again")
            os.rename(tmp, final)
            moved.append(final)

        self.transact(work, lambda: os.rename(moved[-1], tmp) if moved else None)


class RunQueries(IndexBase):
    """The run index's own queries, on either database."""

    FILE, TABLE, SCHEMA, LABEL, COLUMNS = "runs.db", "runs", RUN_SCHEMA, "run", RUN_COLUMNS

    def delete(self, run_id: str) -> None:
        self.run(lambda conn: conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)))

    def count(self) -> int:
        """How many rows the index holds."""
        return int(self.run(lambda conn: conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]))

    def rows(self) -> dict[str, dict[str, Any]]:
        return self.run(lambda conn: {r["id"]: dict(r) for r in conn.execute("SELECT * FROM runs")})

    def row(self, run_id: str) -> dict[str, Any] | None:
        found = self.run(
            lambda conn: conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        )
        return dict(found) if found is not None else None

    def find(
        self, name: str | None, statuses: tuple[str, ...], owner: Identity | None
    ) -> list[dict[str, Any]]:
        """Rows whose name holds ``name`` (as text), whose status is one of ``statuses``
        (any, when empty), and of ``owner``'s runs only, when given; newest first."""
        return self.select(*_filters(name, statuses, owner))

    def find_batches(
        self, name: str | None, statuses: tuple[str, ...], owner: Identity | None, first: int
    ) -> Iterator[list[dict[str, Any]]]:
        """The rows of ``find``, newest first, in batches: ``first`` rows, then twice as
        many each time, so a page of the newest runs reads no more rows than it shows
        (plus those its caller drops). Each batch starts after the last row of the one
        before (by ``created`` and ``id``), so a run made meanwhile shifts nothing."""
        where, args = _filters(name, statuses, owner)
        size, after = max(1, first), None
        while True:
            clauses = list(where)
            params = list(args)
            if after is not None:
                clauses.append("(created, id) < (?, ?)")
                params.extend((after["created"], after["id"]))
            batch = self.select(clauses, params, limit=size)
            if batch:
                yield batch
            if len(batch) < size:
                return
            after, size = batch[-1], min(size * 2, 1 << 16)

    def select(
        self, where: list[str], args: list[Any], limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows matching every clause of ``where``, newest first (``limit`` at most)."""
        query = "SELECT * FROM runs"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created DESC, id DESC"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        return self.run(lambda conn: [dict(r) for r in conn.execute(query, args)])


def _filters(
    name: str | None, statuses: tuple[str, ...], owner: Identity | None
) -> tuple[list[str], list[Any]]:
    """The WHERE clauses and parameters of ``RunQueries.find``."""
    args: list[Any] = []
    where = []
    if name:
        where.append("name LIKE ? ESCAPE '\\'")
        args.append("%" + re.sub(r"([%_\\])", r"\\\1", name) + "%")
    if statuses:
        where.append("status IN (%s)" % ",".join("?" * len(statuses)))
        args.extend(statuses)
    if owner is not None:
        where.append("owner_uid = ?")
        args.append(owner.uid)
        if owner.hub_user:
            where.append("(hub_user IS NULL OR hub_user = ?)")
            args.append(owner.hub_user)
    return where, args
