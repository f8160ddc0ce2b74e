"""Where a data URL's credentials are kept, so that a rerun, a resume or a sweep's next
trial can fetch it again: ``secrets/data-urls.db`` in the user's own folder of the store
(the store itself, or ``users/<name>/`` in a workspace), readable by its owner only.

Everything else records the URL redacted (``urls.redact``): the spec, ``show``, the REST
API, a model's lineage, the download cache's ``source.json``, messages and logs. This file
maps each redacted URL to the full one last given for it (a presigned URL signed again
replaces the old one), as ``~/.git-credentials`` or ``~/.docker/config.json`` keep a token:
in a folder of mode 0700, a file of mode 0600, both tightened again on every use. Delete it
to forget every kept credential; a rerun of a run whose credentials are gone then says to
submit the run again with its URL.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path

from ..core.errors import SpecError
from ..core.files import private_file, private_folder
from ..core.urls import is_redacted, redact, secrets_in
from ..core.workspace import settings

FOLDER = "secrets"
FILE = "data-urls.db"


def user_state(home: Path) -> Path:
    """This user's own folder of the store at ``home`` (``Settings.user_dir``): the store
    itself when it is personal, ``users/<name>/`` in a workspace."""
    return settings(Path(home)).user_dir()


def secrets_path(home: Path) -> Path:
    return user_state(home) / FOLDER / FILE


def _open(home: Path) -> sqlite3.Connection:
    path = secrets_path(home)
    private_folder(path.parent)
    private_file(path)
    db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    db.execute(
        "CREATE TABLE IF NOT EXISTS urls (shown TEXT PRIMARY KEY, url TEXT NOT NULL, "
        "saved REAL NOT NULL)"
    )
    return db


def remember(home: Path, url: str) -> None:
    """Keep ``url`` under its redacted form, when it has credentials at all."""
    if not secrets_in(url) or is_redacted(url):
        return
    with closing(_open(home)) as db:
        db.execute("INSERT OR REPLACE INTO urls VALUES (?, ?, ?)", (redact(url), url, time.time()))


def recall(home: Path, name: str, shown: str, *, what: str = "", fix: str = "") -> str:
    """The URL to fetch for the recorded (redacted) ``shown``: the full one kept for it, or
    ``shown`` itself when it never had credentials. Raises ``SpecError`` when they are gone
    (``what`` and ``fix`` name the URL's use and the way out; a data input's by default)."""
    if not is_redacted(shown):
        return shown
    path = secrets_path(home)
    row = None
    if path.is_file():
        with closing(_open(home)) as db:
            row = db.execute("SELECT url FROM urls WHERE shown = ?", (shown,)).fetchone()
    if row is None:
        raise SpecError(
            f"{what or f'the data input {name}'} ({shown}) was given with credentials, and "
            f"they are not kept any more ({path} has no entry for it); "
            f"{fix or f'submit the run again with --data {name}=URL, the full URL'}"
        )
    return row[0]
