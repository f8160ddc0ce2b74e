"""The model registry of the run store: the only code that knows its layout.

```
$JUPYTER_TRAINER_HOME
  models.db                      SQLite index (WAL): one row per version, rebuilt from models/
  models/<name>/<version>/       version 1, 2, ...; read-only once registered
    lineage.json                 where it came from (run, params, metrics, code, environment,
                                 data, sweep) and each file's path, size and sha256
    <file or folder>             the registered file or folder, copied out of the run
  models/<name>/.register-*      a version being copied (renamed into place when complete)
  models/<name>/.deleted.json    the numbers of its deleted versions (never given again)
  models/<name>/.delete-*, models/.delete-*   a version, or a model, being removed
```
A version's files are copies, never links, so pruning or deleting its run changes nothing
here. A version is copied and hashed under a hidden name, then numbered and renamed into
place inside the index's write transaction: two registrations of one name at the same time
get two numbers, and a failed one leaves nothing. Deleting renames the version out of
place and drops its row in one such transaction, then removes the files. The folders are
the truth and ``models.db`` a cache of them, healed like ``runs.db``; what they record is
checked before any path is built from it (``model_records``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import InvalidRunId, ModelNotFound, SpecError, StoreError
from ..core.modes import RUN_DIR_MODE, make_top
from ..core.spec import validate_run_id
from ..rankside.host.home import HOME_ENV, default_home
from . import write_json_atomic
from .confined import Refused, open_beneath, open_folder, real_parts
from .folders import is_run_id, rmtree
from .index import FolderIndex, index_url, unwritable
from .index_base import IndexBase
from .model_records import DELETED, LINEAGE, read_deleted, read_lineage
from .outputs import copy_descriptor, walk_files
from .pg_index import PgIndex
from .workspace import settings

_VERSION = re.compile(r"[1-9][0-9]{0,8}")
COLUMNS = ("name", "version", "run_id", "path", "files", "bytes", "created", "tags")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    path TEXT NOT NULL,
    files INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    created REAL NOT NULL,
    tags TEXT NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE INDEX IF NOT EXISTS models_run ON models (run_id);
"""


