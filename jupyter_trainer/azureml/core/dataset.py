"""``azureml.core.Dataset`` and ``Datastore``: v1 file datasets become data inputs of a run
(``--data NAME=PATH``, ``jt.data[NAME]``).

- ``Dataset.File.from_files(path)``: a local file or folder, an ``http(s)`` URL (a presigned
  one included: its credentials are redacted wherever the run is recorded), or a path on a
  datastore (``(datastore, "path")`` or ``datastore.path("path")``); or a list of them,
  which the run reads as one folder holding each under its own name (``gather``).
- A datastore is a folder of the run store (``<home>/datastore/<name>/``):
  ``Dataset.File.upload_directory`` and ``datastore.upload`` copy into it.
- ``as_mount()`` and ``as_download()`` in a script's arguments become the path of the input
  on each node (``${{data.NAME}}``); ``as_named_input(NAME)`` names it, and the script finds
  it as ``run.input_datasets[NAME]``. Both modes give a local path: the input is read from
  where it is, or staged to each node once (docs/data.md).
- Tabular datasets, Azure storage URLs and datastores with credentials are refused by name.
"""

from __future__ import annotations

import filecmp
import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.files import write_text_atomic
from ...core.urls import redact
from ...rankside.host.home import default_home
from ..errors import NotSupported, UserErrorException
from .from_files import gather, leaf_of

AZURE_URL = re.compile(r"(azureml|wasbs?|abfss?|adl)://", re.I)
_HTTP_URL = re.compile(r"https?://", re.I)
_INPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
CREDENTIALS_FIX = (
    "credentials stay out of runs here: download the data with your Azure tools, or give "
    "a presigned https:// URL (a SAS URL) to Dataset.File.from_files"
)


def _home(workspace: Any) -> Path:
    home = getattr(workspace, "home", None)
    return Path(home) if home else default_home()


class Datastore:
    """A folder of the run store standing for a v1 datastore (``workspaceblobstore``)."""

    def __init__(self, workspace: Any = None, name: str = "workspaceblobstore") -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise UserErrorException(f"datastore name {name!r}: letters, digits, - and _ only")
        self.workspace = workspace
        self.name = name
        self.datastore_type = "Local"
        self.root = _home(workspace) / "datastore" / name

    def __repr__(self) -> str:
        return f"Datastore(name={self.name!r}, root={str(self.root)!r})"

    @staticmethod
    def get(workspace: Any, datastore_name: str) -> Datastore:
        return Datastore(workspace, datastore_name)

    @staticmethod
    def get_default(workspace: Any) -> Datastore:
        return Datastore(workspace)

    def path(self, path: str | None = None, data_reference_name: str | None = None) -> DataPath:
        return DataPath(self, path or "", data_reference_name)

    def as_mount(self) -> DataReference:
        """The whole datastore as a run's input (v1's ``DataReference``), named after it."""
        return self.path().as_mount()

    def as_download(self, path_on_compute: str | None = None, overwrite: bool = False) -> Any:
        return self.path().as_download(path_on_compute, overwrite)

    def _inside(self, relative: str) -> Path:
        parts = [p for p in str(relative).replace("\\", "/").split("/") if p not in ("", ".")]
        if ".." in parts:
            raise UserErrorException(f"datastore path {relative!r} must not contain '..'")
        return self.root.joinpath(*parts)

    def upload(
        self,
        src_dir: str,
        target_path: str | None = None,
        overwrite: bool = False,
        show_progress: bool = True,
    ) -> DataPath:
        """Copy the folder ``src_dir`` to ``target_path`` of this datastore."""
        source = Path(src_dir).expanduser()
        if not source.is_dir():
            raise UserErrorException(f"upload: {source} is not a folder")
        target = self._inside(target_path or "")
        copied, kept = _merge(source, target, overwrite=overwrite)
        where = f"{self.name}/{target_path or ''}"
        if show_progress:
            print(f"Uploaded {_files(copied)} of {source} to {where}")
        if kept:  # v1 skipped them too, and said so: a stale file must not pass unseen
            shown = ", ".join(kept[:5]) + (f" and {len(kept) - 5} more" if len(kept) > 5 else "")
            print(
                f"Kept {_files(len(kept))} already at {where} that differ from {source} "
                f"(overwrite=False): {shown}; pass overwrite=True to replace them"
            )
        return DataPath(self, target_path or "")

    def upload_files(
        self,
        files: list[str],
        relative_root: str | None = None,
        target_path: str | None = None,
        overwrite: bool = False,
        show_progress: bool = True,
    ) -> DataPath:
        target = self._inside(target_path or "")
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            path = Path(name).expanduser()
            rel = path.relative_to(relative_root) if relative_root else Path(path.name)
            dest = target / rel
            if dest.exists() and not overwrite:
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        return DataPath(self, target_path or "")

    @staticmethod
    def _credentials(call: str) -> NotSupported:
        return NotSupported(call, CREDENTIALS_FIX)

    @staticmethod
    def register_azure_blob_container(*args: Any, **kwargs: Any) -> Datastore:
        raise Datastore._credentials("Datastore.register_azure_blob_container")

    @staticmethod
    def register_azure_file_share(*args: Any, **kwargs: Any) -> Datastore:
        raise Datastore._credentials("Datastore.register_azure_file_share")

    @staticmethod
    def register_azure_data_lake_gen2(*args: Any, **kwargs: Any) -> Datastore:
        raise Datastore._credentials("Datastore.register_azure_data_lake_gen2")


