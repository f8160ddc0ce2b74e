"""URL inputs, downloaded once into ``<home>/cache/data-url/<key>/`` (a folder only its
owner may read: the data may be private).

Before a download the server is asked what the content is (size, ETag, Last-Modified for
http(s): ``http_fetch.py``; fsspec's ``info`` for other schemes: ``fsspec_fetch.py``): when
it matches what was downloaded before, nothing is downloaded again. A server that says
nothing that could tell a change is downloaded every time.

The cache is keyed by the URL redacted (``urls.redact``), and its ``source.json`` records
only that: a presigned URL signed again for the same object finds the same entry.

A download lands in a private ``.partial-<pid>-<start>-<key>-*`` folder and is renamed
into place when complete, so an interrupted one is never taken for the data. That folder
is removed on every way out: an error, the size or the time limit (``limits.py``), Ctrl-C,
and SIGTERM or SIGHUP of the process doing it (while the download runs, those signals
remove the folder, then end the process as they would have). One left by a process that
was killed outright (SIGKILL) is removed by the next download once that process is gone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from ..core.files import private_folder
from ..core.urls import redact
from ..rankside.host import procs
from .limits import Limits, Say, Transfer, say_on_stderr

# What signal.signal takes and returns: a function, SIG_DFL or SIG_IGN, or None.
SignalHandler = Callable[[int, FrameType | None], Any] | int | None

PARTIAL = ".partial-"
_STALE = re.compile(rf"{re.escape(PARTIAL)}(\d+)-(\d+)-")


def cache_key(url: str) -> str:
    return hashlib.sha256(redact(url).encode()).hexdigest()[:24]


def fetch(
    name: str,
    url: str,
    cache_root: Path,
    *,
    limits: Limits | None = None,
    say: Say | None = say_on_stderr,
) -> Path:
    """The local copy of ``url`` (a file, or a folder for a directory URL), downloaded now
    unless an up-to-date copy is in the cache. ``name`` is the input's, for messages."""
    limits = limits or Limits.from_env()
    private_folder(cache_root)
    remove_stale(cache_root)
    entry = cache_root / cache_key(url)
    with Transfer(name, redact(url), limits, say, room=cache_root) as transfer:
        fresh = _facts(url, transfer)
        found = cached(entry, fresh)
        if found is not None:
            return found
        transfer.expect(announced_size(fresh))  # a size over the limit: not even asked for
        leaf = _leaf(url)
        with partial_folder(cache_root, entry.name) as tmp:
            _download(url, tmp / leaf, transfer)
            (tmp / "source.json").write_text(
                json.dumps({"url": transfer.shown, "leaf": leaf, "facts": fresh})
            )
            _put_in_place(tmp, entry, leaf)
        if say:
            say(transfer.done_text())
    return entry / leaf


def look(
    name: str, url: str, cache_root: Path, *, limits: Limits | None = None
) -> tuple[Path, dict[str, Any], bool]:
    """What ``fetch`` would do, downloading nothing and writing nothing (``--dry-run``):
    where the copy is or would be, what the server says of it, and whether the cache has
    it up to date. A server that says it is over the size limit raises, as ``fetch`` would."""
    limits = limits or Limits.from_env()
    entry = cache_root / cache_key(url)
    with Transfer(name, redact(url), limits, None) as transfer:
        fresh = _facts(url, transfer)
    found = cached(entry, fresh)
    if found is None:
        transfer.expect(announced_size(fresh))
    return (found or entry / _leaf(url)), fresh, found is not None


def announced_size(facts: dict[str, Any]) -> int | None:
    """The size the server gave (a folder's is the sum of its files, known only later)."""
    if facts.get("type") == "directory":
        return None
    size = str(facts.get("Content-Length") or facts.get("size") or "")
    return int(size) if size.isdigit() else None


def cached(entry: Path, fresh: dict[str, Any]) -> Path | None:
    """The cached copy in ``entry`` when the server's ``fresh`` facts match its own (never
    when there are none to compare)."""
    try:
        meta = json.loads((entry / "source.json").read_text())
    except (OSError, ValueError):
        return None
    leaf = meta.get("leaf") if isinstance(meta, dict) else None
    if fresh and isinstance(leaf, str) and meta.get("facts") == fresh and (entry / leaf).exists():
        return entry / leaf
    return None


def _scheme(url: str) -> str:
    return urllib.parse.urlsplit(url).scheme.lower()


def _facts(url: str, transfer: Transfer) -> dict[str, Any]:
    if _scheme(url) in ("http", "https"):
        from .http_fetch import http_facts

        return http_facts(url, transfer)
    from .fsspec_fetch import fsspec_facts

    return fsspec_facts(url, transfer)


def _download(url: str, dest: Path, transfer: Transfer) -> None:
    if _scheme(url) in ("http", "https"):
        from .http_fetch import http_download

        http_download(url, dest, transfer)
    else:
        from .fsspec_fetch import fsspec_download

        fsspec_download(url, dest, transfer)


def _leaf(url: str) -> str:
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1])
    return name if name and name not in (".", "..") and "/" not in name else "data"


def _put_in_place(tmp: Path, entry: Path, leaf: str) -> None:
    if entry.exists():
        shutil.rmtree(entry)
    try:
        os.replace(tmp, entry)
    except OSError:
        if not (entry / leaf).exists():  # not another submit of the same URL, just now
            raise


# -- partial downloads -----------------------------------------------------------------
class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived while a download ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


@contextmanager
def partial_folder(root: Path, key: str) -> Iterator[Path]:
    """A private folder for one download, removed however the block ends."""
    me = os.getpid()
    tmp = Path(
        tempfile.mkdtemp(prefix=f"{PARTIAL}{me}-{procs.start_ticks(me) or 0}-{key}-", dir=root)
    )
    caught = _catch_termination()
    try:
        yield tmp
    except Terminated as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        _restore(caught)
        signal.raise_signal(exc.signum)  # its default action now: the process ends
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        _restore(caught)


def _catch_termination() -> dict[int, SignalHandler]:
    """SIGTERM and SIGHUP raise ``Terminated`` where they would end the process (their
    default action, in the main thread); a handler someone else set is left alone."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    caught: dict[int, SignalHandler] = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            caught[signum] = signal.signal(signum, _terminated)
    return caught


def _restore(caught: dict[int, SignalHandler]) -> None:
    for signum, handler in caught.items():
        signal.signal(signum, handler)
    caught.clear()


def remove_stale(root: Path) -> None:
    """Remove the partial folders of downloads whose process is gone (killed outright)."""
    for path in root.glob(f"{PARTIAL}*"):
        match = _STALE.match(path.name)
        if match is None:
            continue
        pid, ticks = int(match.group(1)), int(match.group(2))
        if not procs.is_alive(pid, ticks or None):
            shutil.rmtree(path, ignore_errors=True)
