"""A run's ``outputs/``: its files, paths and glob patterns that stay inside it, and copies
out of it (hashed with sha256 while they are made, for the model registry).

Every path a user gives is relative to ``outputs/``. A path or pattern that is absolute or
has a ``..`` part is refused; a symbolic link is followed only where it points inside
``outputs/`` (a link out of it is neither listed, nor copied, nor registered). What a scan
found is opened again without following any link (``confined``): a file swapped for a link
after the scan is refused, not copied. Copies into a user's folder never follow a link
already inside it.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import queue
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..core.errors import SpecError, StoreError
from ..core.printable import printable
from .confined import (
    Refused,
    make_folders_beneath,
    open_beneath,
    open_folder,
    real_parts,
    write_beneath,
)

# Files at least this large are copied by the kernel (copy_file_range) while the copy
# already written is hashed in this thread; smaller ones are read once, hashed, written.
_PIPELINE_BYTES = 32 << 20
_COPY_CHUNK = 16 << 20
_READ_CHUNK = 4 << 20
_GLOB = set("*?[")


@dataclass(frozen=True)
class RunFile:
    """One file of a run's outputs: its path relative to ``outputs/`` and its size."""

    path: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _relative(text: object, what: str) -> PurePosixPath:
    if not isinstance(text, str) or not text.strip() or "\x00" in text:
        raise SpecError(
            f"{what} must be a non-empty path relative to the run's outputs/, not {text!r}"
        )
    rel = PurePosixPath(text)
    if rel.is_absolute() or ".." in rel.parts:
        raise SpecError(
            f"{what} {text!r} leaves the run's outputs/: give a path relative to "
            "outputs/ without '..' (see the run's files with `jupyter-trainer files "
            "RUN`)"
        )
    return rel


def _within(root: Path, path: Path) -> bool:
    """True when ``path``, links resolved, is ``root`` or inside it."""
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
    except ValueError:
        return False
    return True


def inside(root: Path, text: str, what: str = "the path") -> Path:
    """The file or folder ``text`` names inside ``root`` (a run's ``outputs/``), which must
    exist and, links resolved, stay inside ``root``; else ``SpecError``."""
    rel = _relative(text, what)
    path = root.joinpath(*rel.parts)
    if not os.path.lexists(path):
        raise SpecError(
            f"{what} {text!r} is not in the run's outputs/ ({root}); {_what_exists(root)}"
        )
    if not _within(root, path):
        raise SpecError(
            f"{what} {text!r} is a link that leaves the run's outputs/ "
            f"({os.path.realpath(path)}); register files of the run itself"
        )
    if not (path.is_file() or path.is_dir()):
        raise SpecError(f"{what} {text!r} is neither a file nor a folder")
    return path


def walk_files(folder: Path, root: Path, *, strict: bool = False) -> Iterator[tuple[str, Path]]:
    """(path relative to ``folder``, path) of each file under ``folder``, sorted; links to
    files are followed when they stay inside ``root``, links to folders are not. Other
    links are left out, or with ``strict`` refused (``SpecError``)."""

    def walk(here: Path, prefix: str) -> Iterator[tuple[str, Path]]:
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise SpecError(
                f"cannot read the folder {here} of the run's outputs/ "
                f"({exc.strerror}); make it readable"
            ) from None
        for entry in entries:
            path, rel = Path(entry.path), prefix + entry.name
            if entry.is_symlink():
                if _within(root, path) and path.is_file():
                    yield rel, path
                elif strict:
                    raise SpecError(
                        f"{rel} in {folder.name}/ is a link to "
                        f"{os.path.realpath(path)}: only files inside the run's "
                        "outputs/ are copied; replace the link with the file"
                    )
            elif entry.is_dir():
                yield from walk(path, rel + "/")
            elif entry.is_file():
                yield rel, path

    yield from walk(folder, "")


def list_files(root: Path) -> list[RunFile]:
    """Every file of a run's ``outputs/`` (``root``), sorted by path; one removed while
    they are listed is left out."""
    found = []
    for rel, path in walk_files(root, root):
        try:
            found.append(RunFile(rel, path.stat().st_size))
        except (FileNotFoundError, NotADirectoryError):
            continue
    return found


def _what_exists(root: Path, limit: int = 8) -> str:
    names = [printable(f.path) for f in list_files(root)]
    if not names:
        return "the run's outputs/ is empty"
    shown = ", ".join(names[:limit]) + (
        f" and {len(names) - limit} more" if len(names) > limit else ""
    )
    return f"it has {shown}"


def _segments_match(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_segments_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return (
        bool(parts)
        and fnmatch.fnmatchcase(parts[0], pattern[0])
        and _segments_match(pattern[1:], parts[1:])
    )


def match(root: Path, pattern: str) -> list[RunFile]:
    """The files of ``root`` that ``pattern`` names: a path, or a glob where ``*``, ``?`` and
    ``[...]`` stay within one folder and ``**`` spans any number of them. A pattern that
    names a folder takes every file under it. Nothing matched is a ``SpecError``."""
    rel = _relative(pattern, "the pattern")
    wanted = tuple(p for p in rel.parts if p != ".")
    found = []
    for entry in list_files(root):
        parts = PurePosixPath(entry.path).parts
        if any(_segments_match(wanted, parts[:n]) for n in range(1, len(parts) + 1)):
            found.append(entry)
    if not found:
        kind = "matches" if _GLOB & set(pattern) else "names"
        raise SpecError(f"{pattern!r} {kind} no file in the run's outputs/; {_what_exists(root)}")
    return found


def destination(dest: str | os.PathLike[str]) -> Path:
    """The folder ``dest`` names; an empty one is refused rather than taken for the
    current folder."""
    if isinstance(dest, (str, bytes)) and not os.fsdecode(dest).strip():
        raise SpecError("DEST is empty: give the folder to copy into ('.' for the current folder)")
    return Path(os.fsdecode(os.fspath(dest))).expanduser()


@dataclass(frozen=True)
class Copy:
    """One file to copy: its parts below the source folder and below DEST, how messages
    name it, and the sha256 its copy must have (None: any)."""

    source: tuple[str, ...]
    target: tuple[str, ...]
    label: str
    sha256: str | None = None


def copy_beneath(source: Path, copies: list[Copy], dest: Path, *, damaged: str = "") -> list[Path]:
    """Copy each of ``copies`` from below the folder ``source`` to below the folder ``dest``
    (made if missing): no link below either is followed, so nothing is read from outside
    ``source`` or written outside ``dest``. Each file is written under a temporary name and
    renamed over the old one once complete (and, with a ``sha256``, once it matches: a
    mismatch raises ``StoreError`` ending with ``damaged`` and leaves the old file). Returns
    the paths written."""
    try:
        src_fd = open_folder(source)
    except OSError as exc:
        raise StoreError(f"cannot read {source}: {exc.strerror or exc}") from None
    try:
        try:
            dest.mkdir(parents=True, exist_ok=True)
            dest_fd = open_folder(dest)
        except OSError as exc:
            raise StoreError(f"cannot make the folder {dest}: {exc.strerror or exc}") from None
        try:
            return [_copy_one(src_fd, source, item, dest_fd, dest, damaged) for item in copies]
        finally:
            os.close(dest_fd)
    finally:
        os.close(src_fd)


def _copy_one(
    src_fd: int, source: Path, item: Copy, dest_fd: int, dest: Path, damaged: str
) -> Path:
    target = dest.joinpath(*item.target)
    try:
        fin = open_beneath(src_fd, item.source)
    except Refused as exc:
        raise StoreError(
            f"{item.label} in {source}: {exc.filename} {exc.strerror}; "
            f"{damaged or 'nothing was copied from it'}"
        ) from None
    except OSError as exc:
        raise StoreError(f"cannot read {item.label} in {source}: {exc.strerror or exc}") from None
    try:

        def check(digest: str) -> None:
            if item.sha256 is not None and digest != item.sha256:
                raise StoreError(
                    f"{item.label} does not match its recorded sha256 ({digest} "
                    f"!= {item.sha256}){': ' + damaged if damaged else ''}"
                )

        try:
            dir_fd = make_folders_beneath(dest_fd, item.target[:-1])
        except Refused as exc:
            raise StoreError(
                f"cannot write {'/'.join(item.target)} into {dest}: {exc.filename} "
                f"{exc.strerror}; remove it or choose another folder"
            ) from None
        try:
            write_beneath(
                dir_fd,
                item.target[-1],
                lambda fout: copy_descriptor(fin, fout, f"{source}/{item.label}"),
                check,
            )
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise StoreError(f"cannot copy {item.label} to {target}: {exc.strerror or exc}") from None
    finally:
        os.close(fin)
    return target


def copy_out(root: Path, files: list[RunFile], dest: Path) -> list[Path]:
    """Copy ``files`` of ``root`` into the folder ``dest`` (made if missing), each at its
    path relative to ``root``; an existing file is replaced whole. A link inside ``root``
    is copied as the file it points to there. Returns the paths written."""
    copies = []
    for entry in files:
        rel = PurePosixPath(entry.path).parts
        found = real_parts(root, root.joinpath(*rel))
        if not found:
            raise StoreError(
                f"{entry.path} left the run's outputs/ since it was listed; "
                "nothing was copied from it"
            )
        copies.append(Copy(found, rel, entry.path))
    return copy_beneath(root, copies, dest)


def copy_hashed(src: Path, dst: Path, *, exclusive: bool = True) -> str:
    """Copy the file ``src`` to ``dst`` (a new file unless ``exclusive`` is false) and return
    the sha256 of what was written, read back from ``dst`` (see ``copy_descriptor``)."""
    flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fin = os.open(src, os.O_RDONLY)
    try:
        fout = os.open(dst, flags, 0o644)
        try:
            return copy_descriptor(fin, fout, str(src))
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def copy_descriptor(fin: int, fout: int, label: str) -> str:
    """Copy the open file ``fin`` into ``fout`` (open for reading and writing, empty) and
    return the sha256 of what was written, read back from ``fout``.

    A large file is copied in the kernel (``copy_file_range``, else ``sendfile``) by a
    second thread, while this one hashes the part of ``fout`` already written: the two
    overlap, so the copy costs about the longer of the two, not their sum. A source that
    changes while it is copied is refused (``StoreError``): its copy could be torn.
    """
    before = os.fstat(fin)
    if before.st_size < _PIPELINE_BYTES:
        digest = _copy_small(fin, fout)
    else:
        digest = _copy_pipelined(fin, fout, label, before.st_size)
    after = os.fstat(fin)
    if (before.st_size, before.st_mtime_ns, before.st_ctime_ns) != (
        after.st_size,
        after.st_mtime_ns,
        after.st_ctime_ns,
    ):
        raise StoreError(
            f"{label} changed while it was being copied; copy it again once the "
            "run has finished writing it"
        )
    return digest


def _copy_small(fin: int, fout: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fin, _COPY_CHUNK):
        digest.update(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(fout, view) :]
    return digest.hexdigest()


def _copy_pipelined(fin: int, fout: int, label: str, size: int) -> str:
    done: queue.Queue[int | None] = queue.Queue()  # copied length after each chunk, then None
    failed: list[BaseException] = []
    stop = threading.Event()

    def copy() -> None:
        try:
            for copied in _kernel_copy(fin, fout, size):
                done.put(copied)
                if stop.is_set():
                    return
        except BaseException as exc:
            failed.append(exc)
        finally:
            done.put(None)

    worker = threading.Thread(target=copy, name="jt-copy", daemon=True)
    worker.start()
    digest, hashed = hashlib.sha256(), 0
    view = memoryview(bytearray(_READ_CHUNK))
    try:
        while (copied := done.get()) is not None:
            while hashed < copied:
                n = os.preadv(fout, [view[: min(_READ_CHUNK, copied - hashed)]], hashed)
                if n <= 0:
                    raise StoreError(f"the copy of {label} is shorter than what was copied into it")
                digest.update(view[:n])
                hashed += n
    finally:
        stop.set()
        worker.join()  # before the caller closes the descriptors it copies between
    if failed:
        raise failed[0]
    return digest.hexdigest()


def _kernel_copy(fin: int, fout: int, size: int) -> Iterator[int]:
    """Copy ``size`` bytes from ``fin`` to ``fout`` at their positions, a chunk at a time,
    yielding the total copied after each; ``copy_file_range`` where the kernel and the
    filesystems allow it, else ``sendfile``, else read and write."""
    copied = 0
    for step in (_by_copy_file_range, _by_sendfile, _by_read_write):
        try:
            while copied < size:
                n = step(fin, fout, min(_COPY_CHUNK, size - copied))
                if n == 0:
                    raise StoreError("the file got shorter while it was being copied")
                copied += n
                yield copied
            return
        except OSError as exc:
            if copied or exc.errno not in (
                errno.EXDEV,
                errno.ENOSYS,
                errno.EINVAL,
                errno.EOPNOTSUPP,
                errno.ENOTSUP,
                errno.EBADF,
            ):
                raise
    raise StoreError("no way to copy the file was left")


def _by_copy_file_range(fin: int, fout: int, n: int) -> int:
    return os.copy_file_range(fin, fout, n)


def _by_sendfile(fin: int, fout: int, n: int) -> int:
    return os.sendfile(fout, fin, None, n)


def _by_read_write(fin: int, fout: int, n: int) -> int:
    chunk = os.read(fin, n)
    view = memoryview(chunk)
    while view:
        view = view[os.write(fout, view) :]
    return len(chunk)