def _files(count: int) -> str:
    return f"{count} file" if count == 1 else f"{count} files"


def _merge(source: Path, target: Path, overwrite: bool) -> tuple[int, list[str]]:
    """Copy ``source`` into ``target``; a file already there is replaced only with
    ``overwrite``. Returns how many files were copied, and the ones kept although they
    differ from the source's."""
    copied, kept = 0, []
    for path in sorted(source.rglob("*")):
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        elif overwrite or not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
            copied += 1
        elif not filecmp.cmp(path, dest, shallow=False):
            kept.append(str(path.relative_to(source)))
    target.mkdir(parents=True, exist_ok=True)
    return copied, kept


@dataclass(frozen=True)
class DataPath:
    datastore: Datastore
    path_on_datastore: str
    data_reference_name: str | None = None

    @property
    def local(self) -> Path:
        return self.datastore._inside(self.path_on_datastore)

    def _reference(self, mode: str, path_on_compute: str | None) -> DataReference:
        name = (
            self.data_reference_name
            or re.sub(
                r"[^A-Za-z0-9_.-]",
                "_",
                "_".join(filter(None, (self.datastore.name, self.path_on_datastore))),
            )[:64]
        )
        return DataReference(self, name, mode, path_on_compute)

    def as_mount(self) -> DataReference:
        return self._reference("mount", None)

    def as_download(
        self, path_on_compute: str | None = None, overwrite: bool = False
    ) -> DataReference:
        return self._reference("download", path_on_compute)


class DatasetConsumptionConfig:
    """A dataset as a run's input: its input name and mode (``as_mount``/``as_download``)."""

    def __init__(
        self,
        name: str | None,
        dataset: FileDataset,
        mode: str = "direct",
        path_on_compute: str | None = None,
    ) -> None:
        if name is not None and not _INPUT_NAME.fullmatch(name):
            raise UserErrorException(
                f"input name {name!r}: start with a letter or _, then letters, digits, _ . -"
            )
        self.name = name
        self.dataset = dataset
        self.mode = mode
        self.path_on_compute = path_on_compute

    def as_mount(self, path_on_compute: str | None = None) -> DatasetConsumptionConfig:
        return DatasetConsumptionConfig(self.name, self.dataset, "mount", path_on_compute)

    def as_download(self, path_on_compute: str | None = None) -> DatasetConsumptionConfig:
        return DatasetConsumptionConfig(self.name, self.dataset, "download", path_on_compute)

    def __repr__(self) -> str:
        return f"DatasetConsumptionConfig(name={self.name!r}, mode={self.mode!r})"


