"""Write a run's immutable code snapshot and its content hash.

Layout of a snapshot folder (``runs/<id>/code/``)::

    <the --source folder, filtered>   secrets and junk left out, then .trainignore
    <script>.py                       script runs without --source: the script itself
    _jt/cell.py                       cell runs: the generated entry script
    _jt/cell_parts.json               cell runs: the notebook cell each part of it came from
    _jt/carried.pkl                   cell runs with carried objects: {name: pickle bytes}
    _jt/boot.py                       copy of jupyter_trainer/rankside/rank/boot.py
    _jt/jupyter_trainer/              a stand-in package: ``runtime.py`` (the public name)
                                      and ``rankside/``, the rank side's files that the
                                      runtime and boot.py use (``rankside.SNAPSHOT``,
                                      stdlib only, in their rooms: ``rank/``, ``observe/``,
                                      ...), so ``from jupyter_trainer import runtime``
                                      works on nodes without the package
    _jt/azureml_v1/azureml/           Azure ML SDK v1's script side (``Run.get_context()``),
                                      first on a rank's path (rankside/azureml_v1/)

Every file is made read-only. The hash covers every path and every byte, so two runs of
the same code share a hash and any change gives a new one.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
from collections.abc import Sequence
from pathlib import Path

import pathspec

from .. import rankside
from ..core.errors import CaptureError
from ..core.spec import CodeSpec
from ..core.units import format_bytes
from .cellscript import cell_parts, render_cell_script
from .context import CellContext

__all__ = [
    "CELL_ENTRY",
    "DEFAULT_MAX_SNAPSHOT_BYTES",
    "IGNORE_FILE",
    "JUNK_PATTERNS",
    "MAX_SNAPSHOT_ENV",
    "RESERVED_DIR",
    "SECRET_FILE_PATTERNS",
    "SECRET_PATTERNS",
    "hash_snapshot",
    "is_secret",
    "source_summary",
    "write_cell_snapshot",
    "write_script_snapshot",
]

RESERVED_DIR = "_jt"
IGNORE_FILE = ".trainignore"
CELL_ENTRY = f"{RESERVED_DIR}/cell.py"
CARRIED_FILE = f"{RESERVED_DIR}/carried.pkl"
PARTS_FILE = f"{RESERVED_DIR}/cell_parts.json"  # rankside/rank/cell_run.py: PARTS_FILE
# Left out by name, as secret scanners look for them. Matched against a file's own name
# only (a folder named tokens/ is walked), except Python modules (tokenizer.py is code the
# run imports) and tokenizer files.
SECRET_FILE_PATTERNS = ("*secret*", "*token*", "*creds*", "!*.py", "!*tokeniz*")
# Files and folders; these win over the exceptions above.
SECRET_PATTERNS = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_*",
    ".git/",
    "*credential*",
    ".netrc",
    ".pypirc",
    "*service-account*.json",
    "*service_account*.json",
    "kubeconfig",
    "*.kubeconfig",
    ".kube/",
    "**/.docker/config.json",
    ".npmrc",
    ".htpasswd",
    "*.p12",
    "*.pfx",
    "*.keystore",
    "*.jks",
)
JUNK_PATTERNS = ("__pycache__/", "*.py[co]", ".ipynb_checkpoints/")
DEFAULT_MAX_SNAPSHOT_BYTES = 200 * 1024 * 1024
MAX_SNAPSHOT_ENV = "JUPYTER_TRAINER_MAX_SNAPSHOT_BYTES"

_CHUNK = 1 << 20


def write_cell_snapshot(
    dest: Path,
    cell: str,
    context: CellContext,
    *,
    source_dir: Path | None = None,
    first_line: int = 1,
) -> CodeSpec:
    """Write the snapshot of a ``%%train`` cell into ``dest`` (which must not exist);
    ``first_line`` is the editor's number of the cell's first line (``render_cell_script``)."""
    files, excluded = _plan_source(source_dir) if source_dir is not None else ({}, [])
    generated = {
        CELL_ENTRY: render_cell_script(cell, context, first_line).encode("utf-8"),
        PARTS_FILE: cell_parts(cell, context, first_line),
    }
    if context.carried:
        generated[CARRIED_FILE] = pickle.dumps(
            dict(context.carried), protocol=pickle.DEFAULT_PROTOCOL
        )
    generated.update(runtime_files())
    count, size, digest = _write(Path(dest), files, generated, source_dir)
    return CodeSpec(
        entry=CELL_ENTRY,
        hash=digest,
        origin="cell",
        files=count,
        bytes=size,
        source_dir=_abs(source_dir),
        excluded=tuple(sorted(excluded)),
        source_files=len(files),
    )


def write_script_snapshot(
    dest: Path, script: Path, args: Sequence[str] = (), *, source_dir: Path | None = None
) -> CodeSpec:
    """Write the snapshot of an entry script run with ``%train script.py``.

    Without ``source_dir`` the script alone is copied to the snapshot root; with it, the
    script must live inside that folder and runs from its place there.
    """
    script = Path(script)
    if not script.is_file():
        raise CaptureError(f"entry script {str(script)!r} does not exist or is not a file")
    excluded: list[str]
    if source_dir is None:
        entry, files, excluded = script.name, {script.name: script}, []
        if entry == RESERVED_DIR:
            raise CaptureError(f"an entry script cannot be named {RESERVED_DIR!r}; rename it")
    else:
        root = Path(source_dir).resolve()
        try:
            entry = script.resolve().relative_to(root).as_posix()
        except ValueError:
            raise CaptureError(
                f"entry script {str(script)!r} is not inside the source folder {str(root)!r}; "
                "move it there or pass the folder that contains it as --source"
            ) from None
        files, excluded = _plan_source(source_dir)
        if entry not in files:
            raise CaptureError(
                f"entry script {entry!r} is left out of the snapshot by the default exclusions "
                f"or {IGNORE_FILE}; add a line '!{entry}' to {IGNORE_FILE}"
            )
    count, size, digest = _write(Path(dest), files, runtime_files(), source_dir)
    return CodeSpec(
        entry=entry,
        hash=digest,
        origin="script",
        args=tuple(args),
        files=count,
        bytes=size,
        source_dir=_abs(source_dir),
        excluded=tuple(sorted(excluded)),
        source_files=len(files) if source_dir is not None else 0,
    )


def hash_snapshot(root: Path) -> str:
    """The content hash of an existing snapshot folder, as ``write_*_snapshot`` reports it."""
    root = Path(root)
    digests = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            digests[path.relative_to(root).as_posix()] = _file_digest(path)
    return _combine(digests)


def source_summary(code: CodeSpec, most: int = 8) -> str | None:
    """One line on what ``--source`` took and what it left out as secrets by name, with how
    to send one anyway; None for a run without ``--source``."""
    if code.source_dir is None:
        return None
    secrets = [rel for rel in code.excluded if is_secret(rel.rstrip("/"), rel.endswith("/"))]
    links = [rel for rel in code.excluded if rel not in secrets]
    took = f"{code.source_files} file{'s' if code.source_files != 1 else ''}"
    line = f"--source {code.source_dir}: took {took}"
    if secrets:
        shown = ", ".join(secrets[:most]) + (
            f" and {len(secrets) - most} more (spec.json lists them all)"
            if len(secrets) > most
            else ""
        )
        ignore = str(Path(code.source_dir) / IGNORE_FILE)
        line += (
            f"; left out as secrets by name: {shown} (to send one, add a line "
            f"'!{secrets[0]}' to {ignore})"
        )
    else:
        line += "; no secrets by name left out"
    if links:
        line += f"; links not followed: {', '.join(links[:most])}"
    return line


# -- planning: which files of the source folder go in -----------------------------------

_BY_NAME = pathspec.GitIgnoreSpec.from_lines(SECRET_FILE_PATTERNS)
_SECRET = pathspec.GitIgnoreSpec.from_lines(SECRET_PATTERNS)


def _decide(later: pathspec.PathSpec | None, rel: str, is_dir: bool) -> bool:
    """Whether ``rel`` is left out: the last matching rule decides, ``later`` (junk and
    ``.trainignore``) over ``SECRET_PATTERNS`` over ``SECRET_FILE_PATTERNS``. Secrets are
    matched whatever the case of the name (``AWS_Credentials.json``, ``MY_SECRET.txt``)."""
    path = rel + "/" if is_dir else rel
    for spec, name in ((later, path), (_SECRET, path.lower())):
        found = spec.check_file(name).include if spec is not None else None
        if found is not None:
            return found
    return not is_dir and bool(_BY_NAME.check_file(rel.rsplit("/", 1)[-1].lower()).include)


def is_secret(rel: str, is_dir: bool = False) -> bool:
    """Whether the default exclusions leave ``rel`` out as a secret (``.trainignore`` aside)."""
    return _decide(None, rel, is_dir)


class _Rules:
    """Default exclusions, then the folder's own .trainignore (so ``!.env`` re-includes).

    The patterns apply in this order, the last one that matches deciding:
    ``SECRET_FILE_PATTERNS`` (a file's own name only), ``SECRET_PATTERNS``,
    ``JUNK_PATTERNS``, then the lines of ``.trainignore``."""

    def __init__(self, root: Path) -> None:
        ignore = root / IGNORE_FILE
        user: list[str] = []
        if ignore.is_file():
            try:
                user = ignore.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise CaptureError(f"cannot read {str(ignore)!r}: {exc}") from exc
        try:
            self.later = pathspec.GitIgnoreSpec.from_lines([*JUNK_PATTERNS, *user])
        except Exception as exc:  # pathspec raises plain errors for bad patterns
            raise CaptureError(f"invalid pattern in {str(ignore)!r}: {exc}") from exc

    def excluded(self, rel: str, is_dir: bool) -> bool:
        return _decide(self.later, rel, is_dir)

    def left_out(self, rel: str) -> bool:
        """Whether the file at ``rel`` or any folder above it is excluded."""
        parts = rel.split("/")
        return self.excluded(rel, False) or any(
            self.excluded("/".join(parts[:i]), True) for i in range(1, len(parts))
        )


def _plan_source(source_dir: Path) -> tuple[dict[str, Path], list[str]]:
    """Map each snapshot path to the file to copy, and list what was left out on purpose."""
    root = Path(source_dir)
    if not root.is_dir():
        what = "does not exist" if not root.exists() else "is not a folder"
        raise CaptureError(
            f"source folder {str(root)!r} {what}; pass an existing folder as --source"
        )
    real_root = root.resolve()
    rules = _Rules(root)
    reserved = root / RESERVED_DIR
    if os.path.lexists(reserved) and not rules.excluded(RESERVED_DIR, reserved.is_dir()):
        raise CaptureError(
            f"source folder {str(root)!r} has a {RESERVED_DIR!r} entry at its root; that name "
            f"is reserved for jupyter_trainer's own files: rename it, or add '{RESERVED_DIR}' "
            f"to {IGNORE_FILE}"
        )
    files: dict[str, Path] = {}
    excluded: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        kept = []
        for name in sorted(dirnames):
            rel, path = prefix + name, Path(dirpath, name)
            if rules.excluded(rel, True):
                if is_secret(rel, True):
                    excluded.append(rel + "/")
            elif path.is_symlink():
                excluded.append(rel)  # linked folders are never followed
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            rel, path = prefix + name, Path(dirpath, name)
            if rules.excluded(rel, False):
                if is_secret(rel, False):
                    excluded.append(rel)
            elif path.is_symlink():
                target = path.resolve()
                if (
                    target.is_file()
                    and target.is_relative_to(real_root)
                    and not rules.left_out(target.relative_to(real_root).as_posix())
                ):
                    files[rel] = target
                else:
                    excluded.append(rel)  # points outside, at an excluded file, or nowhere
            elif path.is_file():
                files[rel] = path
    return files, excluded


# -- writing ------------------------------------------------------------------------------


def _write(
    dest: Path, files: dict[str, Path], generated: dict[str, bytes], source_dir: Path | None
) -> tuple[int, int, str]:
    _check_size(files, generated, source_dir)
    if os.path.lexists(dest):
        raise CaptureError(
            f"snapshot folder {str(dest)!r} already exists; snapshots are never overwritten"
        )
    try:
        dest.mkdir(parents=True)
    except OSError as exc:
        raise CaptureError(f"cannot create snapshot folder {str(dest)!r}: {exc}") from exc
    digests: dict[str, str] = {}
    total = 0
    try:
        for rel, src in files.items():
            digests[rel], size = _copy(src, dest / rel)
            total += size
        for rel, data in generated.items():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            digests[rel] = hashlib.sha256(data).hexdigest()
            total += len(data)
        for rel in digests:
            os.chmod(dest / rel, 0o444)
    except BaseException as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(exc, OSError):
            raise CaptureError(f"cannot write the snapshot into {str(dest)!r}: {exc}") from exc
        raise
    return len(digests), total, _combine(digests)


def _copy(src: Path, target: Path) -> tuple[str, int]:
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    with open(src, "rb") as fin, open(target, "xb") as fout:
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
            fout.write(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _check_size(
    files: dict[str, Path], generated: dict[str, bytes], source_dir: Path | None
) -> None:
    limit = _snapshot_limit()
    sizes = {rel: _size(path) for rel, path in files.items()}
    total = sum(sizes.values()) + sum(len(d) for d in generated.values())
    if total <= limit:
        return
    biggest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
    listed = ", ".join(f"{rel} ({format_bytes(n)})" for rel, n in biggest)
    where = f"{str(Path(source_dir) / IGNORE_FILE)!r}" if source_dir is not None else IGNORE_FILE
    raise CaptureError(
        f"the code snapshot would be {format_bytes(total)}, over the {format_bytes(limit)} limit "
        f"(${MAX_SNAPSHOT_ENV}); the largest files: {listed}. List data, checkpoints and other "
        f"large files in {where} and read them by path from the training code"
    )


def _snapshot_limit() -> int:
    raw = os.environ.get(MAX_SNAPSHOT_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_SNAPSHOT_BYTES
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if limit <= 0:
        raise CaptureError(f"{MAX_SNAPSHOT_ENV}={raw!r} is not a positive whole number of bytes")
    return limit


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise CaptureError(f"cannot read {str(path)!r}: {exc}") from exc


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fin:
        while chunk := fin.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _combine(digests: dict[str, str]) -> str:
    """sha256 over the sorted (relative posix path, sha256 of content) pairs."""
    total = hashlib.sha256()
    for rel in sorted(digests):
        total.update(f"{rel}\0{digests[rel]}\n".encode("utf-8", "surrogateescape"))
    return "sha256:" + total.hexdigest()


def runtime_files() -> dict[str, bytes]:
    """What a rank needs of jupyter_trainer, for a node without it: the boot script as
    ``_jt/boot.py`` and the rank side under a stand-in package ``_jt/jupyter_trainer/``."""
    shim = f"{RESERVED_DIR}/jupyter_trainer"
    out = {
        f"{RESERVED_DIR}/boot.py": rankside.source(rankside.BOOT),
        f"{shim}/__init__.py": rankside.SHIM_INIT.encode(),
        f"{shim}/runtime.py": rankside.SHIM_RUNTIME.encode(),
    }
    for name in rankside.SNAPSHOT:
        out[f"{shim}/rankside/{name}"] = rankside.source(name)
    for name in rankside.AZUREML_V1:
        out[f"{RESERVED_DIR}/{name}"] = rankside.source(name)
    return out


def _abs(source_dir: Path | None) -> str | None:
    return None if source_dir is None else str(Path(source_dir).resolve())
