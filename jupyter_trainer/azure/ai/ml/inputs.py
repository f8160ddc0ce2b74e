"""``azure.ai.ml.Input`` and ``Output``: a job's data, as data inputs of a run here
(``jt.data[NAME]``) and folders of its ``outputs/``.

An input's ``path`` is a local file or folder, an ``http(s)`` URL (downloaded when the job
starts), an ``azureml://datastores/NAME/paths/PATH`` path (the datastore's folder of the run
store, as v1's datastores are), or a registered data asset (``azureml:NAME:VERSION``,
``azureml:NAME@latest``, which v1's ``Dataset.register`` made). A literal input (a number, a
string, a boolean) is put into the command as its text. ``mltable`` is refused. An output is
the folder ``outputs/NAME`` of the run (a file of that name for ``uri_file``), which
``jobs.download(name, output_name=NAME)`` and ``azureml://jobs/JOB/outputs/NAME`` reach.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

from ....azureml.core.dataset import Dataset, Datastore
from ....azureml.core.environment import V1Note
from .exceptions import ValidationException, refuse

# azureml://datastores/NAME/paths/P, or its long form with the subscription and workspace
_DATASTORE = re.compile(
    r"azureml://(?:subscriptions/[^/]+/resourcegroups/[^/]+/workspaces/[^/]+/)?"
    r"datastores/([^/]+)/paths/(.*)$",
    re.I,
)
# azureml://jobs/JOB/outputs/NAME[/paths/SUB]: a named output of an earlier job
_JOB_OUTPUT = re.compile(r"azureml://jobs/([^/]+)/outputs/([^/]+)(?:/paths/(.*))?/?$", re.I)
_ASSET = re.compile(r"azureml:(?!//)([A-Za-z0-9_.-]+)(?:[:@]([A-Za-z0-9_.-]+))?$", re.I)
_AZURE_STORAGE = re.compile(r"(wasbs?|abfss?|adl)://|azureml://", re.I)
_HTTP = re.compile(r"https?://", re.I)
DATA_TYPES = ("uri_file", "uri_folder", "custom_model", "mlflow_model")
STORAGE_FIX = (
    "credentials stay out of runs here: copy the data to this machine (az storage blob "
    "download-batch) and give its local path, or give a public or SAS https:// URL"
)


class Input:
    def __init__(
        self,
        *,
        type: str = "uri_folder",
        path: str | None = None,
        mode: str | None = None,
        default: Any = None,
        optional: bool | None = None,
        description: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.type = type
        self.path = path
        self.mode = mode
        self.default = default
        self.optional = optional
        self.description = description

    def __repr__(self) -> str:
        return f"Input(type={self.type!r}, path={self.path!r})"


class Output:
    def __init__(
        self,
        *,
        type: str = "uri_folder",
        path: str | None = None,
        mode: str | None = None,
        description: str | None = None,
        name: str | None = None,
        version: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.type = type
        self.path = path
        self.mode = mode
        self.description = description
        self.name = name
        self.version = version

    def __repr__(self) -> str:
        return f"Output(type={self.type!r})"


def input_of(value: Any) -> Input | Any:
    """An ``Input`` from a job's input value (an ``Input``, its dict form from YAML), or the
    literal itself."""
    if isinstance(value, dict):
        if "type" not in value and "path" not in value and "value" in value:
            return value["value"]
        return Input(**value)
    return value


def output_of(value: Any) -> Output:
    if value is None:
        return Output()
    if isinstance(value, dict):
        return Output(**value)
    if isinstance(value, Output):
        return value
    raise ValidationException(f"output {value!r}: give Output(type='uri_folder') or its dict form")


def data_source(name: str, given: Input, workspace: Any, base: Path) -> str:
    """Where the data input ``name`` is read from: a local path, a URL, a datastore's folder."""
    kind = str(given.type or "uri_folder").lower()
    if kind == "mltable":
        raise refuse(
            f"the mltable input {name!r}",
            "give the folder or file the MLTable reads as Input(type='uri_folder' or "
            "'uri_file', path=...) and read it with pandas in the script",
        )
    if kind not in DATA_TYPES:
        raise ValidationException(
            f"input {name!r} has type {given.type!r}: use uri_file or uri_folder"
        )
    path = given.path if given.path is not None else given.default
    if not isinstance(path, str) or not path:
        raise ValidationException(f"input {name!r} has no path: give Input(path=...)")
    found = _DATASTORE.match(path)
    if found:
        store = Datastore(workspace, found.group(1))
        local = store._inside(found.group(2))
        if not local.exists():
            raise ValidationException(
                f"input {name!r}: {path} is {local}, which does not exist: put the data there "
                f"(the datastore {found.group(1)!r} is the folder {store.root})"
            )
        return str(local)
    earlier = _JOB_OUTPUT.match(path)
    if earlier:
        return _job_output(name, earlier, workspace)
    asset = _ASSET.match(path)
    if asset:
        return _registered(name, asset.group(1), asset.group(2), workspace)
    if _AZURE_STORAGE.match(path):
        raise refuse(f"the Azure storage path {path.split('?', 1)[0]!r}", STORAGE_FIX)
    if _HTTP.match(path):
        return path
    local = Path(path).expanduser()
    local = local if local.is_absolute() else base / local
    if not local.exists():
        raise ValidationException(f"input {name!r}: {local} does not exist")
    if kind == "uri_file" and local.is_dir():
        raise ValidationException(f"input {name!r} is a uri_file, but {local} is a folder")
    return str(local.resolve())


