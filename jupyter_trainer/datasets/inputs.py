"""``--data NAME=PATH`` values to checked ``DataSpec``s, before the run exists.

A path must exist and every file in it must be readable, or nothing starts; a URL is
downloaded (or found up to date) into the local cache first. Each input is recorded with
its source, size, file count and content hash, and its manifest is kept under
``<home>/cache/data-manifests/<hash>.json`` for staging to send only what changed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import SpecError
from ..spec import DataSpec, validate_data_name
from .digest import HashCache, Manifest, manifest
from .fetch import fetch, is_url


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
    sources = parse_inputs(data)
    if not sources:
        return ()
    cache = HashCache(cache_dir(home) / "data-hashes.db")
    try:
        return tuple(_resolve(name, source, home, cache) for name, source in sources.items())
    finally:
        cache.close()


def _resolve(name: str, source: str, home: Path, cache: HashCache) -> DataSpec:
    if is_url(source):
        local = fetch(source, cache_dir(home) / "data-url")
    else:
        local = Path(source).expanduser().absolute()
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
    save_manifest(home, found)
    return DataSpec(name=name, source=source, path=str(local), kind=found.kind,
                    size=found.size, files=len(found.entries), hash=found.hash)


def save_manifest(home: Path, found: Manifest) -> Path:
    folder = cache_dir(home) / "data-manifests"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{found.hash}.json"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(found.to_json()))
        os.replace(tmp, path)
    return path


def load_manifest(home: Path, digest: str) -> Manifest:
    return Manifest.from_json(json.loads((cache_dir(home) / "data-manifests" /
                                          f"{digest}.json").read_text()))
