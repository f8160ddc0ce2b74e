"""``azure.ai.ml.entities.Environment`` and the environment strings of a v2 job, as v1's
environments are handled here (``jupyter_trainer.azureml.core.environment``):

- a curated name (``AzureML-acpt-pytorch-2.2-cuda12.1@latest``, ``azureml:AzureML-sklearn-1.5:3``,
  ``azureml://registries/azureml/environments/sklearn-1.5/labels/latest``) is the kernel's
  own environment, with a note naming the torch a run will have;
- ``conda_file`` (a path or a mapping) adds its pip and conda packages on top of the
  kernel's packages; Azure's own packages (``azureml-mlflow``, ``azure-ai-ml``) are left out;
- ``image`` is the environment's container image on a target that runs images (Slurm with
  pyxis, Kubernetes); elsewhere the run uses the kernel's Python, with a note;
- ``build`` (a Docker build context) is refused: build and push the image yourself.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import yaml

from .....azureml.core.conda_dependencies import CondaDependencies
from .....azureml.core.environment import Environment as V1Environment
from .....azureml.core.environment import V1Note, curated
from ..exceptions import NotSupported, ValidationException, refuse

# Azure's SDK packages in a v2 conda file: the run's tracking is jupyter_trainer's
AZURE_PACKAGES = re.compile(r"(azureml-[a-z-]+|azure-ai-ml|azure-identity)\b", re.I)
_REGISTRY = re.compile(r"azureml://registries/[^/]+/environments/([^/]+)(/.*)?$", re.I)


class BuildContext:
    def __init__(self, *, path: str | None = None, dockerfile_path: str = "Dockerfile", **kw: Any):
        self.path = path
        self.dockerfile_path = dockerfile_path


class Environment:
    """A v2 environment: an image, a conda file, or both."""

    def __init__(
        self,
        *,
        name: str | None = None,
        version: str | None = None,
        description: str | None = None,
        image: str | None = None,
        build: BuildContext | None = None,
        conda_file: str | dict[str, Any] | None = None,
        tags: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.name = name
        self.version = version
        self.description = description
        self.image = image
        self.build = build
        self.conda_file = conda_file
        self.tags = dict(tags or {})
        self._base = Path(".")  # a YAML job's conda_file is relative to the YAML file

    def __repr__(self) -> str:
        return f"Environment(name={self.name!r}, image={self.image!r})"

    def v1(self) -> V1Environment:
        """The v1 environment this stands for (``definition()`` turns it into one here)."""
        if self.build is not None:
            raise refuse(
                "Environment(build=BuildContext(...))",
                "build and push the image yourself (docker build, docker push), then give "
                "Environment(image=...) on a Slurm (pyxis) or Kubernetes target, or list the "
                "Dockerfile's Python packages in a conda_file",
            )
        name = self.name or "azure-v2-env"
        env = V1Environment(name.split(":", 1)[0].split("@", 1)[0])
        if self.conda_file is not None:
            env.python.conda_dependencies = CondaDependencies(
                _underlying_structure=_without_azure(self._conda(), name)
            )
        elif self.image:
            env.python.user_managed_dependencies = True
        if self.image:
            env.docker.base_image = self.image
        return env

    def _conda(self) -> dict[str, Any]:
        if isinstance(self.conda_file, dict):
            return dict(self.conda_file)
        path = Path(str(self.conda_file)).expanduser()
        path = path if path.is_absolute() else self._base / path
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ValidationException(
                f"the environment's conda_file {path}: {exc.strerror or exc}"
            ) from None
        except yaml.YAMLError as exc:
            raise ValidationException(f"conda_file {path} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ValidationException(
                f"conda_file {path}: a mapping with name, channels, dependencies"
            )
        return data


def _without_azure(data: dict[str, Any], name: str) -> dict[str, Any]:
    """The conda mapping without Azure's SDK packages, with a note naming them."""
    dropped: list[str] = []
    deps: list[Any] = []
    for item in data.get("dependencies") or []:
        if isinstance(item, dict) and isinstance(item.get("pip"), list):
            kept = [p for p in item["pip"] if not AZURE_PACKAGES.match(str(p).strip())]
            dropped += [str(p) for p in item["pip"] if p not in kept]
            deps.append({**item, "pip": kept})
        else:
            deps.append(item)
    if dropped:
        warnings.warn(
            f"environment {name!r} leaves out Azure's packages {', '.join(dropped)}: a run "
            "here records its metrics itself (mlflow.log_* calls included)",
            V1Note,
            stacklevel=4,
        )
    return {**data, "dependencies": deps}


def curated_name(text: str) -> str | None:
    """The curated environment's bare name a v2 environment string names, if it does."""
    found = _REGISTRY.match(text)
    if found:
        return found.group(1)
    bare = text.split(":", 1)[1] if text.lower().startswith("azureml:") else text
    bare = bare.split("@", 1)[0].split(":", 1)[0]
    return bare if bare.lower().startswith("azureml-") else None


def environment_of(value: Any, registered: dict[str, Environment]) -> V1Environment | None:
    """The v1 environment of a job's ``environment``: None for the kernel's own."""
    if value is None:
        return None
    if isinstance(value, Environment):
        return value.v1()
    if isinstance(value, dict):
        return Environment(**value).v1()
    if not isinstance(value, str):
        raise ValidationException(
            f"environment {value!r}: give an Environment, a curated name or a registered name"
        )
    key = value.split(":", 1)[1] if value.lower().startswith("azureml:") else value
    key = key.split("@", 1)[0].split(":", 1)[0]
    if key in registered:
        return registered[key].v1()
    bare = curated_name(value)
    if bare is None and _REGISTRY.match(value) is None:
        raise ValidationException(
            f"environment {value!r} is neither a curated environment (AzureML-...) nor one "
            "registered with ml_client.environments.create_or_update: give "
            "Environment(image=..., conda_file=...) or a curated name"
        )
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always", V1Note)
        try:
            env = curated(bare or value)
        except NotSupported:
            raise refuse(
                f"the curated environment {value!r}",
                "this project runs PyTorch: use a PyTorch curated name "
                "(AzureML-acpt-pytorch-2.2-cuda12.1@latest) or Environment(image=..., "
                "conda_file=...) listing the packages",
            ) from None
    for note in notes:  # v1's fix, in v2's words
        text = str(note.message).replace(
            "Environment.from_pip_requirements or CondaDependencies.create(pip_packages=[...])",
            "Environment(conda_file=...) listing the packages",
        )
        warnings.warn(text, V1Note, stacklevel=4)
    return env


__all__ = ["BuildContext", "Environment"]
