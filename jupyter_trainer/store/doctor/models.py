"""``jupyter-trainer doctor``'s checks of the model registry (``models.db``, ``models/``).

The version folders are the truth. One finding per problem, about ``model NAME@V``:

- ``models.db`` is missing while versions exist, not a file, or corrupt (fix: move it
  aside, rebuild it from the version folders);
- a version folder has no index row, a row has no folder, or a row disagrees with the
  version's ``lineage.json`` (fix: index it, drop the row, rewrite the row);
- a version's ``lineage.json`` is damaged: it does not parse, or names paths outside the
  version (reported: delete the version, or register it again from its run);
- a version's files do not match their recorded size and sha256, are missing, or are links
  (reported: the registry's copy is damaged); only when hashing;
- a version folder that is a link (fix: remove the link, and its row);
- a registration or deletion cut short: a ``.register-*`` or ``.delete-*`` folder that
  nothing has touched for ``STALE_S`` (fix: remove it);
- a model's record of deleted versions is damaged (reported: new versions are refused
  until it is fixed, so a deleted number is never given again).

A version whose folder's owner is not who its ``lineage.json`` says registered it is
damaged (``model_records.read_lineage``): it is reported, and nothing is indexed from it.
(Who owns ``models/`` itself is the workspace check's, ``doctor.workspace``.)
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

from ...core.errors import StoreError
from ..confined import Refused, open_beneath, open_folder
from ..folders import rmtree
from ..model_records import Damaged, read_deleted, read_lineage
from ..models import COLUMNS, ModelStore, index_row, versions_in
from .report import STALE_S, Finding, Report, add, check_index, last_change

_CHUNK = 4 << 20


def check_models(home: Path, report: Report, *, hashes: bool) -> None:
    registry = ModelStore(home)
    names = registry.names()
    versions = [(name, v) for name in names for v in versions_in(registry.dir / name)]
    report.models = len(versions)
    rows = None
    if check_index(registry.index, len(versions), "model-index", report) and (
        registry.index.exists()
    ):
        rows = {(r["name"], r["version"]): r for r in registry.index.rows()}
    for name, version in versions:
        _check_version(registry, name, version, rows, report, hashes=hashes)
    for name, version in sorted(set(rows or {}) - set(versions)):
        folder = registry.dir / name / str(version)
        add(
            report,
            Finding(
                "model-orphan-row",
                "in the model index, but its folder is gone",
                fix="drop the row",
                subject=f"model {name}@{version}",
            ),
            partial(_drop_row, registry, name, version, folder),
            "row dropped",
        )
    _check_leftovers(registry, report)


def _check_version(
    registry: ModelStore,
    name: str,
    version: int,
    rows: dict[tuple[str, int], dict[str, Any]] | None,
    report: Report,
    *,
    hashes: bool,
) -> None:
    subject = f"model {name}@{version}"
    folder = registry.dir / name / str(version)
    if folder.is_symlink():
        add(
            report,
            Finding(
                "model-link",
                f"its folder is a link to {os.readlink(folder)}, not a folder of the registry",
                fix="remove the link and its index row",
                subject=subject,
            ),
            partial(_unlink_and_drop, registry, name, version, folder),
            "link and row removed",
        )
        return
    try:
        lineage = read_lineage(registry.dir, name, version)
    except Damaged as exc:
        report.findings.append(
            Finding(
                "model-lineage",
                f"its lineage.json is damaged: {exc.problem}; delete the version "
                f"(`jupyter-trainer models delete {name}@{version} --yes`) or register it again "
                "from its run",
                subject=subject,
            )
        )
        return
    if rows is not None:
        _check_row(registry, lineage, rows.get((name, version)), report, subject)
    if hashes:
        problems = _file_problems(registry.dir, lineage)
        if problems:
            report.findings.append(
                Finding(
                    "model-files",
                    f"the registry's copy is damaged: {'; '.join(problems)}; "
                    f"register it again from run {lineage['run_id']}",
                    subject=subject,
                )
            )


def _check_row(
    registry: ModelStore,
    lineage: dict[str, Any],
    row: dict[str, Any] | None,
    report: Report,
    subject: str,
) -> None:
    expected = index_row(lineage)
    rewrite = lambda: registry.index.upsert(expected)
    if row is None:
        add(
            report,
            Finding(
                "model-unindexed",
                "its folder has no index row",
                fix="index it from its lineage.json",
                subject=subject,
            ),
            rewrite,
            "indexed",
        )
        return
    found = {**row, "tags": json.dumps(row["tags"], sort_keys=True)}
    differ = [c for c in COLUMNS if found.get(c) != expected[c]]
    if differ:
        said = ", ".join(f"{c} {found.get(c)!r} (lineage.json: {expected[c]!r})" for c in differ)
        add(
            report,
            Finding(
                "model-disagrees",
                f"the model index disagrees with its lineage.json: {said}",
                fix="rewrite the row from its lineage.json",
                subject=subject,
            ),
            rewrite,
            "row rewritten from its lineage.json",
        )


def _file_problems(models_dir: Path, lineage: dict[str, Any]) -> list[str]:
    """What is wrong with the version's files (each read without following a link)."""
    prefix = (lineage["name"], str(lineage["version"]))
    problems = []
    root = open_folder(models_dir)
    try:
        for entry in lineage["files"]:
            try:
                fd = open_beneath(root, (*prefix, *entry["path"].split("/")))
            except Refused as exc:
                problems.append(f"{entry['path']}: {exc.filename} {exc.strerror}")
                continue
            except FileNotFoundError:
                problems.append(f"{entry['path']} is missing")
                continue
            except OSError as exc:
                problems.append(f"{entry['path']} cannot be read ({exc.strerror})")
                continue
            with os.fdopen(fd, "rb") as fh:
                digest, size = hashlib.sha256(), 0
                while chunk := fh.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
            if (size, digest.hexdigest()) != (entry["size"], entry["sha256"]):
                problems.append(f"{entry['path']} does not match its recorded size and sha256")
    finally:
        os.close(root)
    return problems


