"""URL inputs of any other scheme, through fsspec and the driver the user installed for it
(``s3://`` needs s3fs, ``gs://`` gcsfs, ...); where the driver is missing the message names
the package.

A file or a folder is listed first, so a total over the size limit is refused before
anything is written, then copied a block at a time: the size and the time limits are
checked after every block (a driver's own timeouts bound a single block). Credentials come
from the driver's own configuration (environment, config files) or the URL; messages show
the URL redacted and scrub anything a driver quotes from it.
"""

from __future__ import annotations

import posixpath
import urllib.parse
from pathlib import Path
from typing import Any

from ..core.errors import SpecError
from ..core.urls import scrub
from .limits import Transfer

_CHUNK = 1 << 20


# the package that gives fsspec each common scheme, for the message when it is missing
DRIVERS = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
}


def open_filesystem(url: str, what: str, **options: Any) -> Any:
    """``(filesystem, path)`` for ``url`` through fsspec; ``SpecError`` naming ``what`` and
    the package to install when fsspec or its driver for the scheme is missing, or when
    fsspec knows no such scheme. ``options`` go to the driver (timeouts, caching)."""
    try:
        import fsspec
    except ImportError:
        raise SpecError(
            f"{what} needs fsspec (pip install fsspec) and its driver for this scheme"
        ) from None
    scheme = urllib.parse.urlsplit(url).scheme
    try:
        return fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        package = DRIVERS.get(scheme)
        fix = f" (pip install {package})" if package else ""
        raise SpecError(
            f"{what} needs the fsspec driver for {scheme}://{fix}: {scrub(str(exc), url)}"
        ) from None
    except ValueError as exc:
        raise SpecError(
            f"{what}: fsspec does not know {scheme}:// ({scrub(str(exc), url)}); "
            "install the package that provides it"
        ) from None


def _filesystem(url: str, transfer: Transfer) -> Any:
    return open_filesystem(url, f"the data input {transfer.name} ({transfer.shown})")


def fsspec_facts(url: str, transfer: Transfer) -> dict[str, Any]:
    fs, path = _filesystem(url, transfer)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise SpecError(
            f"the data input {transfer.name} ({transfer.shown}) does not exist"
        ) from None
    except Exception as exc:
        raise SpecError(
            f"cannot read the data input {transfer.name} ({transfer.shown}): {scrub(str(exc), url)}"
        ) from None
    return {
        k: str(info[k])
        for k in ("size", "type", "mtime", "ETag", "etag", "LastModified", "md5Hash", "checksum")
        if info.get(k) is not None
    }


def fsspec_download(url: str, dest: Path, transfer: Transfer) -> None:
    """``url`` (a file or a folder) into ``dest``, within ``transfer``'s size and time."""
    fs, path = _filesystem(url, transfer)
    try:
        files = _listing(fs, path, dest, transfer)
        transfer.expect(sum(size for _, _, size in files))
        for remote, local, _ in files:
            local.parent.mkdir(parents=True, exist_ok=True)
            with fs.open(remote, "rb") as src, open(local, "wb") as out:
                while True:
                    transfer.check_time()
                    chunk = src.read(_CHUNK)
                    if not chunk:
                        break
                    transfer.add(len(chunk))
                    out.write(chunk)
    except SpecError:
        raise
    except Exception as exc:
        raise SpecError(
            f"downloading the data input {transfer.name} ({transfer.shown}) "
            f"failed: {scrub(str(exc), url)}"
        ) from None


def _listing(fs: Any, path: str, dest: Path, transfer: Transfer) -> list[tuple[str, Path, int]]:
    """(remote path, local path, size) of each file: ``path`` itself, or every file under
    it, placed as it is under ``path`` (a name that would climb out of ``dest`` is refused)."""
    if not fs.isdir(path):
        return [(path, dest, int(fs.info(path).get("size") or 0))]
    dest.mkdir()
    base = path.rstrip("/")
    out = []
    for remote, info in sorted(fs.find(path, detail=True).items()):
        rel = posixpath.normpath(posixpath.relpath(remote, base))
        if rel.startswith("../") or rel in (".", "..") or posixpath.isabs(rel):
            raise SpecError(
                f"the data input {transfer.name} ({transfer.shown}) lists "
                f"{remote!r}, outside {base!r}; it cannot be downloaded as a folder"
            )
        out.append((remote, dest / rel, int(info.get("size") or 0)))
    return out
