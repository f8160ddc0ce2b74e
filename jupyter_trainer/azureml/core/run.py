"""``azureml.core.Run`` in the notebook: a submitted run of jupyter_trainer, with v1's
methods (``wait_for_completion``, ``get_metrics``, ``get_file_names``, ``download_file``,
``register_model``, ...).

A run's files are named as v1 named them: ``outputs/...`` (the run's ``outputs/``),
``logs/...`` (what the script wrote to ``./logs``) and ``user_logs/std_log_process_N.txt``
(rank N's output). Statuses are v1's: ``Queued``, ``Preparing``, ``Running``,
``Finalizing``, ``Completed``, ``Failed``, ``Canceled``.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import sys
import time
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from ...api import runs as api
from ...core.errors import RunFailed
from ...store.confined import real_parts
from ..errors import ActivityFailedException, NotSupported, UserErrorException

V1_STATUS = {
    "created": "NotStarted",
    "preparing": "Preparing",
    "queued": "Queued",
    "running": "Running",
    "finalizing": "Finalizing",
    "completed": "Completed",
    "failed": "Failed",
    "canceled": "Canceled",
    "lost": "Failed",
}
# A model the script asked to register (``rankside/azureml_v1/azureml/core/run.py``)
MODEL_REQUEST_TAG = "azureml.register_model:"
_RANK_LOG = re.compile(r"user_logs/std_log_process_(\d+)\.txt")
STREAM_INTERVAL_S = 0.5


def _utc(stamp: float | None) -> str | None:
    if stamp is None:
        return None
    moment = datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Run:
    """A run submitted from the notebook (``experiment.submit(config)``)."""

    def __init__(self, experiment: Any, run_id: str, _run: api.Run | None = None) -> None:
        home = getattr(getattr(experiment, "workspace", None), "home", None)
        self.experiment = experiment
        self._run = _run or api.get_run(run_id, home=home)
        self.id = self._run.id

    @classmethod
    def get_context(cls, allow_offline: bool = True, **kwargs: Any) -> OfflineRun:
        """In the notebook there is no run around the code: an offline run, as in v1."""
        if not allow_offline:
            raise UserErrorException(
                "Run.get_context(allow_offline=False) in the notebook: the context of a run "
                "exists inside the script it runs"
            )
        return OfflineRun()

    def __repr__(self) -> str:
        return (
            f"Run(Experiment: {self.experiment.name}, Id: {self.id}, Status: {self.get_status()})"
        )

    @property
    def run(self) -> api.Run:
        """The run of jupyter_trainer behind this v1 run."""
        return self._run

    @property
    def display_name(self) -> str:
        return self.id

    @property
    def name(self) -> str:
        return self.id

    @property
    def status(self) -> str:
        return self.get_status()

    @property
    def number(self) -> int:
        return 1

    @property
    def parent(self) -> None:
        return None

    @property
    def properties(self) -> dict[str, str]:
        return {
            k[len("property.") :]: v
            for k, v in self.get_tags().items()
            if k.startswith("property.")
        }

    @property
    def tags(self) -> dict[str, str]:
        return self.get_tags()

    # -- status and details ------------------------------------------------------------
    def get_status(self) -> str:
        return V1_STATUS.get(self._run.status, self._run.status)

    def get_details(self) -> dict[str, Any]:
        state = self._run.state
        spec = self._run.spec
        stages = state.get("stages") or {}
        started = (stages.get("running") or {}).get("start")
        details: dict[str, Any] = {
            "runId": self.id,
            "target": spec.target.name,
            "status": V1_STATUS.get(state["status"], state["status"]),
            "startTimeUtc": _utc(started),
            "endTimeUtc": _utc(state.get("ended")),
            "properties": self.properties,
            "inputDatasets": [
                {
                    "dataset": {"name": d.name, "source": d.source},
                    "consumptionDetails": {"inputName": d.name},
                }
                for d in spec.data
            ],
            "outputDatasets": [],
            "runDefinition": {
                "script": spec.code.entry,
                "arguments": list(spec.code.args),
                "target": spec.target.name,
                "nodeCount": spec.launch.nodes,
                "processCountPerNode": spec.launch.procs,
                "launcher": spec.launch.launcher,
                "environment": {"name": spec.env.name} if spec.env.name else None,
            },
            "logFiles": {name: str(self._local(name)) for name in self._log_names()},
        }
        if state["status"] in ("failed", "lost"):
            details["error"] = {
                "error": {
                    "code": "UserError",
                    "message": state.get("error", ""),
                    "failedRank": state.get("failed_rank"),
                }
            }
        return details

    def get_details_with_logs(self) -> dict[str, Any]:
        details = self.get_details()
        details["logFiles"] = {
            name: self._local(name).read_text(errors="replace") for name in self._log_names()
        }
        return details

    def get_metrics(
        self,
        name: str | None = None,
        recursive: bool = False,
        run_type: Any = None,
        populate: bool = False,
    ) -> dict[str, Any]:
        """Rank 0's metrics: a metric logged once is its value, more often a list."""
        found: dict[str, Any] = {}
        for metric, points in self._run.metrics(rank=0).items():
            if name is not None and metric != name:
                continue
            values = [value for _, value in points]
            found[metric] = values[0] if len(values) == 1 else values
        return found

    def get_tags(self) -> dict[str, str]:
        return {k: v for k, v in self._run.tags.items() if not k.startswith(MODEL_REQUEST_TAG)}

    def tag(self, key: str, value: Any = None) -> None:
        self.set_tags({key: value})

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._run.store.set_run_tags(
            self.id, {k: "" if v is None else str(v) for k, v in tags.items()}
        )

    def add_properties(self, properties: dict[str, Any]) -> None:
        self.set_tags({f"property.{k}": v for k, v in properties.items()})

    def get_portal_url(self) -> str:
        return self._run.path.as_uri()

    def get_children(self, **kwargs: Any) -> list[Run]:
        return []

    def cancel(self) -> None:
        self._run.cancel(reason="canceled from the notebook (Run.cancel)")

    # -- waiting -----------------------------------------------------------------------
    def wait_for_completion(
        self,
        show_output: bool = False,
        wait_post_processing: bool = False,
        raise_on_error: bool = True,
    ) -> dict[str, Any]:
        """Block until the run ends; with ``show_output`` stream rank 0's output meanwhile, as
        v1 streamed the driver log. Raises ``ActivityFailedException`` for a failed run."""
        if show_output:
            self._stream(sys.stdout)
        self._run.wait(raise_on_failure=False)
        if self._run.status == "completed":
            self._register_requested()
        details = self.get_details()
        if show_output:
            print(
                f"\nExecution Summary\n=================\nRunId: {self.id}\n"
                f"Web View: {self.get_portal_url()}\n",
                flush=True,
            )
        if raise_on_error and self._run.status in ("failed", "lost", "canceled"):
            try:
                self._run.raise_for_status()
            except RunFailed as exc:
                raise ActivityFailedException(
                    f"ActivityFailedException: {exc}\n{details.get('error', {})}",
                    run_id=self.id,
                    status=self._run.status,
                    failed_rank=exc.failed_rank,
                    traceback=exc.traceback,
                ) from None
        return details

    def _stream(self, out: TextIO) -> None:
        print(f"RunId: {self.id}\nWeb View: {self.get_portal_url()}\n", file=out, flush=True)
        store, offset, shown = self._run.store, 0, False
        while True:
            done = self._run.done
            text, offset = store.read_log(self.id, 0, offset)
            if text:
                if not shown:
                    print("Streaming user_logs/std_log_process_0.txt\n" + "=" * 41 + "\n", file=out)
                    shown = True
                out.write(text)
                out.flush()
            if done:
                rest, offset = store.read_log(self.id, 0, offset)
                out.write(rest)
                out.flush()
                return
            time.sleep(STREAM_INTERVAL_S)

    # -- files -------------------------------------------------------------------------
    def _log_names(self) -> list[str]:
        return [f"user_logs/std_log_process_{r}.txt" for r in self._run.store.ranks(self.id)]

    def get_file_names(self) -> list[str]:
        names = [f"outputs/{f.path}" for f in self._run.files()]
        user_logs = self._run.path / "logs" / "user"
        if user_logs.is_dir():
            names += sorted(
                f"logs/{p.relative_to(user_logs).as_posix()}"
                for p in user_logs.rglob("*")
                if p.is_file() and not p.is_symlink()
            )
        return sorted(names + self._log_names())

    def _local(self, name: str) -> Path:
        """The file of the run folder that v1's artifact ``name`` is."""
        parts = PurePosixPath(name).parts
        if not parts or ".." in parts or PurePosixPath(name).is_absolute():
            raise UserErrorException(f"artifact name {name!r} must be a relative path without '..'")
        rank_log = _RANK_LOG.fullmatch(name)
        if rank_log:
            return self._run.store.paths(self.id).log_file(int(rank_log.group(1)))
        if parts[0] == "outputs":
            return self._run.outputs.joinpath(*parts[1:])
        if parts[0] == "logs":
            return self._run.path.joinpath("logs", "user", *parts[1:])
        raise UserErrorException(
            f"the run has no file {name!r}: its files are {', '.join(self.get_file_names()) or 'none'}"
        )

    def download_file(
        self, name: str, output_file_path: str | None = None, _validate_checksum: bool = False
    ) -> None:
        source = self._local(name)
        root = self._run.path / ("outputs" if PurePosixPath(name).parts[0] == "outputs" else "logs")
        # links are followed only to a file of the run's own folder, as ``download`` does
        if not source.is_file() or real_parts(root, source) is None:
            raise UserErrorException(
                f"the run has no file {name!r}: its files are {', '.join(self.get_file_names()) or 'none'}"
            )
        target = Path(output_file_path or PurePosixPath(name).name).expanduser()
        if target.is_dir():
            target = target / PurePosixPath(name).name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)

    def download_files(
        self,
        prefix: str | None = None,
        output_directory: str | None = None,
        output_paths: list[str] | None = None,
        batch_size: int = 100,
        append_prefix: bool = True,
        timeout_seconds: int | None = None,
    ) -> None:
        folder = Path(output_directory or ".").expanduser()
        for name in self.get_file_names():
            if prefix and not name.startswith(prefix):
                continue
            relative = name if append_prefix or not prefix else name[len(prefix) :].lstrip("/")
            self.download_file(name, str(folder / relative))

    def upload_file(self, name: str, path_or_stream: Any) -> None:
        raise NotSupported(
            "Run.upload_file from the notebook", "upload files from the script (Run.get_context())"
        )

    def log(self, name: str, value: Any, description: str = "") -> None:
        raise NotSupported(
            "Run.log on a submitted run from the notebook",
            "log from the script with Run.get_context().log(...)",
        )

    # -- models ------------------------------------------------------------------------
    def _register_requested(self) -> list[Any]:
        """Register the models the script asked for with ``Run.register_model`` (recorded
        as tags of the run), each once: a version already registered from this run is
        kept."""
        from ...api.models import models
        from ...core.errors import ModelNotFound

        registered = []
        for key, value in sorted(self._run.tags.items()):
            if not key.startswith(MODEL_REQUEST_TAG):
                continue
            name = key[len(MODEL_REQUEST_TAG) :]
            try:
                versions = models(name, home=self._run.store.home)
            except ModelNotFound:
                versions = []
            if any(v.lineage.get("run_id") == self.id for v in versions):
                continue
            try:
                request = json.loads(value)
            except ValueError:
                continue
            registered.append(
                self.register_model(
                    name,
                    request.get("model_path"),
                    tags=request.get("tags") or {},
                    properties=request.get("properties") or {},
                    model_framework=request.get("model_framework"),
                    model_framework_version=request.get("model_framework_version"),
                    description=request.get("description"),
                )
            )
            print(f"Registered {name} from the run's script: {registered[-1]!r}")
        return registered

    def register_model(
        self,
        model_name: str,
        model_path: str | None = None,
        tags: dict[str, Any] | None = None,
        properties: dict[str, Any] | None = None,
        model_framework: str | None = None,
        model_framework_version: str | None = None,
        description: str | None = None,
        datasets: Any = None,
        sample_input_dataset: Any = None,
        sample_output_dataset: Any = None,
        resource_configuration: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The next version of ``model_name`` in the registry, from ``model_path`` of the
        run's ``outputs/`` (``outputs/model.pt`` or ``model.pt``)."""
        from .model import Model

        if model_path is None:
            raise UserErrorException("register_model needs model_path, e.g. 'outputs/model.pt'")
        parts = PurePosixPath(model_path).parts
        if parts and parts[0] == "outputs":
            parts = parts[1:]
        if not parts:
            model_path = "."
        else:
            model_path = str(PurePosixPath(*parts))
        extra = {
            key: value
            for key, value in (
                ("framework", model_framework),
                ("framework_version", model_framework_version),
                ("description", description),
            )
            if value
        }
        all_tags = {
            **(tags or {}),
            **{f"property.{k}": v for k, v in (properties or {}).items()},
            **extra,
        }
        model = self._run.register_model(
            model_name, model_path, tags={k: str(v) for k, v in all_tags.items()}
        )
        return Model._of(self.experiment.workspace, model)


class OfflineRun:
    """``Run.get_context()`` in the notebook: what it is given is printed, as v1's
    offline run did; nothing is recorded."""

    id = "OfflineRun"
    display_name = "OfflineRun"

    def __init__(self) -> None:
        self.id = f"OfflineRun_{int(time.time())}"

    def log(self, name: str, value: Any, description: str = "", step: int | None = None) -> None:
        print(f"[offline run] {name}: {value}")

    def log_list(self, name: str, value: Any, description: str = "") -> None:
        print(f"[offline run] {name}: {list(value)}")

    def log_row(self, name: str, description: str | None = None, **kwargs: Any) -> None:
        print(f"[offline run] {name}: {kwargs}")

    def log_table(self, name: str, value: Any, description: str = "") -> None:
        print(f"[offline run] {name}: {value}")

    def log_image(
        self, name: str, path: str | None = None, plot: Any = None, description: str = ""
    ) -> None:
        print(f"[offline run] image {name}")

    def tag(self, key: str, value: Any = None) -> None:
        print(f"[offline run] tag {key}={value}")

    def set_tags(self, tags: dict[str, Any]) -> None:
        print(f"[offline run] tags {tags}")

    def upload_file(self, name: str, path_or_stream: Any) -> None:
        pass

    def complete(self) -> None:
        pass

    def flush(self) -> None:
        pass
