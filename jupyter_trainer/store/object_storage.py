"""A run's checkpoints and outputs in object storage (``s3://``, ``gs://``, ``az://``, any
fsspec URL): the one storage layer the supervisor's uploader, ``files``/``download`` and
``rerun --resume`` use.

Layout under the storage URL::

    URL/<run id>/checkpoints/dcp/step-500/...    a sharded checkpoint's files
    URL/<run id>/checkpoints/step-500.pt         a single-file checkpoint
    URL/<run id>/outputs/...                     the run's outputs/
    URL/<run id>/.jt/manifests/<path>.json       one manifest per uploaded path, written last

A path (a checkpoint's step folder, a checkpoint file, an output file) is in storage only
once its manifest is: the manifest lists every file with its size and sha256, and is
written after every file was uploaded and its size (and, for a single-part S3 upload, its
MD5 ETag) checked against the local file. An upload killed half-way leaves files without a
manifest, which nothing reads. Downloads check every file's size and sha256.

Endpoint and credentials come from the driver's own configuration (``AWS_ENDPOINT_URL``,
``AWS_PROFILE`` and ``~/.aws``, instance roles; gcsfs's and adlfs's own); a URL's own
credentials are kept out of every record (``inputs.credentials``) and messages show it
redacted.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import posixpath
import re
import shutil
import tempfile
import time
import urllib.parse
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..core.errors import SpecError, StoreError
from ..core.urls import redact, scrub, secrets_in
from ..inputs import credentials
from ..inputs.fsspec_fetch import open_filesystem

MANIFESTS = ".jt/manifests"
_PREFERENCE = ("framework", "dcp", "file")  # what a resume takes, least preferred first
STEP = re.compile(r"(?:dcp/)?step-(\d+)(?:\.(?:pt|pkl))?")
_CHUNK = 4 << 20
_S3_OPTIONS = {
    "use_listings_cache": False,
    "config_kwargs": {"connect_timeout": 10, "retries": {"max_attempts": 3}},
}
_FULL = ("507", "InsufficientStorage", "EntityTooLarge", "QuotaExceeded", "No space left")
_UNREACHABLE = ("EndpointConnectionError", "Could not connect", "ConnectTimeout", "timed out")
_DENIED = (
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "Forbidden",
    "403",
    "ExpiredToken",
    "credentials",
)


class Damaged(StoreError):
    """A file of an upload is missing from storage or does not match its manifest."""


def check_url(url: object, where: str = "--storage") -> str:
    """``url`` if it is a storage URL (``scheme://...``); ``SpecError`` otherwise."""
    if not isinstance(url, str) or not url.strip() or not url.isprintable():
        raise SpecError(
            f"{where} takes a storage URL such as s3://bucket/prefix, gs://bucket/prefix, "
            f"az://container/prefix or file:///path, got {redact(str(url))!r}"
        )
    parts = urllib.parse.urlsplit(url)
    if not re.fullmatch(r"[a-z][a-z0-9+.-]*", parts.scheme) or "://" not in url:
        raise SpecError(
            f"{where} {redact(url)!r} is not a URL: write it as s3://bucket/prefix (or "
            "gs://, az://, file:///path, any fsspec URL)"
        )
    if parts.scheme != "file" and not parts.netloc:
        raise SpecError(
            f"{where} {redact(url)!r} names no bucket: write it as {parts.scheme}://bucket/prefix"
        )
    return url


def resolve(given: str | None, target: Any, home: Path) -> str | None:
    """The storage URL of a run: its own (``--storage``), else its target's (``storage`` in
    targets.toml), else the workspace's (``storage`` in config.toml), else None."""
    from ..core.workspace import settings

    for url, where in (
        (given, "--storage"),
        (getattr(target, "storage", None), f"storage of target {getattr(target, 'name', '')!r}"),
        (settings(home).storage, f"storage in {home / 'config.toml'}"),
    ):
        if url:
            return check_url(url, where)
    return None


def describe(exc: BaseException, url: str) -> str:
    """What went wrong with storage, in words: full, refused, missing, or the error."""
    text = scrub(f"{type(exc).__name__}: {exc}", url)
    if any(word in text for word in _FULL):
        return f"the storage is full or over its quota ({text}); free space or raise the quota"
    if isinstance(exc, PermissionError) or any(word in text for word in _DENIED):
        return (
            f"the storage refused the credentials ({text}); check AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY or AWS_PROFILE (or your gcloud/Azure login)"
        )
    if any(word in text for word in _UNREACHABLE):
        return (
            f"the storage cannot be reached ({text}); check the endpoint (AWS_ENDPOINT_URL "
            "for S3-compatible storage) and the network"
        )
    if isinstance(exc, FileNotFoundError) or "NoSuchBucket" in text:
        return f"the bucket does not exist ({text}); create it or name another"
    return text


@dataclass(frozen=True)
class Storage:
    """A storage URL opened through fsspec: ``fs`` and the ``root`` path under it."""

    url: str  # with its credentials, never recorded
    fs: Any
    root: str

    @property
    def shown(self) -> str:
        return redact(self.url)

    @classmethod
    def open(cls, url: str) -> Storage:
        check_url(url)
        s3 = urllib.parse.urlsplit(url).scheme in ("s3", "s3a")
        # a fresh client: the endpoint and credentials as the environment gives them now
        options = {"skip_instance_cache": True, **(_S3_OPTIONS if s3 else {})}
        fs, root = open_filesystem(url, f"the storage {redact(url)}", **options)
        return cls(url, fs, str(root).rstrip("/"))

    def path(self, run_id: str, rel: str = "") -> str:
        return posixpath.join(self.root, run_id, rel) if rel else posixpath.join(self.root, run_id)

    def probe(self) -> None:
        """Write, list and remove a small object, so that an unreachable, unauthorised or
        full storage is found before anything launches. ``SpecError`` says which."""
        name = posixpath.join(self.root, f".jt-probe-{uuid.uuid4().hex}")
        try:
            self.fs.pipe_file(name, b"jupyter-trainer storage probe")
            self.fs.invalidate_cache()
            self.fs.ls(self.root, detail=False)
            self.fs.rm_file(name)
        except Exception as exc:
            raise SpecError(
                f"the storage {self.shown} cannot be used: {describe(exc, self.url)}; "
                "nothing was started"
            ) from None

    # -- upload ------------------------------------------------------------------------
    def upload(
        self, run_id: str, base: Path, rel: str, info: dict[str, Any], replace: bool = False
    ) -> dict[str, Any]:
        """Upload ``base/rel`` (a file, or every file of a folder) to ``<run>/rel``, check
        each, then write its manifest (last). Returns the manifest; raises ``StoreError``.
        With ``replace`` (a path uploaded before has changed: a step saved again) its old
        manifest is removed first, so the old and new files are never taken for one whole."""
        if replace:
            try:
                self.fs.rm_file(self._manifest(run_id, rel))
            except FileNotFoundError:
                pass
            except Exception as exc:
                raise StoreError(
                    f"removing the old manifest of {rel} from {self.shown} failed: "
                    f"{describe(exc, self.url)}"
                ) from None
        local = base / rel
        files = sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else [local]
        entries: dict[str, dict[str, Any]] = {}
        started = time.time()
        for path in files:
            name = path.relative_to(base).as_posix()
            remote = self.path(run_id, name)
            try:
                sha, md5, size = _digests(path)
                self.fs.put_file(str(path), remote)
                self._verify(remote, size, md5, name)
            except StoreError:
                raise
            except Exception as exc:
                raise StoreError(
                    f"uploading {name} to {self.shown} failed: {describe(exc, self.url)}"
                ) from None
            entries[name] = {"size": size, "sha256": sha}
        manifest = {
            **info,
            "path": rel,
            "files": entries,
            "bytes": sum(e["size"] for e in entries.values()),
            "started": started,
            "uploaded": time.time(),
        }
        try:
            self.fs.pipe_file(self._manifest(run_id, rel), json.dumps(manifest).encode())
        except Exception as exc:
            raise StoreError(
                f"writing the manifest of {rel} to {self.shown} failed: {describe(exc, self.url)}"
            ) from None
        return manifest

    def _verify(self, remote: str, size: int, md5: str, name: str) -> None:
        self.fs.invalidate_cache(remote)
        found = self.fs.info(remote)
        if int(found.get("size") or 0) != size:
            raise StoreError(
                f"{name} in {self.shown} has {found.get('size')} bytes after the upload, not {size}"
            )
        etag = str(found.get("ETag") or found.get("etag") or "").strip('"')
        if etag and re.fullmatch(r"[0-9a-f]{32}", etag) and etag != md5:
            raise StoreError(f"{name} in {self.shown}: the server's MD5 differs from the file's")

    def _manifest(self, run_id: str, rel: str) -> str:
        return self.path(run_id, f"{MANIFESTS}/{rel}.json")

    # -- read back ---------------------------------------------------------------------
    def manifests(self, run_id: str) -> list[dict[str, Any]]:
        """Every complete upload of run ``run_id`` (its manifest), sorted by path."""
        folder = self.path(run_id, MANIFESTS)
        try:
            self.fs.invalidate_cache()
            names = self.fs.find(folder) if self.fs.exists(folder) else []
            found = []
            for name in names:
                if name.endswith(".json"):
                    record = json.loads(self.fs.cat_file(name))
                    if isinstance(record, dict) and isinstance(record.get("files"), dict):
                        found.append(record)
        except Exception as exc:
            raise StoreError(
                f"cannot list run {run_id} in {self.shown}: {describe(exc, self.url)}"
            ) from None
        return sorted(found, key=lambda m: str(m.get("path")))

    def checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        """The complete checkpoints of run ``run_id`` in storage, in the order
        ``latest_checkpoint`` prefers them, the one a resume takes last: a framework's (by
        the time it was saved), then sharded ones, then single-file ones (by step)."""
        found = [m for m in self.manifests(run_id) if m.get("kind") in _PREFERENCE]
        return sorted(
            found,
            key=lambda m: (
                _PREFERENCE.index(m["kind"]),
                int(m.get("mtime_ns") or m["step"]),
                m["path"],
            ),
        )

    def newest_whole(self, run_id: str, base: Path) -> tuple[dict[str, Any], Path] | None:
        """The newest checkpoint of run ``run_id`` in storage that downloads whole into
        ``base`` (at its path less ``checkpoints/``), and where; a damaged one (a file
        missing or not matching its manifest) is passed over with a warning naming it."""
        for manifest in reversed(self.checkpoints(run_id)):
            try:
                return manifest, self.download(run_id, manifest, base, strip="checkpoints/")
            except Damaged as exc:
                warnings.warn(
                    f"the checkpoint {manifest['path']} of run {run_id} in storage is damaged "
                    f"({exc}); trying the one before it",
                    stacklevel=2,
                )
        return None

    def outputs(self, run_id: str) -> dict[str, int]:
        """The run's output files in storage -> their sizes (paths relative to outputs/)."""
        out = {}
        for manifest in self.manifests(run_id):
            if manifest.get("kind") == "output":
                for name, entry in manifest["files"].items():
                    out[name.removeprefix("outputs/")] = int(entry["size"])
        return dict(sorted(out.items()))

    def download(self, run_id: str, manifest: dict[str, Any], base: Path, strip: str = "") -> Path:
        """Every file of ``manifest`` into ``base`` at its path (less ``strip``), each
        checked; a folder or file appears only once whole (written under a "." name, then
        renamed)."""
        rel = str(manifest["path"]).removeprefix(strip)
        final = _inside(base, rel)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            for name, entry in manifest["files"].items():
                dest = _inside(tmp, name.removeprefix(strip))
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    self.fs.get_file(self.path(run_id, name), str(dest))
                except FileNotFoundError:
                    raise Damaged(f"{name} is missing from {self.shown}") from None
                except Exception as exc:
                    raise StoreError(
                        f"downloading {name} from {self.shown} failed: {describe(exc, self.url)}"
                    ) from None
                sha, _, size = _digests(dest)
                if size != entry["size"] or sha != entry["sha256"]:
                    raise Damaged(
                        f"{name} from {self.shown} does not match its manifest "
                        f"({size} bytes, sha256 {sha[:12]}..., not {entry['size']} bytes, "
                        f"{str(entry['sha256'])[:12]}...): the copy in storage is damaged"
                    )
            if final.exists():
                shutil.rmtree(final) if final.is_dir() else final.unlink()
            os.replace(tmp / rel, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def fetch_outputs(self, run_id: str, pattern: str, dest: Path) -> list[Path]:
        """The output files of run ``run_id`` in storage that ``pattern`` names (as
        ``Run.download`` takes it: a path, a folder or a glob under outputs/) into ``dest``."""
        found = {
            str(m["path"]).removeprefix("outputs/"): m
            for m in self.manifests(run_id)
            if m.get("kind") == "output"
        }
        names = [name for name in sorted(found) if _names(pattern, name)]
        if not names:
            raise SpecError(
                f"{pattern!r} names no file of run {run_id}'s outputs/ in {self.shown}; "
                f"it has {', '.join(sorted(found)[:8]) or 'none'}"
            )
        return [self.download(run_id, found[n], dest, strip="outputs/") for n in names]


def _names(pattern: str, name: str) -> bool:
    """Whether ``pattern`` (as ``Run.download`` takes it: a path, a folder, or a glob where
    ``*`` stays within a folder and ``**`` spans folders) names the output file ``name``."""
    wanted = tuple(p for p in PurePosixPath(pattern).parts if p != ".")
    parts = PurePosixPath(name).parts
    return any(_match(wanted, parts[:n]) for n in range(1, len(parts) + 1))


def _match(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return (
        bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _match(pattern[1:], parts[1:])
    )


def _inside(base: Path, rel: str) -> Path:
    path = posixpath.normpath(rel)
    if path.startswith(("../", "/")) or path in (".", ".."):
        raise StoreError(f"storage names {rel!r}, outside the run's folder")
    return base / path


def _digests(path: Path) -> tuple[str, str, int]:
    sha, md5, size = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            sha.update(chunk)
            md5.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), md5.hexdigest(), size


def for_submit(url: str | None, home: Path) -> str | None:
    """Check ``url`` (probe it) at submit; keep its credentials aside; return the URL to
    record (redacted), or None without storage."""
    if url is None:
        return None
    Storage.open(url).probe()
    if secrets_in(url):
        credentials.remember(home, url)
    return redact(url)


def for_run(shown: str, home: Path, run_id: str) -> Storage:
    """The storage a run records (``shown``), with the credentials kept for it."""
    url = credentials.recall(
        home,
        "storage",
        shown,
        what="the storage URL",
        fix=f"submit run {run_id} again with --storage URL, the full URL",
    )
    return Storage.open(url)
