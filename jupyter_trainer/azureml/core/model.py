"""``azureml.core.Model``: a version of the model registry (``jt.get_model``).

``run.register_model`` registers; ``Model(ws, name, version=None)`` finds a version (the
latest without one), ``download`` copies its files. Deployment (``Model.deploy``,
``Model.package``, AKS and ACI web services) has no counterpart and is refused by name, as
is ``Model.register`` of a local path: a model here always comes from a run's outputs, so
its lineage (run, code, params, data) is recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...api import models as registry
from ..errors import NotSupported

DEPLOY_FIX = (
    "serving models is outside jupyter_trainer: download the version "
    "(model.download(DIR)) or export it to ONNX (docs/onnx-and-tensorboard.md), and serve it "
    "with TorchServe, Triton or your own service"
)


class Model:
    def __init__(
        self,
        workspace: Any = None,
        name: str | None = None,
        id: str | None = None,
        tags: Any = None,
        properties: Any = None,
        version: int | None = None,
        run_id: str | None = None,
        model_framework: str | None = None,
        expand: bool = True,
        **kwargs: Any,
    ) -> None:
        if id is not None and name is None:
            name, _, at = id.partition(":")
            version = int(at) if at else version
        if name is None:
            raise ValueError("Model(workspace, name) needs the model's name (or id='NAME:VERSION')")
        home = getattr(workspace, "home", None)
        self._model = registry.get_model(name, version, home=home)
        self.workspace = workspace

    @classmethod
    def _of(cls, workspace: Any, model: registry.Model) -> Model:
        found = cls.__new__(cls)
        found._model = model
        found.workspace = workspace
        return found

    def __repr__(self) -> str:
        return f"Model(workspace={self.workspace!r}, name={self.name}, id={self.id}, version={self.version}, tags={self.tags})"

    @property
    def model(self) -> registry.Model:
        """The registry's version behind this v1 model."""
        return self._model

    @property
    def name(self) -> str:
        return self._model.name

    @property
    def version(self) -> int:
        return self._model.version

    @property
    def id(self) -> str:
        return f"{self.name}:{self.version}"

    @property
    def run_id(self) -> str:
        return self._model.run

    @property
    def tags(self) -> dict[str, str]:
        return {k: str(v) for k, v in self._model.tags.items() if not k.startswith("property.")}

    @property
    def properties(self) -> dict[str, str]:
        return {
            k[len("property.") :]: str(v)
            for k, v in self._model.tags.items()
            if k.startswith("property.")
        }

    @property
    def description(self) -> str | None:
        value = self._model.tags.get("description")
        return None if value is None else str(value)

    @property
    def model_framework(self) -> str | None:
        value = self._model.tags.get("framework")
        return None if value is None else str(value)

    def download(
        self, target_dir: str = ".", exist_ok: bool = False, exists_ok: bool | None = None
    ) -> str:
        """Copy the version's files into ``target_dir``; the path of the model there."""
        folder = Path(target_dir).expanduser()
        written = self._model.download(folder)
        source = Path(str(self._model.lineage.get("source") or ""))
        if len(written) == 1:
            return str(written[0])
        return str(folder / source.name) if source.name else str(folder)

    @staticmethod
    def get_model_path(model_name: str, version: int | None = None, _workspace: Any = None) -> str:
        home = getattr(_workspace, "home", None)
        return str(registry.get_model(model_name, version, home=home).path)

    @staticmethod
    def list(workspace: Any, name: str | None = None, **kwargs: Any) -> list[Model]:
        home = getattr(workspace, "home", None)
        return [Model._of(workspace, m) for m in registry.models(name, home=home)]

    @staticmethod
    def register(workspace: Any, model_path: str, model_name: str, **kwargs: Any) -> Model:
        raise NotSupported(
            "Model.register of a local path",
            "register from the run that wrote it: run.register_model(model_name=..., "
            "model_path='outputs/...'), which records its lineage",
        )

    @staticmethod
    def deploy(*args: Any, **kwargs: Any) -> Any:
        raise NotSupported("Model.deploy", DEPLOY_FIX)

    @staticmethod
    def package(*args: Any, **kwargs: Any) -> Any:
        raise NotSupported("Model.package", DEPLOY_FIX)

    def delete(self) -> None:
        self._model.delete()

    def add_tags(self, tags: dict[str, Any]) -> None:
        raise NotSupported(
            "Model.add_tags",
            "tags are given when the version is registered (register_model(tags=...))",
        )


class InferenceConfig:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupported("InferenceConfig", DEPLOY_FIX)


__all__ = ["InferenceConfig", "Model"]
