"""``--data NAME=PATH`` values to checked ``DataSpec``s, before the run exists.

A path must exist and every file in it must be readable, or nothing starts; a URL is
downloaded (or found up to date) into the local cache first, within the download limits
(``limits.py``), and its credentials are kept aside (``credentials.py``). Each input is
recorded with its source (a URL redacted), size, file count and content hash.
``refresh_inputs`` does it again for a new run of an old spec, and ``check_unchanged``
makes sure, before staging, that an input still is what was recorded.
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import SpecError
from ..core.spec import DataSpec, validate_data_name
from ..core.units import format_bytes
from ..core.urls import redact
from .credentials import recall, remember, user_state
from .digest import HASH_LEN, HashCache, Manifest, manifest
from .limits import Say, say_on_stderr

URL_CACHE = "data-url"  # <home>/cache/data-url/<key>/: downloaded URL inputs


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
        raise SpecError(
            f"data inputs are NAME=PATH strings in a list, or a mapping; got "
            f"{redact(data) if isinstance(data, str) else data!r}"
        )
    else:
        items = []
        for item in data:
            name, sep, source = str(item).partition("=")
            if not sep or not source.strip():
                raise SpecError(
                    f"invalid data input {redact(str(item))!r}: write --data "
                    "NAME=PATH (a folder, a file or a URL), for example --data "
                    "digits=~/data"
                )
            items.append((name.strip(), source.strip()))
    found: dict[str, str] = {}
    for name, source in items:
        validate_data_name(name)
        if name in found:
            raise SpecError(f"the data input {name!r} is given twice; keep the one you mean")
        found[name] = source
    return found


def cache_dir(home: Path) -> Path:
    """The data caches of this user of the store at ``home``: the hashes of the local
    inputs they gave (their paths included) and the URL inputs they downloaded. In a
    workspace they are the member's own (``users/<name>/cache``), never shared: another
    member's would be unreadable to them, or theirs to change."""
    return user_state(home) / "cache"


def resolve_inputs(
    data: Mapping[str, str | os.PathLike] | Sequence[str] | None,
    *,
    home: Path,
    dry_run: bool = False,
    notes: list[str] | None = None,
    say: Say | None = say_on_stderr,
) -> tuple[DataSpec, ...]:
    """Checked ``DataSpec``s of ``data``, each URL downloaded (or found up to date), its
    progress said through ``say``. With ``dry_run`` no URL is downloaded and no credential
    kept: each is only asked about, and ``notes`` gets a line on what a submit would do."""
    items = [(name, source, source) for name, source in parse_inputs(data).items()]
    return _resolve_all(items, home, Fetching(dry_run, notes, say))


def refresh_inputs(
    inputs: Sequence[DataSpec], *, home: Path, say: Say | None = say_on_stderr
) -> tuple[DataSpec, ...]:
    """``inputs`` as they are now (a rerun, a sweep's next trial): each local input hashed
    again at its path (cheap where unchanged), each URL asked again, with the credentials
    kept for it (``credentials.py``); the names and sources are kept."""
    items = [
        (d.name, recall(home, d.name, d.source) if is_url(d.source) else d.path, d.source)
        for d in inputs
    ]
    return _resolve_all(items, home, Fetching(False, None, say))


@dataclass
class Fetching:
    """How URL inputs are taken: downloaded (saying how far through ``say``), or, in a dry
    run, only looked at (a line for each in ``notes``)."""

    dry_run: bool = False
    notes: list[str] | None = None
    say: Say | None = say_on_stderr


@contextmanager
def _hashes(home: Path) -> Iterator[HashCache]:
    cache = HashCache(cache_dir(home) / "data-hashes.db")
    try:
        yield cache
    finally:
        cache.close()


def _resolve_all(
    items: list[tuple[str, str, str]], home: Path, how: Fetching
) -> tuple[DataSpec, ...]:
    """(name, where to read it, the source to record) -> checked ``DataSpec``s."""
    if not items:
        return ()
    with _hashes(home) as cache:
        return tuple(
            _resolve(name, source, home, cache, shown, how) for name, source, shown in items
        )


def _resolve(
    name: str, source: str, home: Path, cache: HashCache, shown: str, how: Fetching
) -> DataSpec:
    if is_url(source):
        if how.dry_run:
            return _looked_at(name, source, home, cache, how)
        from .fetch import fetch  # urllib.request and fsspec only for a URL

        local = fetch(name, source, cache_dir(home) / URL_CACHE, say=how.say)
        remember(home, source)
    else:
        local = Path(source).expanduser().absolute()
        if not local.exists() and local.is_symlink():
            raise SpecError(
                f"the data input {name}={source}: {local} is a symbolic link to "
                f"{os.readlink(local)}, which does not exist; fix the link or give "
                "the data's own path"
            )
        if not local.exists():
            raise SpecError(
                f"the data input {name}={source}: {local} does not exist; give an "
                "existing folder or file (or an http(s):// or fsspec URL)"
            )
        if not os.access(local, os.R_OK) or (local.is_dir() and not os.access(local, os.X_OK)):
            raise SpecError(
                f"the data input {name}={source}: {local} is not readable by you; "
                "fix its permissions"
            )
        if not (local.is_dir() or local.is_file()):
            raise SpecError(
                f"the data input {name}={source}: {local} is neither a folder nor a regular file"
            )
    found = manifest(local, cache)
    return DataSpec(
        name=name,
        source=shown,
        path=str(local),
        kind=found.kind,
        size=found.size,
        files=len(found.entries),
        hash=found.hash,
    )


def _looked_at(name: str, url: str, home: Path, cache: HashCache, how: Fetching) -> DataSpec:
    """A dry run's URL input: the cached copy when it is up to date, else where the
    download would go, with a stand-in hash (the URL's); nothing downloaded or written."""
    from .fetch import announced_size, look

    local, facts, up_to_date = look(name, url, cache_dir(home) / URL_CACHE)
    shown = redact(url)
    if up_to_date:
        if how.notes is not None:
            how.notes.append(f"data {name}: {shown} is in the download cache, up to date")
        found = manifest(local, cache)
        return DataSpec(
            name=name,
            source=shown,
            path=str(local),
            kind=found.kind,
            size=found.size,
            files=len(found.entries),
            hash=found.hash,
        )
    size = announced_size(facts)
    said = f" ({format_bytes(size)})" if size is not None else ""
    if how.notes is not None:
        how.notes.append(
            f"data {name}: {shown}{said} is not downloaded by a dry run; a submit "
            f"downloads it into {local.parent.parent} first"
        )
    stand_in = hashlib.sha256(shown.encode()).hexdigest()[:HASH_LEN]
    folder = facts.get("type") == "directory"
    return DataSpec(
        name=name,
        source=shown,
        path=str(local),
        kind="dir" if folder else "file",
        size=size or 0,
        files=0 if folder else 1,
        hash=stand_in,
    )


def check_unchanged(item: DataSpec, home: Path) -> Manifest:
    """``item``'s manifest, after checking that its files still hash as at submit (only
    stat'ed where the hash cache knows them): a changed input must not be stored in a node
    cache under its old hash."""
    with _hashes(home) as cache:
        found = manifest(Path(item.path), cache)
    if found.hash != item.hash:
        raise SpecError(
            f"the data input {item.name} ({item.path}) changed after the run was "
            f"submitted (its content hash was {item.hash}, it is {found.hash} "
            "now); submit the run again to use it as it is"
        )
    return found
