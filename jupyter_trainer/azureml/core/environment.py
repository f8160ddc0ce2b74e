"""``azureml.core.Environment``: a v1 environment, defined here as a named environment
(``%environment``) when a run uses it.

v1 built an environment on a base image that already had Python and, for the GPU images,
torch. The counterpart here is the kernel's own packages: an environment with packages is
built on top of them (``inherit: true``), so a specification listing only what the training
script adds does not download torch again. When the specification names another Python
version than the kernel's, the environment is built on its own with that version instead.
``python.user_managed_dependencies = True`` (v1's "use the image as it is") runs in the
kernel's environment. ``docker.base_image`` becomes the environment's container image, which
the Slurm (pyxis) and Kubernetes targets run and the others refuse.
"""

from __future__ import annotations

import copy
import re
import sys
import warnings
from pathlib import Path
from typing import Any

from ...core.errors import EnvError
from ...environment.definition import EnvDefinition, validate_name
from ..errors import NotSupported, UserErrorException
from .conda_dependencies import CondaDependencies

# v1's curated environments (AzureML-PyTorch-1.6-GPU, AzureML-ACPT-pytorch-..., AzureML-Minimal,
# ...) were images in Azure's registry. Their counterpart here is the kernel's own environment,
# torch included: Environment.get gives one that stands for it, with a V1Note naming the
# torch a run will have. The TensorFlow ones are refused: this project runs PyTorch.
CURATED_PREFIXES = ("azureml-", "azureml:azureml-")  # matched in any case, as Azure did
CURATED_REFUSED = re.compile(r"tensorflow|(^|[-_])tf[-_\d]", re.I)
CURATED_FIX = (
    "this project runs PyTorch: use a PyTorch curated name, or "
    "Environment.from_pip_requirements / CondaDependencies.create(pip_packages=[...])"
)


def curated(name: str) -> Environment:
    """The kernel's own environment, standing for the curated environment ``name``."""
    bare = name.split(":", 1)[-1]
    if CURATED_REFUSED.search(bare):
        raise NotSupported(f"the curated environment {name!r}", CURATED_FIX)
    try:
        import torch

        have = f"torch {torch.__version__}"
    except ImportError:
        have = "no torch"
    wanted = re.search(r"pytorch-(\d+\.\d+)", bare, re.I)
    differs = (
        f", not the {wanted.group(1)} it names"
        if wanted and not have.startswith(f"torch {wanted.group(1)}")
        else ""
    )
    warnings.warn(
        f"the curated environment {name!r} is an image of Azure's: runs here use the kernel's "
        f"own environment, with {have}{differs}. Add what the script needs with "
        "Environment.from_pip_requirements or CondaDependencies.create(pip_packages=[...])",
        V1Note,
        stacklevel=3,
    )
    env = Environment(bare)
    env._curated = True
    return env


class V1Note(UserWarning):
    """What a v1 name does differently here (a package left out, a setting not used)."""


class PythonSection:
    def __init__(self) -> None:
        self.conda_dependencies = CondaDependencies()
        self.user_managed_dependencies = False
        self.interpreter_path = "python"
        self.conda_dependencies_file: str | None = None


class DockerSection:
    def __init__(self) -> None:
        self.base_image: str | None = None
        self.base_dockerfile: str | None = None
        self.enabled = False
        self.shm_size: str | None = None
        self.arguments: list[str] = []
        self.base_image_registry: Any = None