class DataReference(DatasetConsumptionConfig):
    """v1's ``DataReference``: a datastore path given to a run (``ds.as_mount()``,
    ``ds.path("mnist").as_download()``), an input named ``data_reference_name`` (by default
    the datastore's name and the path)."""

    def __init__(
        self,
        datapath: DataPath,
        name: str,
        mode: str = "mount",
        path_on_compute: str | None = None,
    ) -> None:
        super().__init__(name, FileDataset(_source(datapath)), mode, path_on_compute)
        self.datastore = datapath.datastore
        self.path_on_datastore = datapath.path_on_datastore
        self.data_reference_name = name

    def __repr__(self) -> str:
        return f"DataReference(datastore={self.datastore.name!r}, path={self.path_on_datastore!r})"


class FileDataset:
    """A v1 file dataset: a file, folder or URL, or several of them (``sources``), which a
    run reads as one folder holding each of them (see ``gather``)."""

    def __init__(self, source: str | Sequence[str], name: str | None = None) -> None:
        self.sources = (source,) if isinstance(source, str) else tuple(source)
        if not self.sources:
            raise UserErrorException("a dataset needs at least one path")
        self.name = name
        self.version = 1 if name else None
        self.tags: dict[str, str] = {}

    @property
    def source(self) -> str:
        """What the run reads: the one source, or the folder that gathers them all."""
        if len(self.sources) == 1:
            return self.sources[0]
        return str(gather(self.sources, default_home()))

    def __repr__(self) -> str:
        shown = self.sources[0] if len(self.sources) == 1 else [redact(s) for s in self.sources]
        return f"FileDataset(source={shown!r}, name={self.name!r})"

    def as_named_input(self, name: str) -> DatasetConsumptionConfig:
        return DatasetConsumptionConfig(name, self)

    def as_mount(self, path_on_compute: str | None = None) -> DatasetConsumptionConfig:
        return DatasetConsumptionConfig(self.name, self, "mount", path_on_compute)

    def as_download(self, path_on_compute: str | None = None) -> DatasetConsumptionConfig:
        return DatasetConsumptionConfig(self.name, self, "download", path_on_compute)

    def to_path(self) -> list[str]:
        if len(self.sources) > 1:  # each under its own name in the gathered folder
            return sorted("/" + leaf_of(s) for s in self.sources)
        root = Path(self.source)
        if _HTTP_URL.match(self.source):
            return [leaf_of(self.source)]
        if root.is_file():
            return ["/" + root.name]
        return sorted("/" + p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def download(self, target_path: str | None = None, overwrite: bool = False) -> list[str]:
        if any(_HTTP_URL.match(s) for s in self.sources):
            raise NotSupported(
                "FileDataset.download of a URL in the notebook",
                "give the dataset to the run (as_download()), which downloads it once",
            )
        target = Path(target_path or ".").expanduser()
        source = Path(self.source)
        if source.is_file():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / source.name)
            return [str(target / source.name)]
        _merge(source, target, overwrite)
        return [str(target / p.relative_to(source)) for p in source.rglob("*") if p.is_file()]

    def mount(self, mount_point: str | None = None, **kwargs: Any) -> Any:
        raise NotSupported("FileDataset.mount in the notebook", f"read it at {self.source}")

    def register(
        self,
        workspace: Any,
        name: str,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        create_new_version: bool = False,
    ) -> FileDataset:
        """Keep it by name in the workspace (``<home>/azureml/datasets.json``)."""
        if not _INPUT_NAME.fullmatch(name):
            raise UserErrorException(f"dataset name {name!r}: letters, digits, _ . - only")
        path = _home(workspace) / "azureml" / "datasets.json"
        known = _registered(path)
        sources = list(self.sources)
        if name in known and _sources(known[name]) != sources and not create_new_version:
            shown = ", ".join(redact(s) for s in _sources(known[name]))
            raise UserErrorException(
                f"a dataset named {name!r} is registered already (from {shown}); "
                "pass create_new_version=True to replace it"
            )
        known[name] = {
            "source": sources[0] if len(sources) == 1 else sources,
            "description": description or "",
            "tags": tags or {},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(known, indent=1))
        dataset = FileDataset(self.sources, name)
        dataset.tags = dict(tags or {})
        return dataset


