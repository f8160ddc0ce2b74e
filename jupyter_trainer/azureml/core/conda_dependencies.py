"""``azureml.core.conda_dependencies.CondaDependencies``: a v1 conda specification, read
and written as v1 did, and turned into what an environment here installs: a Python version
and PyPI requirements (``pip_requirements``).

A conda package becomes its PyPI project: the common conda names are renamed
(``pytorch`` -> ``torch``, ``py-opencv`` -> ``opencv-python``...), a conda version
(``numpy=1.21``, ``numpy=1.21=py38h1234``) becomes a pip one (``numpy==1.21.*``), a channel
prefix (``pytorch::pytorch``) is dropped. CUDA's runtime packages are left out, because the
PyPI wheels of torch carry their own CUDA libraries; Azure ML's own SDK packages are left out,
because a run's ``azureml`` is jupyter_trainer's. A package only conda provides is refused,
naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from ..errors import NotSupported

# conda name -> PyPI project, where they differ
CONDA_TO_PYPI = {
    "pytorch": "torch",
    "pytorch-cpu": "torch",
    "pytorch-gpu": "torch",
    "py-opencv": "opencv-python",
    "opencv": "opencv-python",
    "pytorch-lightning": "pytorch-lightning",
    "tensorboard": "tensorboard",
    "pillow": "pillow",
    "scikit-learn": "scikit-learn",
    "sklearn": "scikit-learn",
    "matplotlib-base": "matplotlib",
    "pyyaml": "pyyaml",
    "tables": "tables",
    "pytables": "tables",
    "py-xgboost": "xgboost",
    "lightgbm": "lightgbm",
    "msgpack-python": "msgpack",
    "protobuf": "protobuf",
    "libprotobuf": "protobuf",
    "typing_extensions": "typing-extensions",
    "importlib_metadata": "importlib-metadata",
    "ipykernel": "ipykernel",
    "pydot": "pydot",
}
# Left out with a note: the torch wheels carry CUDA, the build tools are the environment's.
CUDA_RUNTIME = re.compile(r"(cudatoolkit(-dev)?|cudnn|nccl|cuda(-[a-z-]+)?|magma-cuda\d+|cupti)")
TOOLING = {"pip", "setuptools", "wheel", "conda", "python_abi"}
# Azure ML's SDK packages: a run's ``azureml`` is jupyter_trainer's (rankside/azureml_v1).
AZUREML_SDK = re.compile(
    r"azureml-(defaults|core|sdk|train|train-core|train-restclients-hyperdrive|"
    r"dataset-runtime|telemetry|pipeline|widgets|dataprep)(\[.*\])?"
)
# conda-only packages: native libraries and conda's own metapackages
CONDA_ONLY = re.compile(
    r"(_libgcc_mutex|_openmp_mutex|libgcc(-ng)?|libstdcxx(-ng)?|libgfortran(-ng|\d)?|"
    r"libgomp|ld_impl_linux-64|ca-certificates|openssl|certifi-conda|blas|libblas|libcblas|"
    r"liblapack|mkl-service|mkl_fft|mkl_random|intel-openmp|cudatoolkit-dev|libffi|ncurses|"
    r"readline|sqlite|tk|xz|zlib|libuuid|libxcb|libpng|jpeg|libtiff|ffmpeg|gxx_linux-64|"
    r"gcc_linux-64|cmake|make|git|nodejs|r-base|r-[a-z0-9.]+|openmpi|mpich|mpi|hdf5|"
    r"libjpeg-turbo|openblas|libopenblas|glib|libiconv|libxml2|icu|freetype|libwebp|lz4-c|"
    r"zstd|bzip2|libzlib|libsodium|yaml|libuv|libprotobuf|cudatoolkit-dev)"
)
# conda's switches between torch builds: on PyPI the index a wheel comes from chooses it
TORCH_VARIANT = re.compile(r"(cpuonly|pytorch-cuda|pytorch-mutex|pytorch-gpu|pytorch-cpu)")
_CONDA_SPEC = re.compile(
    r"(?:(?P<channel>[A-Za-z0-9_.-]+)::)?(?P<name>[A-Za-z0-9_.-]+)\s*"
    r"(?P<version>(?:==|>=|<=|!=|>|<|=)?[^=\s]*)?(?:=(?P<build>\S+))?\s*$"
)


class CondaDependencies:
    """v1's conda specification of an environment: a Python version, conda packages and a
    ``pip:`` section (``CondaDependencies.create(pip_packages=[...])`` or a YAML file)."""

    def __init__(
        self,
        conda_dependencies_file_path: str | None = None,
        _underlying_structure: dict[str, Any] | None = None,
    ) -> None:
        data: dict[str, Any] = {}
        if conda_dependencies_file_path is not None:
            path = Path(conda_dependencies_file_path).expanduser()
            try:
                data = yaml.safe_load(path.read_text()) or {}
            except OSError as exc:
                raise FileNotFoundError(
                    f"conda specification {path}: {exc.strerror or exc}"
                ) from None
            except yaml.YAMLError as exc:
                raise ValueError(f"conda specification {path} is not valid YAML: {exc}") from None
        elif _underlying_structure is not None:
            data = dict(_underlying_structure)
        if not isinstance(data, dict):
            raise ValueError("a conda specification is a mapping with name, channels, dependencies")
        self.name: str | None = data.get("name")
        self.channels: list[str] = [str(c) for c in data.get("channels") or []]
        self._conda: list[str] = []
        self._pip: list[str] = []
        self._python: str | None = None
        for item in data.get("dependencies") or []:
            if isinstance(item, dict) and "pip" in item:
                self._pip.extend(str(p) for p in item["pip"] or [])
            elif isinstance(item, str):
                self.add_conda_package(item)
            else:
                raise ValueError(f"conda specification: cannot read the dependency {item!r}")

    @staticmethod
    def create(
        pip_packages: Iterable[str] | None = None,
        conda_packages: Iterable[str] | None = None,
        python_version: str | None = None,
        pin_sdk_version: bool = True,
        pip_indexurl: str | None = None,
    ) -> CondaDependencies:
        deps = CondaDependencies()
        if python_version:
            deps.set_python_version(python_version)
        for package in conda_packages or []:
            deps.add_conda_package(package)
        for package in pip_packages or []:
            deps.add_pip_package(package)
        return deps

    @staticmethod
    def merge_requirements(requirements: Iterable[str]) -> list[str]:
        return list(dict.fromkeys(requirements))

    # -- v1's accessors ----------------------------------------------------------------
    @property
    def conda_packages(self) -> list[str]:
        return list(self._conda)

    @property
    def pip_packages(self) -> list[str]:
        return list(self._pip)

    @property
    def python_version(self) -> str | None:
        return self._python

    def set_python_version(self, version: str) -> None:
        self._python = str(version).strip()

    def add_conda_package(self, conda_package: str) -> None:
        text = str(conda_package).strip()
        match = _CONDA_SPEC.fullmatch(text)
        if match and match.group("name") == "python":
            version = (match.group("version") or "").lstrip("=<>!")
            self._python = version or None
            return
        if text not in self._conda:
            self._conda.append(text)

    def add_pip_package(self, pip_package: str) -> None:
        if pip_package not in self._pip:
            self._pip.append(str(pip_package))

    def remove_pip_package(self, pip_package: str) -> None:
        self._pip = [p for p in self._pip if _project(p) != _project(pip_package)]

    def remove_conda_package(self, conda_package: str) -> None:
        self._conda = [p for p in self._conda if _conda_name(p) != _conda_name(conda_package)]

    def add_channel(self, channel: str) -> None:
        if channel not in self.channels:
            self.channels.append(channel)

    def get_default_number_of_packages(self) -> int:
        return 0

    def as_dict(self) -> dict[str, Any]:
        deps: list[Any] = [f"python={self._python}"] if self._python else []
        deps += self._conda
        if self._pip:
            deps.append({"pip": list(self._pip)})
        return {
            "name": self.name or "project_environment",
            "channels": self.channels,
            "dependencies": deps,
        }

    def serialize_to_string(self) -> str:
        return yaml.safe_dump(self.as_dict(), sort_keys=False)

    def save(self, path: str | None = None) -> str:
        target = Path(path or "conda_dependencies.yml").expanduser()
        target.write_text(self.serialize_to_string())
        return str(target)

    save_to_file = save

    # -- what an environment here installs ---------------------------------------------
    def pip_requirements(self) -> tuple[list[str], list[str]]:
        """PyPI requirements for every package, and notes on what was left out. Raises
        ``NotSupported`` naming each package only conda provides."""
        requirements: list[str] = []
        notes: list[str] = []
        conda_only: list[str] = []
        for text in self._conda:
            match = _CONDA_SPEC.fullmatch(text)
            if match is None:
                raise ValueError(f"conda package {text!r} is not NAME[=VERSION[=BUILD]]")
            name = match.group("name").lower()
            if name in TOOLING:
                continue
            if CUDA_RUNTIME.fullmatch(name):
                notes.append(f"{text} (the PyPI torch wheels carry their own CUDA libraries)")
                continue
            if TORCH_VARIANT.fullmatch(name):
                notes.append(
                    f"{text} (conda's switch between torch builds: the environment's torch "
                    "wheel decides, CUDA or CPU)"
                )
                continue
            if CONDA_ONLY.fullmatch(name):
                conda_only.append(text)
                continue
            requirements.append(
                CONDA_TO_PYPI.get(name, name) + _pip_version(match.group("version"))
            )
        if conda_only:
            raise NotSupported(
                "the conda package" + "s" * (len(conda_only) > 1) + " " + ", ".join(conda_only),
                "only conda provides "
                + ("them" if len(conda_only) > 1 else "it")
                + ", and environments here are built from PyPI with uv: drop "
                + ("them" if len(conda_only) > 1 else "it")
                + " from the specification, or name a PyPI package that provides the same, "
                "or run on a target whose container image has it (env.docker.base_image on "
                "Slurm with pyxis or Kubernetes)",
            )
        for text in self._pip:
            if AZUREML_SDK.fullmatch(_project(text)):
                notes.append(f"{text} (inside a run, azureml.core is jupyter_trainer's)")
                continue
            if text.startswith("-"):
                raise NotSupported(
                    f"the pip option {text!r} in a conda specification",
                    "list packages only; set an index with UV_INDEX_URL in the target's env",
                )
            requirements.append(text)
        return requirements, notes


def _pip_version(version: str | None) -> str:
    """A conda version constraint as pip writes it: ``=1.21`` -> ``==1.21.*``."""
    if not version:
        return ""
    if version.startswith("=") and not version.startswith("=="):
        version = version[1:]
    if version[0] in "<>!=":
        return version
    if version.endswith("*"):
        return f"=={version}"
    return f"=={version}.*" if version.count(".") < 2 else f"=={version}"


def _project(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _conda_name(text: str) -> str:
    match = _CONDA_SPEC.fullmatch(text.strip())
    return match.group("name").lower() if match else text.strip().lower()