class Environment:
    """A v1 environment: a name, Python packages, environment variables, an image."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        self.version: str | None = None
        self.python = PythonSection()
        self.docker = DockerSection()
        self.environment_variables: dict[str, str] = {}
        self.inferencing_stack_version: str | None = None
        self.spark: Any = None
        self.r: Any = None
        self._curated = False  # stands for a curated environment (see ``curated``)

    def __repr__(self) -> str:
        return f"Environment(name={self.name!r})"

    def clone(self, new_name: str) -> Environment:
        """A copy under ``new_name``, to add packages to (a curated one's copy adds them on
        top of the kernel's environment)."""
        copied = copy.deepcopy(self)
        copied.name = new_name
        copied._curated = False
        return copied

    # -- v1's constructors -------------------------------------------------------------
    @staticmethod
    def from_pip_requirements(
        name: str, file_path: str, pip_version: str | None = None
    ) -> Environment:
        path = Path(file_path).expanduser()
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise FileNotFoundError(f"requirements file {path}: {exc.strerror or exc}") from None
        env = Environment(name)
        for line in lines:
            text = line.split("#", 1)[0].strip()
            if text:
                env.python.conda_dependencies.add_pip_package(text)
        return env

    @staticmethod
    def from_conda_specification(name: str, file_path: str) -> Environment:
        env = Environment(name)
        env.python.conda_dependencies = CondaDependencies(conda_dependencies_file_path=file_path)
        return env

    @staticmethod
    def from_docker_image(
        name: str,
        image: str,
        container_registry: Any = None,
        conda_specification: str | None = None,
        pip_requirements: str | None = None,
    ) -> Environment:
        if conda_specification:
            env = Environment.from_conda_specification(name, conda_specification)
        elif pip_requirements:
            env = Environment.from_pip_requirements(name, pip_requirements)
        else:
            env = Environment(name)
            env.python.user_managed_dependencies = True
        env.docker.base_image = image
        return env

    @staticmethod
    def from_existing_conda_environment(name: str, conda_environment_name: str) -> Environment:
        raise NotSupported(
            "Environment.from_existing_conda_environment",
            "export its packages (conda env export --from-history, or pip freeze) and use "
            "Environment.from_conda_specification or from_pip_requirements",
        )

    @staticmethod
    def from_dockerfile(name: str, dockerfile: str, **kwargs: Any) -> Environment:
        raise NotSupported(
            "Environment.from_dockerfile",
            "build and push the image yourself, then use Environment.from_docker_image(NAME, "
            "IMAGE) on a Slurm (pyxis) or Kubernetes target",
        )

    @staticmethod
    def get(
        workspace: Any, name: str, version: str | None = None, label: str | None = None
    ) -> Environment:
        registered = getattr(workspace, "_environments", {}).get(name)
        if registered is None and name.lower().startswith(CURATED_PREFIXES):
            return curated(name)
        if registered is None:
            raise EnvError(
                f"no environment {name!r} is registered in this workspace; register it with "
                "env.register(ws) first, or build one with Environment.from_pip_requirements"
            )
        return registered

    @staticmethod
    def list(workspace: Any) -> dict[str, Environment]:
        return dict(getattr(workspace, "_environments", {}))

    def register(self, workspace: Any) -> Environment:
        """Define it now, so a bad requirement fails here, and keep it by name."""
        self.definition(home=getattr(workspace, "home", None))
        environments = getattr(workspace, "_environments", None)
        if environments is not None:
            environments[self.name] = self
        return self

    def build_local(self, workspace: Any, platform: str | None = None, **kwargs: Any) -> None:
        from ...environment.manage import build_environment, define

        definition = self.definition(home=getattr(workspace, "home", None))
        if definition is not None:
            home = getattr(workspace, "home", None)
            define(definition, home=home)
            build_environment(definition.name, home=home)

    def get_image_details(self, workspace: Any) -> dict[str, Any]:
        return {"dockerImage": {"name": self.docker.base_image}}

    def save_to_directory(self, path: str, overwrite: bool = False) -> None:
        folder = Path(path).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        self.python.conda_dependencies.save(str(folder / "conda_dependencies.yml"))

    # -- what a run here uses ----------------------------------------------------------
    def definition(self, home: Path | None = None) -> EnvDefinition | None:
        """The environment definition this v1 environment stands for, or None for the
        kernel's own environment (user-managed dependencies, or nothing to add)."""
        if self.name.lower().startswith(CURATED_PREFIXES) and not self._curated:
            raise NotSupported(
                f"an environment named like a curated one ({self.name!r})",
                "use Environment.get(ws, NAME) for a curated environment, or another name",
            )
        deps = self.python.conda_dependencies
        requirements, notes = deps.pip_requirements()
        if self.python.user_managed_dependencies and (requirements or deps.python_version):
            notes.append(
                "the packages listed (python.user_managed_dependencies is True: the run "
                "uses the kernel's environment as it is)"
            )
            requirements = []
        if notes:
            warnings.warn(
                f"environment {self.name!r} leaves out: " + "; ".join(notes), V1Note, stacklevel=3
            )
        python = deps.python_version if not self.python.user_managed_dependencies else None
        _check_python(self.name, python)
        kernel = f"{sys.version_info.major}.{sys.version_info.minor}"
        same_python = python is None or python == kernel or python.startswith(kernel + ".")
        if not requirements and not self.environment_variables and not self.docker.base_image:
            if same_python:
                return None
        data: dict[str, Any] = {"inherit": same_python}
        if not same_python and python is not None:
            data["python"] = python
        if requirements:
            data["pip"] = requirements
        if self.environment_variables:
            data["env"] = {str(k): str(v) for k, v in self.environment_variables.items()}
        if self.docker.base_image:
            data["image"] = self.docker.base_image
        return EnvDefinition.from_mapping(env_name(self.name), data, None)


# The oldest Python that PyTorch 2 publishes wheels for: an environment asking for an older
# one (v1's conda files often say python=3.6) could never hold the torch a run needs
OLDEST_PYTHON = (3, 9)


def _check_python(name: str, python: str | None) -> None:
    """Refuse, when the environment is defined, a Python too old for any PyTorch 2, in v1's
    words: the file's ``python=`` line is what to change."""
    found = re.match(r"(\d+)\.(\d+)", python or "")
    if found is None or (int(found.group(1)), int(found.group(2))) >= OLDEST_PYTHON:
        return
    kernel = f"{sys.version_info.major}.{sys.version_info.minor}"
    raise UserErrorException(
        f"environment {name!r} asks for Python {python} (its conda dependencies' python= "
        f"line), older than any Python PyTorch 2 runs on ({OLDEST_PYTHON[0]}.{OLDEST_PYTHON[1]}"
        f" or later): change it to python={kernel}, this kernel's, or remove the line to use "
        "the kernel's Python"
    )


def env_name(name: str) -> str:
    """The name of the environment here: v1's name where it is a valid one."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in name).strip("-._")
    cleaned = cleaned[:64] or "azureml-env"
    validate_name(cleaned)
    return cleaned