def datastore_folder(path: str, workspace: Any) -> Path | None:
    """The folder of the run store an ``azureml://...datastores/NAME/paths/P`` path is."""
    found = _DATASTORE.match(path)
    return Datastore(workspace, found.group(1))._inside(found.group(2)) if found else None


def _job_output(name: str, found: re.Match, workspace: Any) -> str:
    from ....api import runs as api

    try:
        run = api.get_run(found.group(1), home=workspace.home)
    except Exception as exc:
        raise ValidationException(
            f"input {name!r}: no job {found.group(1)!r} here: {exc}"
        ) from None
    local = run.outputs / found.group(2)
    if found.group(3):
        local = local.joinpath(*[p for p in found.group(3).split("/") if p not in ("", ".")])
    if ".." in found.group(0).split("/") or not local.exists():
        raise ValidationException(
            f"input {name!r}: job {run.id} has no output {found.group(2)!r} "
            f"({local} does not exist{'; it is ' + run.status if not run.done else ''})"
        )
    return str(local)


def _registered(name: str, asset: str, version: str | None, workspace: Any) -> str:
    if version in (None, "latest"):
        version = "latest"
    try:
        return Dataset.get_by_name(workspace, asset, version).source
    except Exception:
        raise ValidationException(
            f"input {name!r}: no data asset {asset!r} here (data assets are Azure's): give "
            "the data's folder or file itself as Input(path='./data'), an https:// URL, or "
            "an azureml://datastores/workspaceblobstore/paths/... path"
        ) from None


def output_note(name: str, given: Output, workspace: Any) -> None:
    """A note for an output given a path of its own: it is written to ``outputs/NAME`` (and
    copied to a datastore path when the job has completed, as v2 uploaded it)."""
    if given.path and datastore_folder(given.path, workspace) is None:
        warnings.warn(
            f"output {name!r} goes to the run's outputs/{name}, not to {given.path}: "
            f"copy it from there with ml_client.jobs.download(JOB, output_name={name!r})",
            V1Note,
            stacklevel=4,
        )
    if str(given.type).lower() == "mltable":
        raise refuse(f"the mltable output {name!r}", "write a uri_folder output instead")


__all__ = ["Input", "Output"]
