"""``azureml.core.run.Run`` inside a run of jupyter_trainer: SDK v1's script-side calls,
reaching this run's record.

- ``log``, ``log_list``, ``log_row`` and ``log_table`` are metrics (``jt.log``), charted in
  the run's view. A call without ``step`` takes the next step of that metric, as v1 numbered
  them (0, 1, 2, ...); a row's columns become ``NAME/COLUMN``.
- ``log_image`` writes ``outputs/images/NAME.png`` (``NAME-2.png`` for the next call of the
  same name; ``NAME.rank1.png`` from rank 1), ``upload_file`` and ``upload_folder`` copy into
  the run's files: ``outputs/...`` and ``logs/...`` where v1 had them, any other name under
  ``outputs/``. ``log_confusion_matrix`` and the other JSON-valued calls write
  ``outputs/metrics/NAME.json``.
- ``tag``/``set_tags`` are the run's tags (``jt.tag``); ``input_datasets`` the run's data
  inputs (``jt.data``), as paths on this node.
- ``register_model`` records the request with the run; the notebook's
  ``wait_for_completion`` registers the model once the run has completed.

Every rank has the same run, as in v1. Outside a run, ``get_context()`` gives an offline run
that prints what it logs, as v1's did. Standard library only: copied into every snapshot.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_trainer.rankside.rank import runtime as _jt

from ._inputs import InputDataset

# A model the script asked to register: a tag of the run, read by the notebook's Run
MODEL_REQUEST_TAG = "azureml.register_model:"
_NOTEBOOK_SIDE = (
    "is a notebook-side name of Azure ML SDK v1: in the notebook it is "
    "jupyter_trainer.azureml.core.{name}; inside a run, {fix}"
)


def _experiment_name() -> str:
    """The v1 experiment the run was submitted to (its spec's ``origin.azureml``), else the
    run's name."""
    from jupyter_trainer.rankside.rank import run_inputs

    run_dir = os.environ.get("JT_RUN_DIR") or None
    origin = run_inputs.from_spec(run_dir, "origin")
    azureml = origin.get("azureml") if isinstance(origin, dict) else None
    if isinstance(azureml, dict) and azureml.get("experiment"):
        return str(azureml["experiment"])
    return str(run_inputs.from_spec(run_dir, "name") or _jt.run_id)


class Experiment:
    """``run.experiment``: its ``name`` (the v1 experiment the run was submitted to)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def workspace(self) -> Workspace:
        return Workspace()

    def __repr__(self) -> str:
        return f"Experiment(name={self.name!r})"


class _NotHere:
    """A v1 name that belongs to the notebook: using it inside a run says what to do."""

    _fix = "there is no workspace to reach"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._refuse()

    @classmethod
    def _refuse(cls) -> None:
        raise RuntimeError(
            f"azureml.core.{cls.__name__} " + _NOTEBOOK_SIDE.format(name=cls.__name__, fix=cls._fix)
        )

    def __getattr__(self, name: str) -> Any:
        self._refuse()

    @classmethod
    def get_by_name(cls, *args: Any, **kwargs: Any) -> Any:
        cls._refuse()

    @classmethod
    def get(cls, *args: Any, **kwargs: Any) -> Any:
        cls._refuse()


class Workspace(_NotHere):
    _fix = (
        "the run has no workspace: read its data inputs with run.input_datasets[NAME] and "
        "pass them from the notebook with as_named_input(NAME)"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # ``run.experiment.workspace`` exists; what is asked of it refuses

    @classmethod
    def from_config(cls, *args: Any, **kwargs: Any) -> Any:
        cls._refuse()


class Dataset(_NotHere):
    _fix = (
        "a dataset is run.input_datasets[NAME] (pass it from the notebook with "
        "dataset.as_named_input(NAME)), or the path given in the script's arguments"
    )


class Datastore(_NotHere):
    _fix = "pass the data as an input of the run (Dataset.File.from_files in the notebook)"


class Model(_NotHere):
    """``Model.register`` inside a run is the run's ``register_model``: the file or folder is
    registered once the run has completed (a path outside ``./outputs`` is copied there
    first, under ``outputs/registered/NAME/``). Everything else refuses."""

    _fix = "write the model under ./outputs and register it from the notebook (run.register_model)"

    @staticmethod
    def register(
        workspace: Any,
        model_path: str,
        model_name: str,
        tags: Mapping[str, Any] | None = None,
        properties: Mapping[str, Any] | None = None,
        description: str | None = None,
        model_framework: str | None = None,
        model_framework_version: str | None = None,
        **kwargs: Any,
    ) -> RegisteredLater:
        run = Run.get_context()
        outputs = os.path.realpath("outputs") if run._offline else os.path.realpath(_jt.outputs_dir)
        path = os.path.realpath(model_path)
        if not os.path.exists(path):
            raise ValueError(f"Model.register: {model_path} does not exist")
        if os.path.commonpath([path, outputs]) != outputs and not run._offline:
            dest = os.path.join(
                outputs, "registered", _safe_name(model_name), os.path.basename(path)
            )
            if os.path.isdir(path):
                shutil.copytree(path, dest, dirs_exist_ok=True)
            else:
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(path, dest)
            path = dest
        relative = os.path.relpath(path, outputs) if not run._offline else model_path
        return run.register_model(
            model_name,
            model_path=relative.replace(os.sep, "/"),
            tags=tags,
            properties=properties,
            description=description,
            model_framework=model_framework,
            model_framework_version=model_framework_version,
        )


class Run:
    """The run this script runs in (``Run.get_context()``), as Azure ML SDK v1 offered it."""

    _current: Run | None = None

    def __init__(self, run_id: str, experiment: str, offline: bool) -> None:
        self.id = run_id
        self.experiment = Experiment(experiment)
        self._offline = offline
        self._steps: dict[str, int] = {}
        self._images: dict[str, int] = {}
        self._properties: dict[str, str] = {}
        self._tags: dict[str, str] = {}

    # -- the context -------------------------------------------------------------------
    @classmethod
    def get_context(
        cls, allow_offline: bool = True, used_for_context_manager: bool = False, **kwargs: Any
    ) -> Run:
        """This run; outside a run, an offline run (or, with ``allow_offline=False``, an
        error)."""
        if cls._current is not None:
            return cls._current
        if _jt.in_run:
            run = cls(str(_jt.run_id), _experiment_name(), offline=False)
        elif allow_offline:
            run = cls(f"OfflineRun_{uuid.uuid4()}", "offline", offline=True)
        else:
            raise RuntimeError(
                "Run.get_context(allow_offline=False) outside a run: start this script as a "
                "run (Experiment.submit, %train script.py, or jupyter-trainer submit)"
            )
        cls._current = run
        return run

    @property
    def display_name(self) -> str:
        return self.id

    @property
    def name(self) -> str:
        return self.id

    @property
    def number(self) -> int:
        return 1

    @property
    def parent(self) -> None:
        return None

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    @property
    def tags(self) -> dict[str, str]:
        return dict(self._tags)

    @property
    def input_datasets(self) -> dict[str, InputDataset]:
        """The run's data inputs on this node, by name (``dataset.as_named_input(NAME)``):
        each is its path, which v1's ``FileDataset`` calls (``download``, ``mount``,
        ``to_path``) also read."""
        if self._offline:
            return {}
        return {name: InputDataset(path) for name, path in _jt.data.items()}

    def __repr__(self) -> str:
        return f"Run(experiment={self.experiment.name!r}, id={self.id!r})"

    # -- metrics -----------------------------------------------------------------------
    def _next(self, name: str, step: Any = None) -> int:
        if step is None:
            step = self._steps.get(name, 0)
        self._steps[name] = int(step) + 1
        return int(step)

    def log(self, name: str, value: Any, description: str = "", step: int | None = None) -> None:
        """One value of the metric ``name``."""
        _jt.log(step=self._next(name, step), **{name: value})

    def log_list(self, name: str, value: Iterable[Any], description: str = "") -> None:
        """Every value of ``value`` as the next steps of the metric ``name``."""
        for item in value:
            self.log(name, item)

    def log_row(self, name: str, description: str | None = None, **kwargs: Any) -> None:
        """One row: each column is the metric ``name/COLUMN``, at the row's step."""
        step = self._next(name)
        _jt.log(step=step, **{f"{name}/{column}": v for column, v in kwargs.items()})

    def log_table(
        self, name: str, value: Mapping[str, Iterable[Any]], description: str = ""
    ) -> None:
        """A table of columns (``{column: [values]}``): each row as ``log_row`` logs it."""
        columns = {column: list(values) for column, values in value.items()}
        for i in range(max((len(v) for v in columns.values()), default=0)):
            self.log_row(name, **{c: v[i] for c, v in columns.items() if i < len(v)})

    def _json_file(self, name: str, value: Any) -> None:
        if isinstance(value, str):
            value = json.loads(value)
        self._write_bytes(
            os.path.join("metrics", _safe_name(name) + ".json"),
            json.dumps(value, indent=1, default=str).encode(),
        )

    def log_confusion_matrix(self, name: str, value: Any, description: str = "") -> None:
        self._json_file(name, value)

    def log_accuracy_table(self, name: str, value: Any, description: str = "") -> None:
        self._json_file(name, value)

    def log_predictions(self, name: str, value: Any, description: str = "") -> None:
        self._json_file(name, value)

    def log_residuals(self, name: str, value: Any, description: str = "") -> None:
        self._json_file(name, value)

    def log_image(
        self, name: str, path: str | None = None, plot: Any = None, description: str = ""
    ) -> None:
        """An image file (``path``) or a matplotlib figure or ``pyplot`` (``plot``), kept as
        ``outputs/images/NAME.png`` (see the module's docstring)."""
        if (path is None) == (plot is None):
            raise ValueError("log_image takes exactly one of path= and plot=")
        count = self._images[name] = self._images.get(name, 0) + 1
        ext = ".png" if plot is not None else (os.path.splitext(str(path))[1] or ".png")
        stem = _safe_name(name) + (f"-{count}" if count > 1 else "")
        if not self._offline and _jt.rank:
            stem += f".rank{_jt.rank}"
        relative = os.path.join("images", stem + ext)
        if self._offline:
            print(f"[azureml offline] image {name}", file=sys.stderr)
            return
        target = self._target(os.path.join("outputs", relative))
        tmp = f"{target}.{os.getpid()}.tmp"
        if plot is not None:
            plot.savefig(tmp, format="png")
        else:
            shutil.copyfile(str(path), tmp)
        os.replace(tmp, target)

    # -- tags and properties -----------------------------------------------------------
    def tag(self, key: str, value: Any = None) -> None:
        self.set_tags({key: "" if value is None else value})

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self._tags.update({str(k): "" if v is None else str(v) for k, v in tags.items()})
        _jt.tag(**{str(k): v for k, v in tags.items()})

    def get_tags(self) -> dict[str, str]:
        return {k: v for k, v in self._tags.items() if not k.startswith(MODEL_REQUEST_TAG)}

    def add_properties(self, properties: Mapping[str, Any]) -> None:
        self._properties.update({str(k): str(v) for k, v in properties.items()})
        _jt.tag(**{f"property.{k}": v for k, v in properties.items()})

    def get_properties(self) -> dict[str, str]:
        return dict(self._properties)

    # -- files -------------------------------------------------------------------------
    def _target(self, name: str) -> str:
        """Where the artifact ``name`` goes in the run folder: ``outputs/...`` and
        ``logs/...`` where v1 had them, anything else under ``outputs/``."""
        parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            raise ValueError(f"artifact name {name!r} must be a relative path without '..'")
        if parts[0] == "outputs":
            root, parts = str(_jt.outputs_dir), parts[1:]
        elif parts[0] == "logs":
            root, parts = os.path.join(str(_jt.run_dir), "logs", "user"), parts[1:]
        else:
            root = str(_jt.outputs_dir)
        target = os.path.join(root, *parts)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        return target

    def _write_bytes(self, relative: str, data: bytes) -> None:
        if self._offline:
            return
        target = self._target(os.path.join("outputs", relative))
        tmp = f"{target}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, target)

    def upload_file(
        self, name: str, path_or_stream: Any, datastore_name: str | None = None
    ) -> None:
        """Copy a file (a path, or an open binary stream) into the run's files as ``name``."""
        if self._offline:
            return
        target = self._target(name)
        tmp = f"{target}.{os.getpid()}.tmp"
        if hasattr(path_or_stream, "read"):
            with open(tmp, "wb") as out:
                shutil.copyfileobj(path_or_stream, out)
        else:
            shutil.copyfile(os.fspath(path_or_stream), tmp)
        os.replace(tmp, target)

    def upload_files(self, names: Iterable[str], paths: Iterable[Any], **kwargs: Any) -> None:
        for name, path in zip(names, paths, strict=True):
            self.upload_file(name, path)

    def upload_folder(self, name: str, path: str, **kwargs: Any) -> None:
        for root, _, files in os.walk(path):
            for file in files:
                full = os.path.join(root, file)
                self.upload_file(os.path.join(name, os.path.relpath(full, path)), full)

    # -- models ------------------------------------------------------------------------
    def register_model(
        self,
        model_name: str,
        model_path: str | None = None,
        tags: Mapping[str, Any] | None = None,
        properties: Mapping[str, Any] | None = None,
        model_framework: str | None = None,
        model_framework_version: str | None = None,
        description: str | None = None,
        datasets: Any = None,
        sample_input_dataset: Any = None,
        sample_output_dataset: Any = None,
        resource_configuration: Any = None,
        **kwargs: Any,
    ) -> RegisteredLater:
        """Register ``model_path`` of this run's files as the next version of
        ``model_name`` once the run has completed: the request is recorded with the run (a
        tag), and the notebook's ``wait_for_completion`` registers it, with the run's
        lineage. A run that fails registers nothing."""
        if not model_path:
            raise ValueError("register_model needs model_path, e.g. 'outputs/model.pt'")
        request = {
            "model_path": str(model_path),
            "tags": {str(k): str(v) for k, v in (tags or {}).items()},
            "properties": {str(k): str(v) for k, v in (properties or {}).items()},
            "model_framework": model_framework,
            "model_framework_version": model_framework_version,
            "description": description,
        }
        if not self._offline:
            _jt.tag(**{MODEL_REQUEST_TAG + str(model_name): json.dumps(request, sort_keys=True)})
        return RegisteredLater(str(model_name), str(model_path))

    # -- the run's end -----------------------------------------------------------------
    def flush(self, timeout_seconds: int = 300) -> None:
        _jt.flush()

    def get_status(self) -> str:
        return "Running"

    def complete(self, _set_status: bool = True) -> None:
        """The run ends when its script does; this writes what is buffered."""
        _jt.flush()

    def fail(
        self, error_details: Any = None, error_code: Any = None, _set_status: bool = True
    ) -> None:
        """Mark the run failed: the script exits with code 1 once it returns from here."""
        _jt.flush()
        raise SystemExit(f"the run was failed by its script: {error_details or 'Run.fail()'}")

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.complete()


class RegisteredLater:
    """What ``Run.register_model`` gives inside a run: the model's name and path; its
    version exists once the run has completed and the notebook has registered it."""

    def __init__(self, name: str, path: str) -> None:
        self.name = name
        self.path = path
        self.version: int | None = None

    def __repr__(self) -> str:
        return f"Model(name={self.name!r}, path={self.path!r}, version=None)"


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name)).strip(".") or "image"
