"""The model registry's Python API: ``Run.register_model``, ``models()``, ``get_model()`` and
the ``Model`` handle.

Registering copies a file or folder out of a run's ``outputs/`` into the registry
(``store.models``) as the next version of a name, with the run's lineage: its id and name,
params, final metrics, code hash, environment lock, data inputs, sweep and trial, and each
copied file's sha256. The copy is the model: deleting or pruning the run changes nothing.
Deleting a version (``Model.delete``, ``delete_model``) is the registering user's to do:
another user's version needs ``force``.
"""

from __future__ import annotations

import getpass
import math
import os
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..core.errors import ModelNotFound, NotOwner, SpecError, StoreError
from ..core.spec import is_json_value
from ..mirrors.mlflow import sync_model
from ..store import Store
from ..store.follow import RunFollower
from ..store.models import ModelStore, parse_ref, validate_model_name
from ..store.outputs import Copy, copy_beneath, destination, inside
from ..store.owners import Identity, folder_owner, may_act
from ..store.workspace import settings


@dataclass(frozen=True)
class ModelFile:
    """One file of a model version: its path in the version, its size and sha256."""

    path: str
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Model:
    """One version of a registered model. Cheap: reads its ``lineage.json`` when asked."""

    mlflow: dict[str, Any] | None = None  # registering it in MLflow, when its run has --mlflow

    def __init__(self, name: str, version: int, registry: ModelStore) -> None:
        self.name = name
        self.version = version
        self.registry = registry
        self._lineage: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<Model {self.name}@{self.version} from run {self.run}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Model) and (other.name, other.version, other.registry.home) == (
            self.name,
            self.version,
            self.registry.home,
        )

    def __hash__(self) -> int:
        return hash((self.name, self.version))

    @property
    def folder(self) -> Path:
        """The version's folder: the registered file or folder and ``lineage.json``."""
        return self.registry.version_dir(self.name, self.version)

    @property
    def lineage(self) -> dict[str, Any]:
        if self._lineage is None:
            self._lineage = self.registry.lineage(self.name, self.version)
        return self._lineage

    @property
    def path(self) -> Path:
        """The registered file (``torch.load(model.path)``) or folder, in the registry.
        (``lineage`` is checked when read: its path is one plain name in the version.)"""
        return self.folder / self.lineage["path"]

    @property
    def files(self) -> list[ModelFile]:
        return [ModelFile(f["path"], f["size"], f["sha256"]) for f in self.lineage["files"]]

    @property
    def run(self) -> str:
        """The id of the run it was registered from (which may since have been deleted)."""
        return self.lineage["run_id"]

    @property
    def tags(self) -> dict[str, Any]:
        return dict(self.lineage.get("tags") or {})

    def download(self, dest: str | os.PathLike) -> list[Path]:
        """Copy the model's file or folder into the folder ``dest`` (made if missing), each
        file checked against its recorded sha256 as it is copied. Returns the paths written.
        A file that does not match raises ``StoreError`` and leaves any file of that name
        in ``dest`` as it was. No link is followed, in the registry or in ``dest``: a
        version or a ``dest`` that holds one where a file or folder should be is refused."""
        dest = destination(dest)
        prefix = (self.name, str(self.version))
        self._check_files_owner()
        copies = []
        for entry in self.files:
            parts = tuple(entry.path.split("/"))  # checked plain parts (model_records)
            copies.append(
                Copy(
                    (*prefix, *parts),
                    parts,
                    f"{entry.path} of model {self.name}@{self.version}",
                    entry.sha256,
                )
            )
        return copy_beneath(
            self.registry.dir,
            copies,
            dest,
            damaged=f"the registry's copy in {self.folder} is damaged",
        )

    def _check_files_owner(self) -> None:
        """``StoreError`` unless every file of the version belongs to who registered it
        (the owner of its folder): bytes someone else wrote are not the version's."""
        owner = (self.lineage.get("owner") or {}).get("uid")
        for entry in self.files if owner is not None else []:
            try:
                uid = os.lstat(self.folder.joinpath(*entry.path.split("/"))).st_uid
            except OSError:
                continue  # the copy names what is missing
            if uid != owner:
                raise StoreError(
                    f"{entry.path} of model {self.name}@{self.version} belongs to "
                    f"{_user_of(uid)}, not to {self.owner}, who registered the version: it is "
                    f"not the file that was registered; nothing was copied (`jupyter-trainer "
                    f"models delete {self.name}@{self.version} --yes` removes the version)"
                )

    @property
    def owner(self) -> str:
        """Who registered this version: the owner of its folder (as the lineage's ``user``
        is read, ``read_lineage``), also for a version whose record is damaged."""
        try:
            return str(self.lineage.get("user"))
        except (StoreError, ModelNotFound):  # damaged, or its lineage.json is gone
            return _user_of(os.lstat(self.registry.folder(self.name) / str(self.version)).st_uid)

    @property
    def owner_record(self) -> dict[str, Any] | None:
        """Who registered this version, as an owner record (``store.owners``): its
        folder's owner, with the Hub user its lineage names (``read_lineage``)."""
        try:
            found = self.lineage.get("owner")
        except (StoreError, ModelNotFound):
            found = None
        return found or folder_owner(self.registry.folder(self.name) / str(self.version))

    def delete(self, *, force: bool = False) -> None:
        """Delete this version from the registry: its files and its index row. Its number
        is never given to another version. A version registered by another user needs
        ``force=True`` (``NotOwner`` otherwise). Only the registry changes: the run it came
        from stays as it is."""
        check_owner([self], force=force)
        self.registry.delete_version(
            self.name,
            self.version,
            {"deleted": time.time(), "user": getpass.getuser(), "run_id": _run_of(self)},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "path": str(self.path),
            **{k: v for k, v in self.lineage.items() if k not in ("name", "version", "path")},
        }