def _registered(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise UserErrorException(
            f"{path} is damaged ({exc}); remove it and register again"
        ) from None
    return data if isinstance(data, dict) else {}


def _sources(item: dict[str, Any]) -> list[str]:
    """A registered dataset's sources (one is kept as a string, several as a list)."""
    source = item["source"]
    return [source] if isinstance(source, str) else list(source)


def _paths(path: Any) -> list[str]:
    """The sources ``from_files`` was given: a path, or a list of them."""
    if isinstance(path, (list, tuple)) and not (len(path) == 2 and isinstance(path[0], Datastore)):
        if not path:
            raise UserErrorException("Dataset.File.from_files(path=[]): give at least one path")
        return [_source(p) for p in path]
    return [_source(path)]


def _source(path: Any) -> str:
    if isinstance(path, (list, tuple)) and len(path) == 2 and isinstance(path[0], Datastore):
        text = str(path[0]._inside(str(path[1])))
    elif isinstance(path, DataPath):
        text = str(path.local)
    else:
        text = str(path)
    if AZURE_URL.match(text):
        raise NotSupported(f"the Azure storage path {text.split('?', 1)[0]!r}", CREDENTIALS_FIX)
    if _HTTP_URL.match(text):
        return text
    local = Path(text).expanduser()
    if any(c in text for c in "*?["):
        raise NotSupported(
            f"the glob {text!r} as a dataset", "give the folder that holds the files"
        )
    if not local.exists():
        raise UserErrorException(f"dataset path {local} does not exist")
    return str(local.resolve())


class _FileFactory:
    @staticmethod
    def from_files(
        path: Any, validate: bool = True, partition_format: str | None = None, is_file: bool = False
    ) -> FileDataset:
        return FileDataset(_paths(path))

    @staticmethod
    def upload_directory(
        src_dir: str,
        target: Any,
        pattern: str | None = None,
        overwrite: bool = False,
        show_progress: bool = True,
    ) -> FileDataset:
        if isinstance(target, DataPath):
            store, relative = target.datastore, target.path_on_datastore
        elif isinstance(target, (list, tuple)) and len(target) == 2:
            store, relative = target[0], str(target[1])
        else:
            raise UserErrorException("target is (datastore, 'path') or datastore.path('path')")
        if pattern:
            raise NotSupported("upload_directory(pattern=...)", "upload the folder as it is")
        path = store.upload(src_dir, relative, overwrite=overwrite, show_progress=show_progress)
        return FileDataset(str(path.local))


class _TabularFactory:
    def __getattr__(self, name: str) -> Any:
        raise NotSupported(
            f"Dataset.Tabular.{name}",
            "give the file as a file dataset (Dataset.File.from_files) and read it with "
            "pandas in the script, at run.input_datasets[NAME]",
        )


class Dataset:
    File = _FileFactory()
    Tabular = _TabularFactory()

    @staticmethod
    def get_by_name(workspace: Any, name: str, version: str | int = "latest") -> FileDataset:
        known = _registered(_home(workspace) / "azureml" / "datasets.json")
        if name not in known:
            raise UserErrorException(
                f"no dataset named {name!r} is registered (registered: "
                f"{', '.join(sorted(known)) or 'none'}); register it with ds.register(ws, NAME)"
            )
        dataset = FileDataset(_sources(known[name]), name)
        dataset.tags = dict(known[name].get("tags") or {})
        return dataset

    @staticmethod
    def get_all(workspace: Any) -> dict[str, FileDataset]:
        known = _registered(_home(workspace) / "azureml" / "datasets.json")
        return {name: FileDataset(_sources(item), name) for name, item in known.items()}


__all__ = [
    "DataPath",
    "DataReference",
    "Dataset",
    "DatasetConsumptionConfig",
    "Datastore",
    "FileDataset",
]
