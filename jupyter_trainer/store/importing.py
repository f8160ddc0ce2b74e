"""``workspace import``: copy a personal store's runs, sweeps and models into a workspace.

Ids, version numbers and lineage are kept, so a model still names the run it came from and
a sweep its trials. Each run and model version is copied beside its destination and renamed
into place in the transaction that inserts its index row (as a new run is), so an import cut
short leaves whole entries or none. What the workspace already has is left alone, so a
second import changes nothing; a model version whose number the workspace already uses for
other files is a conflict, named and not copied. A run or sweep still running is skipped
(import it once it has ended). The source is only read. The importer owns what is
copied, by its folders and by its records: whoever the source's records name, they only
claim an owner.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import SpecError
from ..core.modes import make_top, share_tree
from ..core.spec import RunSpec
from . import Store, liveness
from .folders import is_run_id, rmtree
from .index_base import index_row
from .model_records import LINEAGE, read_deleted
from .models import ModelStore, versions_in
from .models import index_row as model_row
from .owners import Identity
from .records import ACTIVE, RunPaths, read_json, write_json_atomic
from .sweeps import SWEEP_ACTIVE, SweepStore


@dataclass
class ImportReport:
    source: Path
    target: Path
    copied: dict[str, list[str]] = field(
        default_factory=lambda: {"runs": [], "sweeps": [], "models": []}
    )
    present: dict[str, list[str]] = field(
        default_factory=lambda: {"runs": [], "sweeps": [], "models": []}
    )
    skipped: dict[str, str] = field(default_factory=dict)  # what -> why

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "target": str(self.target),
            "copied": self.copied,
            "present": self.present,
            "skipped": self.skipped,
        }

    def text(self) -> str:
        lines = [f"imported {self.source} into {self.target}:"]
        for kind in ("runs", "sweeps", "models"):
            copied, present = self.copied[kind], self.present[kind]
            lines.append(
                f"  {kind}: {len(copied)} copied, {len(present)} already there"
                + (
                    f" ({', '.join(copied[:5])}{', ...' if len(copied) > 5 else ''})"
                    if copied
                    else ""
                )
            )
        for what, why in self.skipped.items():
            lines.append(f"  skipped {what}: {why}")
        if not self.skipped:
            lines.append(f"  {self.source} is as it was; remove it once you are satisfied")
        return "\n".join(lines)


def import_store(target: Store, source: Path) -> ImportReport:
    """Copy what ``source`` (a store's folder) has and ``target`` lacks into ``target``."""
    source = Path(source).expanduser()
    if not (source / "runs").is_dir() and not (source / "models").is_dir():
        raise SpecError(
            f"{source} is not a run store (it has no runs/ or models/ folder); give the "
            "folder of a personal store, like ~/.jupyter_trainer"
        )
    if os.path.realpath(source) == os.path.realpath(target.home):
        raise SpecError(f"{source} is the workspace itself; give another store's folder")
    report = ImportReport(source, target.home)
    _import_runs(target, source, report)
    _import_sweeps(target, source, report)
    _import_models(target, source, report)
    return report


def _copy_beside(src: Path, folder: Path, name: str) -> Path:
    """A copy of ``src`` in ``folder`` under a hidden name (links copied as links)."""
    tmp = folder / f".{name}.import-{secrets.token_hex(4)}"
    shutil.copytree(src, tmp, symlinks=True)
    return tmp


def _copy_in(
    src: Path, folder: Path, state: dict[str, Any], shared: bool, place: Callable[[Path], Any]
) -> None:
    """Copy the run or sweep folder ``src`` beside its place in ``folder``, make its state's
    owner the importer (who owns the copy: ``_importer``), share it in a shared workspace,
    and ``place(copy)``; on any failure the copy is removed."""
    tmp = _copy_beside(src, folder, src.name)
    try:
        if state.get("owner") != _importer():
            state["owner"] = _importer()
            os.chmod(tmp / "state.json", 0o644)
            write_json_atomic(tmp / "state.json", state)
        if shared:
            share_tree(tmp)
        place(tmp)
    except BaseException:
        rmtree(tmp)
        raise


def _import_runs(target: Store, source: Path, report: ImportReport) -> None:
    shared = target.settings.shared
    for run_id in Store(source).run_ids_on_disk():
        src = RunPaths(source / "runs" / run_id)
        if os.path.lexists(target.paths(run_id).root):
            report.present["runs"].append(run_id)
            continue
        try:
            spec = RunSpec.from_dict(read_json(src.spec))
            state = read_json(src.state)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            report.skipped[f"run {run_id}"] = (
                f"its spec or state cannot be read ({exc}); "
                f"`JUPYTER_TRAINER_HOME={source} jupyter-trainer doctor --fix` repairs it"
            )
            continue
        if state.get("status") in ACTIVE and liveness.supervisor_running(src):
            report.skipped[f"run {run_id}"] = "it is still running; import it once it has ended"
            continue
        make_top(target.home, shared)
        make_top(target.runs_dir, shared)
        final = target.paths(run_id).root
        _copy_in(  # the row is made once the copy's state has its owner
            src.root,
            target.runs_dir,
            state,
            shared,
            lambda tmp: target.index.publish(index_row(run_id, spec, state), tmp, final),  # noqa: B023
        )
        report.copied["runs"].append(run_id)


def _import_sweeps(target: Store, source: Path, report: ImportReport) -> None:
    sweeps = SweepStore(target.home)
    shared = target.settings.shared
    for sweep_id in SweepStore(source).ids():
        if os.path.lexists(sweeps.paths(sweep_id).root):
            report.present["sweeps"].append(sweep_id)
            continue
        src = SweepStore(source).paths(sweep_id)
        try:
            state = read_json(src.state)
        except (OSError, ValueError) as exc:
            report.skipped[f"sweep {sweep_id}"] = f"its state cannot be read ({exc})"
            continue
        if state.get("status") in SWEEP_ACTIVE and not SweepStore(source).driver_gone(state):
            report.skipped[f"sweep {sweep_id}"] = "it is still running; import it once it has ended"
            continue
        make_top(target.home, shared)
        make_top(sweeps.dir, shared)
        _copy_in(
            src.root,
            sweeps.dir,
            state,
            shared,
            lambda tmp: os.rename(tmp, sweeps.paths(sweep_id).root),  # noqa: B023 (called at once)
        )
        report.copied["sweeps"].append(sweep_id)


def _import_models(target: Store, source: Path, report: ImportReport) -> None:
    registry = ModelStore(target.home)
    shared = target.settings.shared
    try:
        names = sorted(e.name for e in os.scandir(source / "models") if is_run_id(e.name))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        folder = registry.folder(name)
        gone = read_deleted(registry.dir, name)
        for version in versions_in(source / "models" / name):
            ref = f"{name}@{version}"
            src = source / "models" / name / str(version)
            try:
                lineage = read_json(src / LINEAGE)
                row = model_row(lineage)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                report.skipped[f"model {ref}"] = f"its {LINEAGE} cannot be read ({exc})"
                continue
            here = folder / str(version)
            if os.path.lexists(here):
                if _same_files(here, lineage):
                    report.present["models"].append(ref)
                else:
                    report.skipped[f"model {ref}"] = (
                        f"the workspace's {ref} holds other files; register the run's "
                        "files again under another name to keep both"
                    )
                continue
            if str(version) in gone:
                report.skipped[f"model {ref}"] = (
                    f"the workspace deleted its own {ref}, and a number is never given twice; "
                    "register the files again to give them a new version"
                )
                continue
            for top in (target.home, registry.dir, folder):
                make_top(top, shared)
            tmp = _copy_beside(src, folder, str(version))
            try:
                if lineage.get("owner") != _importer() or lineage.get("user") != _user():
                    lineage.update(owner=_importer(), user=_user())
                    os.chmod(tmp, 0o755)
                    os.chmod(tmp / LINEAGE, 0o644)
                    write_json_atomic(tmp / LINEAGE, lineage)
                    os.chmod(tmp / LINEAGE, 0o444)
                    os.chmod(tmp, 0o555)
                registry.index.publish(row, tmp, here)
            except BaseException:
                rmtree(tmp)
                raise
            report.copied["models"].append(ref)


def _importer() -> dict[str, Any]:
    """The owner record of what is imported: the importing user's, whoever the source's
    records name, since that user owns the copies (and a record only claims an owner)."""
    return Identity.current().record()


def _user() -> str:
    return Identity.current().user


def _same_files(here: Path, lineage: dict[str, Any]) -> bool:
    """Whether the version at ``here`` is the one ``lineage`` describes (its run and files)."""
    try:
        theirs = read_json(here / LINEAGE)
        return bool(
            _files(theirs) == _files(lineage) and theirs.get("run_id") == lineage.get("run_id")
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _files(record: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((f["path"], f["sha256"]) for f in record.get("files") or [])
