"""A v1 dataset of several paths (``Dataset.File.from_files(path=[...])``), gathered into one
folder that a run reads (see ``dataset.py``)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from ...core.urls import redact
from ..errors import UserErrorException

_HTTP_URL = re.compile(r"https?://", re.I)


def leaf_of(source: str) -> str:
    if _HTTP_URL.match(source):
        return urllib.parse.unquote(source.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
    return Path(source).name


def gather(sources: Sequence[str], home: Path) -> Path:
    """One folder holding each of ``sources`` under its own name, as v1 mounted a dataset
    of several paths: ``<home>/datastore/.from-files/<key>/``. Each URL is downloaded into
    the data cache as a URL input is (once, with the same size and time limits); files are
    hard links to the originals where the filesystem allows, copies elsewhere. Made anew
    on each use, so it is what the sources are now."""
    from ...inputs.fetch import fetch
    from ...inputs.inputs import URL_CACHE, cache_dir

    leaves: dict[str, str] = {}
    for source in sources:
        leaf = leaf_of(source)
        if not leaf or leaf in (".", "..") or any(c in leaf for c in "/\\\0"):
            raise UserErrorException(
                f"dataset path {redact(source)!r} does not end in a file or folder name "
                "(its last part, decoded, is empty, '.', '..' or has a slash); give the URL "
                "of the file itself"
            )
        if leaf in leaves:
            raise UserErrorException(
                f"two paths of the dataset are both named {leaf!r} ({redact(leaves[leaf])} and "
                f"{redact(source)}): a run reads them from one folder, so give them different "
                "names, or make them two datasets"
            )
        leaves[leaf] = source
    key = hashlib.sha256("\n".join(redact(s) for s in sources).encode()).hexdigest()[:24]
    root = home / "datastore" / ".from-files"
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    try:
        for leaf, source in leaves.items():
            path = (
                fetch(leaf, source, cache_dir(home) / URL_CACHE)
                if _HTTP_URL.match(source)
                else Path(source)
            )
            if path.is_dir():
                shutil.copytree(path, tmp / leaf, copy_function=_link_or_copy, symlinks=True)
            else:
                _link_or_copy(str(path), str(tmp / leaf))
        folder = root / key
        if folder.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{key}-old-", dir=root))
            folder.rename(old / key)
            shutil.rmtree(old, ignore_errors=True)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)
    return dst