def _unlink_and_drop(registry: ModelStore, name: str, version: int, folder: Path) -> None:
    """Remove a version folder that is a link, then its index row."""
    folder.unlink()
    _drop_row(registry, name, version, folder)


def _drop_row(registry: ModelStore, name: str, version: int, folder: Path) -> None:
    if not os.path.lexists(folder / "lineage.json"):  # not registered again meanwhile
        registry.index.run(
            lambda conn: conn.execute(
                "DELETE FROM models WHERE name = ? AND version = ?", (name, version)
            )
        )


def _check_leftovers(registry: ModelStore, report: Report) -> None:
    try:
        models = sorted(os.scandir(registry.dir), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return
    now = time.time()
    for entry in models:
        if entry.name.startswith(".delete-"):
            _leftover(Path(entry.path), "a deletion", now, report)
        elif not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
            for inner in sorted(os.scandir(entry.path), key=lambda e: e.name):
                if inner.name.startswith((".delete-", ".register-")):
                    what = "a deletion" if inner.name.startswith(".delete-") else "a registration"
                    _leftover(Path(inner.path), what, now, report)
            _check_deleted(registry, entry.name, report)


def _leftover(path: Path, what: str, now: float, report: Report) -> None:
    if now - last_change(path) < STALE_S:
        return  # still going
    add(
        report,
        Finding(
            "model-partial",
            f"{what} was cut short and left {path}",
            fix="remove it",
            subject="model registry",
        ),
        lambda: rmtree(path),
        "removed",
    )


def _check_deleted(registry: ModelStore, name: str, report: Report) -> None:
    try:
        read_deleted(registry.dir, name)
    except StoreError as exc:
        report.findings.append(Finding("model-deleted-record", str(exc), subject=f"model {name}"))