def validate_model_name(name: object) -> str:
    """``name`` if it is a safe single path segment (the rule of run ids), else ``SpecError``."""
    try:
        return validate_run_id(name)
    except InvalidRunId:
        raise SpecError(
            f"invalid model name {name!r}: a model name is 1-128 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        ) from None


def parse_ref(text: str) -> tuple[str, int | None]:
    """``NAME``, ``NAME@VERSION`` or ``NAME@latest`` as (name, version or None)."""
    name, at, version = str(text).rpartition("@") if "@" in str(text) else (text, "", "")
    validate_model_name(name)
    if not at or version == "latest":
        return name, None
    if not _VERSION.fullmatch(version):
        raise SpecError(
            f"invalid model version {version!r} in {text!r}: give NAME@N with N a "
            "whole number from 1, or NAME for the latest version"
        )
    return name, int(version)


def index_row(lineage: dict[str, Any]) -> dict[str, Any]:
    """The index row of a version with this lineage."""
    return {
        "name": lineage["name"],
        "version": lineage["version"],
        "run_id": lineage["run_id"],
        "path": lineage["path"],
        "files": len(lineage["files"]),
        "bytes": sum(f["size"] for f in lineage["files"]),
        "created": lineage["created"],
        "tags": json.dumps(lineage.get("tags") or {}, sort_keys=True),
    }


class ModelQueries(IndexBase):
    """The model index's own queries, on either database: one row per registered version."""

    FILE, TABLE, SCHEMA, LABEL, COLUMNS = "models.db", "models", _SCHEMA, "model", COLUMNS
    KEY: tuple[str, ...] = ("name", "version")

    def rows(self, name: str | None = None) -> list[dict[str, Any]]:
        """Rows of every version (of ``name``), by name, newest version first."""
        query = "SELECT * FROM models" + (" WHERE name = ?" if name else "")
        found = self.run(
            lambda conn: [
                dict(r)
                for r in conn.execute(
                    query + " ORDER BY name, version DESC", (name,) if name else ()
                )
            ]
        )
        for row in found:
            row["tags"] = json.loads(row["tags"])
        return found

    def add_version(
        self, name: str, stage: Path, folder: Path, finish: Callable[[int], dict[str, Any]]
    ) -> int:
        """Number the version in ``stage`` (one above any version of ``name`` in the index or
        in ``folder``), let ``finish(version)`` write its lineage and return its row, and
        rename ``stage`` to ``folder/<version>``: all in one write transaction, which
        registrations of the name take one at a time."""
        numbered: list[int] = []

        def decide(conn: Any) -> tuple[dict[str, Any], Path]:
            found = conn.execute("SELECT MAX(version) FROM models WHERE name = ?", (name,))
            top = found.fetchone()[0] or 0
            gone = [int(v) for v in read_deleted(folder.parent, name)]
            numbered.append(max([top, *versions_in(folder), *gone]) + 1)
            return finish(numbered[-1]), folder / str(numbered[-1])

        self.publish_with(stage, decide)
        return numbered[-1]


class ModelIndex(ModelQueries, FolderIndex):
    """``home/models.db``."""


class PgModelIndex(ModelQueries, PgIndex):
    """The model index of a workspace whose index is on PostgreSQL."""


def model_index(home: Path, folder_rows: Callable[[], list[dict[str, Any]]]) -> ModelQueries:
    """The model index of the store at ``home``: SQLite, or its workspace's PostgreSQL."""
    url = index_url(home)
    if url is None:
        return ModelIndex(home, folder_rows)
    return PgModelIndex(home, url, folder_rows)


def versions_in(folder: Path) -> list[int]:
    """The version numbers of the folders in ``folder`` (a model's), sorted."""
    try:
        return sorted(int(e.name) for e in os.scandir(folder) if _VERSION.fullmatch(e.name))
    except (FileNotFoundError, NotADirectoryError):
        return []


class ModelStore:
    """The model registry of the run store at ``home`` (default ``$JUPYTER_TRAINER_HOME``)."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.home = Path(home).expanduser() if home else default_home()
        self.dir = self.home / "models"
        self.index = model_index(self.home, self._folder_rows)

    def folder(self, name: str) -> Path:
        return self.dir / validate_model_name(name)

    def names(self) -> list[str]:
        """Names with at least one version on disk, sorted."""
        try:
            entries = sorted(e.name for e in os.scandir(self.dir) if not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [n for n in entries if is_run_id(n) and versions_in(self.dir / n)]

    def _folder_rows(self) -> list[dict[str, Any]]:
        """The rows the version folders call for; a damaged version has none."""
        rows = []
        for name in self.names():
            for version in versions_in(self.dir / name):
                try:
                    rows.append(index_row(read_lineage(self.dir, name, version)))
                except StoreError:
                    continue
        return rows

    def rows(self, name: str | None = None) -> list[dict[str, Any]]:
        """Index rows of the versions whose folders exist, by name, newest version first."""
        if name is not None:
            validate_model_name(name)
        if not self.index.exists() and not self.names():
            return []  # nothing registered yet: nothing to list, nothing to create
        return [
            r
            for r in self.index.rows(name)
            if (self.dir / r["name"] / str(r["version"]) / LINEAGE).is_file()
        ]

    def version_dir(self, name: str, version: int | None = None) -> Path:
        """The folder of ``version`` of ``name`` (None: the latest); ``ModelNotFound``
        naming what exists if there is none."""
        folder = self.folder(name)
        found = [v for v in versions_in(folder) if (folder / str(v) / LINEAGE).is_file()]
        if not found:
            names = self.names()
            have = f"registered models: {', '.join(names)}" if names else "no model is registered"
            raise ModelNotFound(
                f"no model {name!r} in {self.home} ({have}); register one with "
                "`jupyter-trainer register RUN NAME PATH` (or set "
                f"{HOME_ENV} to the store that holds it)"
            )
        if version is None:
            return folder / str(found[-1])
        if version not in found:
            raise ModelNotFound(
                f"model {name!r} has no version {version}"
                f"{self._deleted_note(name, version)}; it has version"
                f"{'s' if len(found) > 1 else ''} "
                f"{', '.join(map(str, found))}"
            )
        return folder / str(version)

    def _deleted_note(self, name: str, version: int) -> str:
        """``: it was deleted (when by whom)`` for a deleted version, else ``""``."""
        try:
            gone = read_deleted(self.dir, name).get(str(version))
        except StoreError:
            return ""
        if not gone:
            return ""
        when = gone.get("deleted")
        if not isinstance(when, (int, float)):
            return ""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
        return f": it was deleted ({stamp} by {gone.get('user') or 'unknown'})"

    def versions(self, name: str) -> list[int]:
        """Every version folder of ``name`` on disk, sorted, damaged ones included;
        ``ModelNotFound`` naming the models there are if it has none."""
        found = versions_in(self.folder(name))
        if not found:
            self.version_dir(name)  # raises ModelNotFound naming the models
        return found

    def lineage(self, name: str, version: int | None = None) -> dict[str, Any]:
        """The version's lineage, checked: a damaged one raises ``StoreError``."""
        return read_lineage(self.dir, name, int(self.version_dir(name, version).name))

    def register(
        self, name: str, source: Path, root: Path, lineage: dict[str, Any]
    ) -> dict[str, Any]:
        """Copy the file or folder ``source`` (inside ``root``, a run's ``outputs/``) as the
        next version of ``name``, hashing each file as it is copied; write ``lineage``
        (completed with the version, the time and the files) beside it. Returns the
        version's lineage."""
        folder = self.folder(name)
        item = source.name if source != root else "outputs"
        if item == LINEAGE:
            raise SpecError(
                f"a registered file cannot be named {LINEAGE} (the version's own "
                "record has that name); rename it in the run's outputs/"
            )
        files = _files_to_copy(source, root, item)
        shared = settings(self.home).shared
        try:
            for top in (self.home, self.dir, folder):  # a member registers beside others
                make_top(top, shared)
            stage = Path(tempfile.mkdtemp(prefix=".register-", dir=folder))
        except OSError as exc:
            raise unwritable(folder, exc) from None
        try:
            copied = _copy_files(root, files, stage)
            if shared:
                os.chmod(stage, RUN_DIR_MODE)
            record: dict[str, Any] = {}

            def finish(version: int) -> dict[str, Any]:
                record.update(
                    lineage,
                    name=name,
                    version=version,
                    created=time.time(),
                    path=item,
                    files=copied,
                )
                write_json_atomic(stage / LINEAGE, record)
                os.chmod(stage / LINEAGE, 0o444)
                return index_row(record)

            self.index.add_version(name, stage, folder, finish)
        except BaseException as exc:
            rmtree(stage)
            _remove_if_empty(folder)
            if isinstance(exc, OSError):
                raise StoreError(
                    f"cannot register {source} as model {name!r} in {folder}: {exc.strerror or exc}"
                ) from None
            raise
        return record

    def delete_version(self, name: str, version: int, by: dict[str, Any]) -> None:
        """Remove version ``version`` of ``name``: its number is recorded in
        ``.deleted.json`` (with ``by``: who and when), never to be given again, and its
        folder is renamed out of place and its row dropped in one write transaction, then
        its files removed."""
        folder = self.folder(name)
        here = folder / str(version)
        if not os.path.lexists(here):
            self.version_dir(name, version)  # raises ModelNotFound naming the versions
        doomed = folder / f".delete-{version}-{secrets.token_hex(4)}"

        def work(conn: Any) -> None:
            if not os.path.lexists(here):
                raise ModelNotFound(
                    f"model {name!r} has no version {version} (it was deleted meanwhile)"
                )
            gone = read_deleted(self.dir, name)
            gone[str(version)] = by
            write_json_atomic(folder / DELETED, gone)
            os.rename(here, doomed)
            os.utime(doomed, follow_symlinks=False)  # its age tells doctor it is being removed
            conn.execute("DELETE FROM models WHERE name = ? AND version = ?", (name, version))

        self._delete(folder, work, lambda: os.rename(doomed, here), doomed)

    def delete_model(self, name: str) -> None:
        """Remove every version of ``name`` and its record of deleted ones: the name is
        free again, and its next registration is version 1."""
        folder = self.folder(name)
        if not os.path.lexists(folder):
            self.version_dir(name)  # raises ModelNotFound naming the models
        doomed = self.dir / f".delete-{name}-{secrets.token_hex(4)}"

        def work(conn: Any) -> None:
            os.rename(folder, doomed)
            os.utime(doomed, follow_symlinks=False)
            conn.execute("DELETE FROM models WHERE name = ?", (name,))

        self._delete(folder, work, lambda: os.rename(doomed, folder), doomed)

    def _delete(
        self, folder: Path, work: Callable[[Any], None], undo: Callable[[], None], doomed: Path
    ) -> None:
        try:
            self.index.transact(work, undo)
            rmtree(doomed)
        except OSError as exc:
            raise StoreError(
                f"cannot delete from {folder}: {exc.strerror or exc}; "
                "`jupyter-trainer doctor --fix` finishes a deletion left "
                "halfway"
            ) from None


def _files_to_copy(source: Path, root: Path, item: str) -> list[tuple[str, tuple[str, ...]]]:
    """(path in the version, parts below ``root``, links resolved) of each file of
    ``source``, a file or folder inside ``root``."""
    if source.is_file():
        found = [(item, source)]
    else:
        found = [(f"{item}/{rel}", path) for rel, path in walk_files(source, root, strict=True)]
    files = []
    for rel, path in found:
        parts = real_parts(root, path)
        if not parts:
            raise StoreError(
                f"{rel} left the run's outputs/ while it was being registered; "
                "nothing was registered"
            )
        files.append((rel, parts))
    return files


def _copy_files(
    root: Path, files: list[tuple[str, tuple[str, ...]]], stage: Path
) -> list[dict[str, Any]]:
    """Copy each (relative path, parts below ``root``) into ``stage``, read-only; their
    records. Each source is opened again below ``root`` without following any link, and
    must be a regular file: one swapped for a link or anything else since the scan is
    refused, never copied."""
    copied = []
    root_fd = open_folder(root)
    try:
        for rel, parts in files:
            dst = stage.joinpath(*rel.split("/"))
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                fin = open_beneath(root_fd, parts)
            except Refused as exc:
                raise StoreError(
                    f"{exc.filename} in the run's outputs/ {exc.strerror}: it "
                    "changed while it was being registered; nothing was "
                    "registered"
                ) from None
            try:
                fout = os.open(dst, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                try:
                    digest = copy_descriptor(fin, fout, f"{'/'.join(parts)} in the run's outputs/")
                    size = os.fstat(fout).st_size
                finally:
                    os.close(fout)
            finally:
                os.close(fin)
            os.chmod(dst, 0o444)
            copied.append({"path": rel, "size": size, "sha256": digest})
    finally:
        os.close(root_fd)
    for dirpath, _dirs, _files in os.walk(stage):
        if dirpath != str(stage):
            os.chmod(dirpath, 0o555)
    return copied


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass
