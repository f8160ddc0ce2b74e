"""The records of the model registry's folders, read as untrusted input.

A version's ``lineage.json`` and a model's ``.deleted.json`` are files anyone who can write
the registry (another user of a shared store, a registry copied from elsewhere) can forge.
Nothing is built from them before they are checked: every path a lineage names must be a
plain relative path inside its version (no ``..``, no absolute path, no empty part), and
the record is read without following links. A record that fails is "damaged": a
``StoreError`` that names the version and what is wrong, and says how to clear it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..core.errors import StoreError
from ..core.trust import user_name
from .confined import Refused, open_beneath, open_folder, safe_parts
from .owners import Identity, verified_owner

LINEAGE = "lineage.json"
DELETED = ".deleted.json"  # models/<name>/.deleted.json: numbers never to be given again
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MAX_RECORD = 64 << 20


class Damaged(StoreError):
    """A version's record cannot be trusted; ``problem`` says why."""

    def __init__(self, name: str, version: int, where: Path, problem: str) -> None:
        super().__init__(
            f"the record of model {name}@{version} ({where}) is damaged: "
            f"{problem}; nothing was read from it (`jupyter-trainer doctor` lists "
            f"damaged versions; `jupyter-trainer models delete {name}@{version} "
            "--yes` removes it)"
        )
        self.problem = problem


def read_record(models_dir: Path, parts: tuple[str, ...]) -> Any:
    """The JSON of ``models_dir/<parts>``, no link followed below ``models_dir``: raises
    ``Refused`` for a link, ``OSError`` or ``ValueError`` for the rest."""
    return _read_record(models_dir, parts)[0]


def _read_record(models_dir: Path, parts: tuple[str, ...]) -> tuple[Any, int]:
    """``read_record``'s JSON, and who owns the file read (its ``fstat``)."""
    root = open_folder(models_dir)
    try:
        fd = open_beneath(root, parts)
    finally:
        os.close(root)
    with os.fdopen(fd, "rb") as fh:
        owner = os.fstat(fh.fileno()).st_uid
        data = fh.read(_MAX_RECORD + 1)
    if len(data) > _MAX_RECORD:
        raise ValueError(f"it is larger than {_MAX_RECORD >> 20} MiB")
    return json.loads(data), owner


def read_lineage(models_dir: Path, name: str, version: int) -> dict[str, Any]:
    """Version ``version`` of ``name``'s lineage, checked (``check_lineage``); a damaged
    one raises ``StoreError``. Who registered it is the owner of its folder, by the
    kernel (``owner`` and ``user`` in the record are set from it): a version whose record
    or whose record's claim names someone else is damaged, since whoever owns ``models/``
    or the model's folder could have put it in place of the version that was registered."""
    where = models_dir / name / str(version) / LINEAGE
    try:
        record, wrote = _read_record(models_dir, (name, str(version), LINEAGE))
        folder_uid = os.lstat(models_dir / name / str(version)).st_uid
    except Refused as exc:
        raise Damaged(name, version, where, f"{exc.filename} {exc.strerror}") from None
    except FileNotFoundError:
        raise Damaged(name, version, where, f"{LINEAGE} is missing") from None
    except OSError as exc:
        raise Damaged(name, version, where, f"it cannot be read ({exc.strerror or exc})") from None
    except (ValueError, RecursionError) as exc:
        raise Damaged(name, version, where, f"it is not JSON ({exc})") from None
    problem = lineage_problem(record, name, version)
    if problem or not isinstance(record, dict):
        raise Damaged(name, version, where, problem or "it is not a JSON object")
    problem = owner_problem(record, folder_uid, wrote)
    if problem:
        raise Damaged(name, version, where, problem)
    owner = verified_owner(record.get("owner"), models_dir / name / str(version))
    if owner is not None:
        record.update(owner=owner, user=owner["user"])
    return record