def parse_tags(tags: Mapping[str, Any] | Sequence[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` strings (as ``--tag`` gives them) or a mapping of names to JSON scalars."""
    if tags is None:
        return {}
    if isinstance(tags, (list, tuple)):
        pairs = {}
        for text in tags:
            key, eq, value = str(text).partition("=")
            if not eq:
                raise SpecError(f"a tag is KEY=VALUE, not {text!r}")
            pairs[key.strip()] = value
        tags = pairs
    if not isinstance(tags, Mapping):
        raise SpecError(f"tags are a mapping of names to values, not {type(tags).__name__}")
    for key, value in tags.items():
        if not isinstance(key, str) or not key:
            raise SpecError(f"a tag's name is a non-empty string, not {key!r}")
        if isinstance(value, (dict, list)) or not is_json_value(value):
            raise SpecError(
                f"tag {key!r}: a value is a string, number, true, false or null, not {value!r}"
            )
    return dict(tags)


def run_lineage(store: Store, run_id: str) -> dict[str, Any]:
    """What a model registered from run ``run_id`` records about the run."""
    spec, state = store.read_spec(run_id), store.read_state(run_id)
    follower = RunFollower(store, run_id)
    follower.poll()
    metrics: dict[str, Any] = {k: _json_number(v) for k, v in follower.latest(0).items()}
    metrics.update({k: by_rank[0] for k, by_rank in follower.texts.items() if 0 in by_rank})
    built = state.get("environment") or {}
    return {
        "run_id": run_id,
        "run_name": spec.name,
        "run_status": state["status"],
        "params": dict(spec.params),
        "metrics": dict(sorted(metrics.items())),
        "code_hash": spec.code.hash,
        "environment": {
            "name": spec.env.name,
            "version": spec.env.version,
            "lock": spec.env.lock or built.get("lock"),
            "env_id": built.get("env_id") or spec.env.prepared.get("env_id"),
            "python": built.get("python") or spec.env.python,
        },
        "data": [
            {"name": d.name, "source": d.source, "size": d.size, "files": d.files, "hash": d.hash}
            for d in spec.data
        ],
        "sweep": spec.sweep,
        "trial": spec.trial,
    }


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def register_model(
    store: Store,
    run_id: str,
    name: str,
    path: str,
    tags: Mapping[str, Any] | Sequence[str] | None = None,
) -> Model:
    """Copy ``path`` (a file or folder of run ``run_id``'s ``outputs/``, read from the run's
    storage when it is gone here) into the registry as the next version of ``name``, with
    the run's lineage; return that version. A bad name, a path outside the outputs or a bad
    tag writes nothing."""
    validate_model_name(name)
    tags = parse_tags(tags)
    root = store.existing(run_id).outputs
    storage = store.read_spec(run_id).storage
    if storage and not os.path.lexists(root / path):  # gone here: the copy in storage
        from ..store.object_storage import for_run  # lazy: fsspec only for a run with storage

        with tempfile.TemporaryDirectory(prefix=".register-", dir=store.home) as fetched:
            for_run(storage, store.home, run_id).fetch_outputs(run_id, path, Path(fetched))
            return _register(store, run_id, name, path, tags, Path(fetched))
    return _register(store, run_id, name, path, tags, root)


def _register(
    store: Store, run_id: str, name: str, path: str, tags: dict[str, Any], root: Path
) -> Model:
    source = inside(root, path, "the model path")
    lineage = {
        **run_lineage(store, run_id),
        "source": str(PurePosixPath(path)),
        "tags": tags,
        "user": getpass.getuser(),
        "owner": Identity.current().record(),
    }
    registry = ModelStore(store.home)
    record = registry.register(name, source, root, lineage)
    model = Model(name, record["version"], registry)
    model._lineage = record
    uri = store.read_spec(run_id).mlflow
    if uri:  # best effort: the version is registered here whatever MLflow says
        model.mlflow = sync_model(store, run_id, name, model.version)
        if model.mlflow["status"] != "synced":
            warnings.warn(
                f"{name}@{model.version} is registered, but not in MLflow at {uri}: "
                f"{model.mlflow['error']} (`jupyter-trainer mlflow sync {run_id}` "
                "tries again)",
                RuntimeWarning,
                stacklevel=2,
            )
    return model


def models(name: str | None = None, *, home: str | os.PathLike | None = None) -> list[Model]:
    """The latest version of every registered model, by name; with ``name``, every version
    of that model, newest first (``ModelNotFound`` if it has none)."""
    registry = ModelStore(home)
    if name is not None:
        registry.version_dir(name)  # raises ModelNotFound naming the models there are
        return [Model(r["name"], r["version"], registry) for r in registry.rows(name)]
    latest: dict[str, Model] = {}
    for row in registry.rows():
        latest.setdefault(row["name"], Model(row["name"], row["version"], registry))
    return list(latest.values())


def get_model(
    name: str, version: int | None = None, *, home: str | os.PathLike | None = None
) -> Model:
    """Version ``version`` of model ``name`` (None: the latest; ``name`` may also be
    ``NAME@VERSION``); ``ModelNotFound`` naming what exists if there is none."""
    name, at = parse_ref(name)
    if version is not None and at is not None and version != at:
        raise SpecError(f"two versions asked: {name}@{at} and version={version}; give one")
    version = version if version is not None else at
    if version is not None and (type(version) is not int or version < 1):
        raise SpecError(f"a model version is a whole number from 1, not {version!r}")
    registry = ModelStore(home)
    folder = registry.version_dir(name, version)
    return Model(name, int(folder.name), registry)


def delete_model(
    name: str,
    version: int | None = None,
    *,
    all_versions: bool = False,
    force: bool = False,
    home: str | os.PathLike | None = None,
) -> list[int]:
    """Delete version ``version`` of model ``name`` (``name`` may be ``NAME@VERSION``), or
    with ``all_versions=True`` every version of it, which frees the name (its next version
    is 1 again). Returns the version numbers deleted. Nothing is deleted without a version
    or ``all_versions``, or when one of the versions was registered by another user
    (``NotOwner``) unless ``force=True``."""
    name, at = parse_ref(name)
    if version is not None and at is not None and version != at:
        raise SpecError(f"two versions asked: {name}@{at} and version={version}; give one")
    version = version if version is not None else at
    if version is not None and all_versions:
        raise SpecError(f"give a version ({name}@{version}) or all_versions=True, not both")
    if version is None and not all_versions:
        have = ", ".join(str(m.version) for m in reversed(models(name, home=home)))
        raise SpecError(
            f"say which version of {name} to delete ({name}@N; it has {have}), "
            "or all_versions=True (--all) to delete every version"
        )
    registry = ModelStore(home)
    if version is not None:
        model = version_to_delete(registry, name, version)
        model.delete(force=force)
        return [model.version]
    found = [Model(name, v, registry) for v in registry.versions(name)]
    check_owner(found, force=force)
    registry.delete_model(name)
    return sorted(m.version for m in found)


def version_to_delete(registry: ModelStore, name: str, version: int) -> Model:
    """Version ``version`` of ``name``, even one whose ``lineage.json`` is gone (what
    ``get_model`` would not find is still on disk, and deleting is how it is cleared)."""
    if version in registry.versions(name):
        return Model(name, version, registry)
    return get_model(name, version, home=registry.home)  # raises ModelNotFound


def check_owner(versions: Sequence[Model], *, force: bool) -> None:
    """``NotOwner`` unless every one of ``versions`` was registered by this user, or
    ``force`` and this user is in the workspace's admin group."""
    if not versions:
        return
    me = Identity.current()
    theirs = [m for m in versions if not may_act(m.owner_record, me, None)]
    if not theirs:
        return
    group = settings(versions[0].registry.home).admin_group
    shown = ", ".join(f"{m.name}@{m.version} by {m.owner}" for m in theirs)
    if force and group and me.in_group(group):
        return
    if force:
        raise NotOwner(
            f"{shown}: registered by another user, not you ({me.name}); only members of "
            f"the workspace's admin group ({group or 'admin_group in its config.toml'}) may "
            "delete it with force; nothing was deleted"
        )
    raise NotOwner(
        f"{shown}: registered by another user, not you ({me.name}); nothing was deleted "
        "(a member of the workspace's admin group can delete it with force=True, or --force)"
    )


def _run_of(model: Model) -> str | None:
    try:
        return model.run
    except (StoreError, ModelNotFound):
        return None


def _user_of(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
