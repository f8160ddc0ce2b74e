"""``jupyter-trainer doctor``'s checks of this user's data input caches (``cache/`` in the
store, or in their folder ``users/<name>/`` of a workspace).

Both are caches that the next run fills again, so what is broken in them is removed:

- ``data-hashes.db``, the file hashes of local inputs by path, size, mtime and inode: a
  file that is not SQLite, or whose ``files`` table is damaged (fix: remove it; the next
  run hashes its inputs again);
- ``data-url/<key>/``, a URL input downloaded once (``source.json`` with the URL, the name
  of the download in the folder and the server's size/ETag facts, beside the download):
  a ``source.json`` that does not parse, a download that is missing or whose size is not
  the one the server announced (fix: remove the entry; the next run downloads it again);
- ``data-url/.<key>-*``, a download cut short (it is renamed into place only once
  complete): one that nothing has touched for ``STALE_S`` (fix: remove it).

The layout is the one ``datasets.inputs`` and ``datasets.fetch`` write; this module only
reads it, and removes what is broken.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from functools import partial
from pathlib import Path
from typing import Any

from ...inputs.inputs import cache_dir
from ..folders import rmtree
from ..index import open_existing
from .report import STALE_S, Finding, Report, add, last_change

HASHES = "data-hashes.db"
URLS = "data-url"
_HASH_COLUMNS = "path, size, mtime, inode, sha256"


def check_data(home: Path, report: Report) -> None:
    cache = cache_dir(home)  # this user's: in a workspace, users/<name>/cache
    if os.path.lexists(cache / HASHES):
        report.data += 1
        _check_hashes(cache / HASHES, report)
    try:
        entries = sorted(os.scandir(cache / URLS), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return
    now = time.time()
    for entry in entries:
        report.data += 1
        path = Path(entry.path)
        subject = f"data cache {path.relative_to(home)}"
        if entry.name.startswith("."):
            if now - last_change(path) >= STALE_S:
                add(
                    report,
                    Finding(
                        "data-partial",
                        "a download cut short (it was never put in place)",
                        fix="remove it",
                        subject=subject,
                    ),
                    partial(rmtree, path),
                    "removed",
                )
            continue
        problem = _url_entry_problem(path)
        if problem:
            add(
                report,
                Finding(
                    "data-corrupt",
                    problem,
                    fix="remove it (the next run downloads it again)",
                    subject=subject,
                ),
                partial(rmtree, path),
                "removed",
            )


def _check_hashes(path: Path, report: Report) -> None:
    problem = _sqlite_problem(path)
    if problem is None:
        return
    add(
        report,
        Finding(
            "data-hashes",
            f"the data hash cache {path} {problem}",
            fix="remove it (the next run hashes its data inputs again)",
            subject="data cache",
        ),
        lambda: _remove_db(path),
        "removed",
    )


def _sqlite_problem(path: Path) -> str | None:
    if not path.is_file() or path.is_symlink():
        return "is not a file"
    try:
        conn = open_existing(path, "ro")
        try:
            found = [r[0] for r in conn.execute("PRAGMA quick_check")]
            conn.execute(f"SELECT {_HASH_COLUMNS} FROM files LIMIT 1").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return f"is corrupt ({exc})"
    return None if found == ["ok"] else f"is corrupt ({'; '.join(found[:3])})"


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _url_entry_problem(entry: Path) -> str | None:
    """What is wrong with a downloaded URL input, or None."""
    if entry.is_symlink() or not entry.is_dir():
        return "it is not a folder"
    try:
        meta: Any = json.loads((entry / "source.json").read_text())
    except FileNotFoundError:
        return "its source.json is missing"
    except (OSError, ValueError) as exc:
        return f"its source.json cannot be read ({exc})"
    leaf = meta.get("leaf") if isinstance(meta, dict) else None
    if (
        not isinstance(meta, dict)
        or not isinstance(meta.get("url"), str)
        or not isinstance(leaf, str)
        or leaf in ("", ".", "..", "source.json")
        or "/" in leaf
        or not isinstance(meta.get("facts", {}), dict)
    ):
        return "its source.json does not say which URL and download it holds"
    download = entry / leaf
    if not os.path.lexists(download):
        return f"its download {leaf} is missing"
    facts = meta.get("facts") or {}
    announced = facts.get("Content-Length") or (
        facts.get("size") if facts.get("type") == "file" else None
    )
    if announced is not None and download.is_file() and not download.is_symlink():
        size = download.stat().st_size
        if str(size) != str(announced):
            return (
                f"its download {leaf} has {size} bytes, the server announced "
                f"{announced}: it is incomplete or changed, and the next run would take "
                "it for the data"
            )
    return None