def owner_problem(record: dict[str, Any], folder_uid: int, wrote: int) -> str | None:
    """Why a version whose folder ``folder_uid`` owns, whose ``lineage.json`` ``wrote``
    owns, cannot be the version its ``record`` says was registered; None if it can."""
    if wrote != folder_uid:
        return (
            f"it belongs to {user_name(wrote)}, but the version's folder belongs to "
            f"{user_name(folder_uid)}: only who registered a version writes its record"
        )
    claimed = Identity.of(record.get("owner"))
    if claimed is not None and claimed.uid != folder_uid:
        return (
            f"it says it was registered by {claimed.user}, but its folder belongs to "
            f"{user_name(folder_uid)}: it may have been put in place of the version "
            f"{claimed.user} registered"
        )
    return None


def lineage_problem(record: Any, name: str, version: int) -> str | None:
    """What makes ``record`` unfit to be version ``version`` of ``name``'s lineage, or None."""
    if not isinstance(record, dict):
        return "it is not a JSON object"
    if record.get("name") != name or record.get("version") != version:
        return (
            f"it names {record.get('name')!r} version {record.get('version')!r}, not the "
            "folder it is in"
        )
    for key, kind in (("run_id", str), ("created", (int, float))):
        if not isinstance(record.get(key), kind) or isinstance(record.get(key), bool):
            return f"its {key} is {record.get(key)!r}"
    if not isinstance(record.get("tags", {}) or {}, dict):
        return f"its tags are {record.get('tags')!r}, not a mapping"
    top = record.get("path")
    top_parts = safe_parts(top)
    if not isinstance(top, str) or top_parts is None or len(top_parts) != 1 or top == LINEAGE:
        return (
            f"its path {top!r} is not the name of a file or folder in the version (a "
            "plain name, no '/' or '..')"
        )
    files = record.get("files")
    if not isinstance(files, list):
        return "its files are not a list"
    seen: set[str] = set()
    for entry in files:
        problem = _file_problem(entry, top, seen)
        if problem:
            return problem
    return None


def _file_problem(entry: Any, top: str, seen: set[str]) -> str | None:
    if not isinstance(entry, dict):
        return f"a file's record {entry!r} is not a JSON object"
    path = entry.get("path")
    parts = safe_parts(path)
    if not isinstance(path, str) or parts is None or parts[0] != top:
        return (
            f"file path {path!r} is not a plain relative path inside {top!r} (no '..', "
            "no absolute path, no empty part)"
        )
    if path in seen:
        return f"file path {path!r} is listed twice"
    seen.add(path)
    size = entry.get("size")
    if type(size) is not int or size < 0:
        return f"file {path!r} has size {size!r}"
    if not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]):
        return f"file {path!r} has sha256 {entry.get('sha256')!r}"
    return None


def read_deleted(models_dir: Path, name: str) -> dict[str, dict[str, Any]]:
    """The deleted versions of ``name`` (``{"2": {"deleted": t, "user": u}}``); a record
    that cannot be trusted raises ``StoreError``: numbering versions without it could give
    a deleted version's number to a new one."""
    where = models_dir / name / DELETED
    try:
        record = read_record(models_dir, (name, DELETED))
    except FileNotFoundError:
        return {}
    except NotADirectoryError:
        return {}
    except Refused as exc:
        problem = f"{exc.filename} {exc.strerror}"
    except OSError as exc:
        problem = f"it cannot be read ({exc.strerror or exc})"
    except (ValueError, RecursionError) as exc:
        problem = f"it is not JSON ({exc})"
    else:
        if isinstance(record, dict) and all(
            isinstance(k, str) and k.isdigit() and isinstance(v, dict) for k, v in record.items()
        ):
            return record
        problem = "it is not a mapping of version numbers"
    raise StoreError(
        f"the record of model {name}'s deleted versions ({where}) is damaged: "
        f"{problem}; fix or remove it: it keeps their numbers from being given "
        "to new versions"
    )
