"""``ml_client.models``: the model registry here (``jt.models``), in v2's words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ....api import models as registry
from ....api import runs as api
from .entities.model import Model, job_output
from .exceptions import ValidationException


def _entity(found: registry.Model) -> Model:
    model = Model(name=found.name, version=str(found.version), path=str(found.path))
    model.tags = {str(k): str(v) for k, v in found.tags.items()}
    model.id = f"azureml:{found.name}:{found.version}"
    model.job_name = found.run
    return model


class ModelOperations:
    def __init__(self, client: Any) -> None:
        self._client = client

    @property
    def _home(self) -> Path:
        return self._client.workspace.home

    def create_or_update(self, model: Model) -> Model:
        """Register the job output ``model.path`` names as the next version of
        ``model.name``, with the job's lineage."""
        if not isinstance(model, Model) or not model.name:
            raise ValidationException("models.create_or_update takes Model(name=..., path=...)")
        job, path = job_output(model.path)
        run = self._client.jobs.get(job).run
        if run is None:
            raise ValidationException(
                f"{job} is a sweep: register from one of its trials, e.g. "
                "job.properties['best_child_run_id']"
            )
        tags = {**{str(k): str(v) for k, v in model.tags.items()}}
        if model.description:
            tags["description"] = model.description
        return _entity(api.get_run(run.id, home=self._home).register_model(model.name, path, tags))

    def get(self, name: str, version: str | int | None = None, label: str | None = None) -> Model:
        number = None if version in (None, "latest") or label == "latest" else int(str(version))
        return _entity(registry.get_model(name, number, home=self._home))

    def list(self, name: str | None = None, **kwargs: Any) -> list[Model]:
        return [_entity(m) for m in registry.models(name, home=self._home)]

    def download(self, name: str, version: str | int, download_path: str | Path = ".") -> None:
        """The model's files to ``DOWNLOAD_PATH/NAME``, as v2 downloads them."""
        found = registry.get_model(name, int(version), home=self._home)
        found.download(Path(download_path).expanduser() / name)
