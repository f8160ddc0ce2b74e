"""``--data NAME=PATH`` values to checked ``DataSpec``s, before the run exists.

A path must exist and every file in it must be readable, or nothing starts; a URL is
downloaded (or found up to date) into the local cache first. Each input is recorded with
its source, size, file count and content hash. ``refresh_inputs`` does it again for a new
run of an old spec, and ``check_unchanged`` makes sure, before staging, that an input still
is what was recorded.
"""

from __future__ import annotations

import os
import urllib.parse
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from ..errors import SpecError
from ..spec import DataSpec, validate_data_name
from .digest import HashCache, Manifest, manifest


def is_url(source: str) -> bool:
    scheme = urllib.parse.urlsplit(source).scheme
    return len(scheme) > 1 and "://" in source  # a Windows drive letter is no scheme


def parse_inputs(data: Mapping[str, str | os.PathLike] | Sequence[str] | None) -> dict[str, str]:
    """``{"digits": "~/data"}`` or ``["digits=~/data"]`` -> ``{name: source}``."""
    if not data:
        return {}
    if isinstance(data, Mapping):
        items = [(str(k), os.fspath(v)) for k, v in data.items()]
    elif isinstance(data, (str, bytes)):
        raise SpecError(f"data inputs are NAME=PATH strings in a list, or a mapping; got "
                        f"{data!r}")
    else:
        items = []
        for item in data:
            name, sep, source = str(item).partition("=")
            if not sep or not source.strip():
                raise SpecError(f"invalid data input {item!r}: write --data NAME=PATH (a "
                                "folder, a file or a URL), for example --data digits=~/data")
            items.append((name.strip(), source.strip()))
    found: dict[str, str] = {}
    for name, source in items:
        validate_data_name(name)
        if name in found:
            raise SpecError(f"the data input {name!r} is given twice; keep the one you mean")
        found[name] = source
    return found


def cache_dir(home: Path) -> Path:
    return Path(home) / "cache"


def resolve_inputs(data: Mapping[str, str | os.PathLike] | Sequence[str] | None, *,
                   home: Path) -> tuple[DataSpec, ...]:
    return _resolve_all([(name, source, source) for name, source in parse_inputs(data).items()],
                        home)


def refresh_inputs(inputs: Sequence[DataSpec], *, home: Path) -> tuple[DataSpec, ...]:
    """``inputs`` as they are now (a rerun, a sweep's next trial): each local input hashed
    again at its path (cheap where unchanged), each URL asked again; the names and sources
    are kept."""
    return _resolve_all([(d.name, d.source if is_url(d.source) else d.path, d.source)
                         for d in inputs], home)


@contextmanager
def _hashes(home: Path) -> Iterator[HashCache]:
    cache = HashCache(cache_dir(home) / "data-hashes.db")
    try:
        yield cache
    finally:
        cache.close()


def _resolve_all(items: list[tuple[str, str, str]], home: Path) -> tuple[DataSpec, ...]:
    """(name, where to read it, the source to record) -> checked ``DataSpec``s."""
    if not items:
        return ()
    with _hashes(home) as cache:
        return tuple(_resolve(name, source, home, cache, shown) for name, source, shown in items)


def _resolve(name: str, source: str, home: Path, cache: HashCache, shown: str) -> DataSpec:
    if is_url(source):
        from .fetch import fetch  # urllib.request and fsspec only for a URL

        local = fetch(source, cache_dir(home) / "data-url")
    else:
        local = Path(source).expanduser().absolute()
        if not local.exists() and local.is_symlink():
            raise SpecError(f"the data input {name}={source}: {local} is a symbolic link to "
                            f"{os.readlink(local)}, which does not exist; fix the link or give "
                            "the data's own path")
        if not local.exists():
            raise SpecError(f"the data input {name}={source}: {local} does not exist; give an "
                            "existing folder or file (or an http(s):// or fsspec URL)")
        if not os.access(local, os.R_OK) or (local.is_dir() and not os.access(local, os.X_OK)):
            raise SpecError(f"the data input {name}={source}: {local} is not readable by you; "
                            "fix its permissions")
        if not (local.is_dir() or local.is_file()):
            raise SpecError(f"the data input {name}={source}: {local} is neither a folder nor "
                            "a regular file")
    found = manifest(local, cache)
    return DataSpec(name=name, source=shown, path=str(local), kind=found.kind,
                    size=found.size, files=len(found.entries), hash=found.hash)


def check_unchanged(item: DataSpec, home: Path) -> Manifest:
    """``item``'s manifest, after checking that its files still hash as at submit (only
    stat'ed where the hash cache knows them): a changed input must not be stored in a node
    cache under its old hash."""
    with _hashes(home) as cache:
        found = manifest(Path(item.path), cache)
    if found.hash != item.hash:
        raise SpecError(f"the data input {item.name} ({item.path}) changed after the run was "
                        f"submitted (its content hash was {item.hash}, it is {found.hash} "
                        "now); submit the run again to use it as it is")
    return found
