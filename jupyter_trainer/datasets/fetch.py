"""URL inputs, downloaded once into ``<home>/cache/data-url/<key>/``.

``http(s)://`` is fetched with the standard library (a HEAD request first: when the size,
ETag and Last-Modified match what was downloaded before, nothing is downloaded again). Any
other scheme goes through fsspec, with the driver the user installed for it (``s3://`` needs
s3fs, ``gs://`` gcsfs, ...); where the driver is missing the message names the package.
A download lands in a temporary folder and is renamed into place when complete, so an
interrupted one is never taken for the data.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ..errors import SpecError

TIMEOUT_S = 60
_CHUNK = 1 << 20


def fetch(url: str, cache_root: Path) -> Path:
    """The local copy of ``url`` (a file, or a folder for a directory URL), downloaded now
    unless an up-to-date copy is in the cache."""
    key = hashlib.sha256(url.encode()).hexdigest()[:24]
    entry = cache_root / key
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    fresh = _http_facts(url) if scheme in ("http", "https") else _fsspec_facts(url)
    meta_path = entry / "source.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            meta = {}
        if meta.get("facts") == fresh and (entry / meta.get("leaf", "")).exists():
            return entry / meta["leaf"]
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache_root))
    try:
        leaf = _leaf(url)
        if scheme in ("http", "https"):
            _http_download(url, tmp / leaf)
        else:
            _fsspec_download(url, tmp / leaf)
        (tmp / "source.json").write_text(json.dumps({"url": url, "leaf": leaf, "facts": fresh}))
        if entry.exists():
            shutil.rmtree(entry)
        os.replace(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry / leaf


def _leaf(url: str) -> str:
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1])
    return name if name and name not in (".", "..") and "/" not in name else "data"


def _http_facts(url: str) -> dict[str, Any]:
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            headers = answer.headers
    except urllib.error.HTTPError as exc:
        if exc.code in (403, 405, 501):  # a server without HEAD: download every time
            return {}
        raise SpecError(f"cannot fetch the data input {url}: HTTP {exc.code} {exc.reason}; "
                        "check the URL") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SpecError(f"cannot reach the data input {url}: {reason}; check the URL and "
                        "the network") from None
    return {k: headers.get(k) for k in ("Content-Length", "ETag", "Last-Modified")
            if headers.get(k)}


def _http_download(url: str, dest: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer, open(dest, "wb") as out:
            shutil.copyfileobj(answer, out, _CHUNK)
    except urllib.error.HTTPError as exc:
        raise SpecError(f"cannot fetch the data input {url}: HTTP {exc.code} {exc.reason}; "
                        "check the URL") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SpecError(f"downloading the data input {url} failed: {reason}") from None


def _filesystem(url: str) -> Any:
    try:
        import fsspec
    except ImportError:
        raise SpecError(f"the data input {url} needs fsspec (pip install fsspec) and its "
                        "driver for this scheme") from None
    scheme = urllib.parse.urlsplit(url).scheme
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise SpecError(f"the data input {url} needs the fsspec driver for {scheme}://: "
                        f"{exc}") from None
    except ValueError as exc:
        raise SpecError(f"the data input {url}: fsspec does not know {scheme}:// ({exc}); "
                        "install the package that provides it") from None


def _fsspec_facts(url: str) -> dict[str, Any]:
    fs, path = _filesystem(url)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise SpecError(f"the data input {url} does not exist") from None
    except Exception as exc:
        raise SpecError(f"cannot read the data input {url}: {exc}") from None
    return {k: str(info[k]) for k in ("size", "type", "mtime", "ETag", "etag", "LastModified",
                                      "md5Hash", "checksum") if info.get(k) is not None}


def _fsspec_download(url: str, dest: Path) -> None:
    fs, path = _filesystem(url)
    try:
        fs.get(path, str(dest), recursive=fs.isdir(path))
    except Exception as exc:
        raise SpecError(f"downloading the data input {url} failed: {exc}") from None
