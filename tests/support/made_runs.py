"""Runs made directly in a store, without a launch: ``new_run`` (also as another user,
``SOMEONE``), ``finish`` to end one as its supervisor would, ``made_run`` with files in its
outputs; and the registry's files opened up for a test to rewrite, as the owner of a store (or
someone sharing it) can."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.spec import CodeSpec, RunSpec
from jupyter_trainer.store import Store
from jupyter_trainer.store.owners import Identity

SOMEONE = Identity("someone-else", 4242)


def finish(store: Store, run_id: str, status: str = "completed") -> None:
    """Record the run as ended, as its supervisor would."""
    state = json.loads(store.paths(run_id).state.read_text())
    store.write_state(run_id, {**state, "status": status, "ended": time.time()})


def run_spec(name: str = "t") -> RunSpec:
    return RunSpec(name=name, code=CodeSpec(entry="_jt/cell.py", hash="sha256:0"))


def new_run(store: Store, name: str = "t", owner: Identity | None = None) -> str:
    """A run created in the store with a one-file snapshot; nothing is launched. A run of
    ``owner`` is theirs on disk too (``as_made_by``): the store takes its owner from the
    kernel, never from what its state says."""
    snapshot = store.staging_dir()
    snapshot.mkdir()
    (snapshot / "x.py").write_text("print(1)")
    run_id = store.create(run_spec(name), snapshot, owner=owner)
    if owner is not None:
        as_made_by(store.paths(run_id).root, owner.uid)
    return run_id


def as_made_by(folder: Path, uid: int) -> None:
    """Give ``folder`` and everything in it to ``uid``, as if that user had written it."""
    for path in [folder, *folder.rglob("*")]:
        os.lchown(path, uid, -1)


def made_run(store: Store, files: dict[str, bytes]) -> api.Run:
    """A run in the store whose outputs/ holds ``files`` (relative path -> bytes)."""
    run_id = new_run(store, "made")
    outputs = store.paths(run_id).outputs
    for rel, data in files.items():
        (outputs / rel).parent.mkdir(parents=True, exist_ok=True)
        (outputs / rel).write_bytes(data)
    return api.get_run(run_id)


def writable(folder: Path) -> None:
    """Undo the registry's read-only modes, as the owner of a store can."""
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def forge(model, files: list[dict], **fields) -> None:
    """Rewrite the version's lineage.json with ``files`` (and other ``fields``)."""
    writable(model.folder)
    path = model.folder / "lineage.json"
    lineage = json.loads(path.read_text())
    lineage.update(files=files, **fields)
    path.write_text(json.dumps(lineage))
    owner = fields.get("owner")
    if isinstance(owner, dict) and isinstance(owner.get("uid"), int):
        as_made_by(model.folder, owner["uid"])  # a version is its folder owner's
