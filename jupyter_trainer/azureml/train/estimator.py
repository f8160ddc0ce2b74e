"""``azureml.train.estimator.Estimator``: v1's older way to describe a job, as a run here.

The entry script, ``script_params`` (``{'--lr': 0.01, '--data': ds.as_mount(), '--flag':
''}`` -> ``--lr 0.01 --data <path on the node> --flag``), ``inputs``, the node and process
counts and the distributed backend map as ``ScriptRunConfig``'s do; ``pip_packages``,
``conda_packages`` and the dependency files become the run's environment (see
``core/environment.py``). ``use_gpu``, ``vm_size`` and ``framework_version`` chose Azure's
machines and images: here the target decides the GPUs and the environment the torch.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ..core.conda_dependencies import CondaDependencies
from ..core.dataset import DatasetConsumptionConfig, FileDataset
from ..core.environment import Environment, V1Note
from ..core.runconfig import MpiConfiguration, PyTorchConfiguration
from ..core.script_run_config import launch_of, script_arguments, target_name
from ..errors import NotSupported, UserErrorException


class Mpi:
    """``azureml.train.dnn.Mpi``: Open MPI's mpirun (Horovod scripts run under it)."""

    def __init__(self, process_count_per_node: int = 1) -> None:
        self.process_count_per_node = process_count_per_node


class Gloo:
    """``azureml.train.dnn.Gloo``: torchrun with the gloo backend."""


class Nccl:
    """``azureml.train.dnn.Nccl``: torchrun with the nccl backend."""


class Estimator:
    _framework = "Python"

    def __init__(
        self,
        source_directory: str,
        *,
        compute_target: Any = None,
        vm_size: str | None = None,
        vm_priority: str | None = None,
        entry_script: str | None = None,
        script_params: dict[str, Any] | None = None,
        node_count: int = 1,
        process_count_per_node: int = 1,
        distributed_backend: str | None = None,
        distributed_training: Any = None,
        use_gpu: bool = False,
        use_docker: bool = True,
        custom_docker_base_image: str | None = None,
        custom_docker_image: str | None = None,
        image_registry_details: Any = None,
        user_managed: bool = False,
        conda_packages: list[str] | None = None,
        pip_packages: list[str] | None = None,
        conda_dependencies_file_path: str | None = None,
        pip_requirements_file_path: str | None = None,
        conda_dependencies_file: str | None = None,
        pip_requirements_file: str | None = None,
        environment_variables: dict[str, str] | None = None,
        environment_definition: Environment | None = None,
        inputs: list[Any] | None = None,
        source_directory_data_store: Any = None,
        shm_size: str | None = None,
        resume_from: Any = None,
        max_run_duration_seconds: int | None = None,
        framework_version: str | None = None,
        **kwargs: Any,
    ) -> None:
        if vm_size is not None:
            raise NotSupported(
                f"{type(self).__name__}(vm_size={vm_size!r})",
                "a target's nodes are what it names: pick the compute_target instead",
            )
        if resume_from is not None:
            raise NotSupported(
                f"{type(self).__name__}(resume_from=...)", "use jt.resume(RUN_ID) to resume a run"
            )
        if source_directory_data_store is not None:
            raise NotSupported(
                "source_directory_data_store",
                "the source folder is captured into the run's snapshot",
            )
        self.source_directory = source_directory
        self.compute_target = compute_target
        self.entry_script = entry_script
        self.script_params = dict(script_params or {})
        self.node_count = node_count
        self.process_count_per_node = process_count_per_node
        self.distributed_backend = distributed_backend
        self.distributed_training = distributed_training
        self.inputs = list(inputs or [])
        self.framework_version = framework_version
        self.environment = environment_definition or self._environment(
            user_managed=user_managed,
            conda_packages=conda_packages,
            pip_packages=pip_packages,
            conda_file=conda_dependencies_file or conda_dependencies_file_path,
            pip_file=pip_requirements_file or pip_requirements_file_path,
            variables=environment_variables,
            image=custom_docker_image or custom_docker_base_image,
        )

    def _environment(
        self,
        *,
        user_managed: bool,
        conda_packages: list[str] | None,
        pip_packages: list[str] | None,
        conda_file: str | None,
        pip_file: str | None,
        variables: dict[str, str] | None,
        image: str | None,
    ) -> Environment:
        name = f"{Path(self.entry_script or 'estimator').stem}-env"
        if conda_file:
            path = Path(conda_file)
            if not path.is_absolute():
                path = Path(self.source_directory) / path
            env = Environment.from_conda_specification(name, str(path))
        elif pip_file:
            path = Path(pip_file)
            if not path.is_absolute():
                path = Path(self.source_directory) / path
            env = Environment.from_pip_requirements(name, str(path))
        else:
            env = Environment(name)
            env.python.conda_dependencies = CondaDependencies.create(
                pip_packages=pip_packages, conda_packages=conda_packages
            )
        if conda_file or pip_file:
            for package in conda_packages or []:
                env.python.conda_dependencies.add_conda_package(package)
            for package in pip_packages or []:
                env.python.conda_dependencies.add_pip_package(package)
        env.python.user_managed_dependencies = user_managed
        env.environment_variables = dict(variables or {})
        env.docker.base_image = image
        return env

    def _distribution(self) -> Any:
        config = self.distributed_training
        backend = str(self.distributed_backend or "").lower() or None
        if config is None and backend is not None:
            config = {"mpi": Mpi(), "gloo": Gloo(), "nccl": Nccl()}.get(backend)
            if config is None:
                raise UserErrorException(
                    f"distributed_backend {self.distributed_backend!r}: use 'mpi', 'gloo' or 'nccl'"
                )
        # The estimator's node_count and process_count_per_node say how many; a configuration
        # left at its defaults (MpiConfiguration(), as v1's examples pass it) takes them.
        if isinstance(config, (Mpi, MpiConfiguration)):
            per_node = config.process_count_per_node
            nodes = getattr(config, "node_count", 1)  # Mpi() has no node_count
            return MpiConfiguration(
                process_count_per_node=per_node if per_node != 1 else self.process_count_per_node,
                node_count=nodes if nodes != 1 else self.node_count,
            )
        if isinstance(config, PyTorchConfiguration):
            nodes = config.node_count if config.node_count != 1 else self.node_count
            return PyTorchConfiguration(
                communication_backend=config.communication_backend,
                process_count=config.process_count or nodes * self.process_count_per_node,
                node_count=nodes,
            )
        if isinstance(config, (Gloo, Nccl)):
            return PyTorchConfiguration(
                communication_backend="Gloo" if isinstance(config, Gloo) else "Nccl",
                process_count=self.node_count * self.process_count_per_node,
                node_count=self.node_count,
            )
        if config is None and (self.node_count > 1 or self.process_count_per_node > 1):
            raise UserErrorException(
                f"node_count {self.node_count} and process_count_per_node "
                f"{self.process_count_per_node} need distributed_training= (Mpi(), Gloo(), "
                "Nccl(), MpiConfiguration or PyTorchConfiguration)"
            )
        return config

    def _framework_note(self) -> None:
        if self.framework_version is None:
            return
        try:
            import torch
        except ImportError:
            return
        if not torch.__version__.startswith(str(self.framework_version)):
            warnings.warn(
                f"framework_version {self.framework_version!r} chose an Azure image; this run "
                f"uses the environment's torch ({torch.__version__})",
                V1Note,
                stacklevel=3,
            )

    def submission(self, workspace: Any) -> dict[str, Any]:
        """``jt.submit``'s keywords for this estimator (see the module's docstring)."""
        if not self.entry_script:
            raise UserErrorException(f"{type(self).__name__} needs entry_script=")
        source = Path(self.source_directory).expanduser()
        entry = source / self.entry_script
        if not entry.is_file():
            raise UserErrorException(f"the entry script {self.entry_script!r} is not in {source}")
        self._framework_note()
        flat: list[Any] = []
        for key, value in self.script_params.items():
            flat.append(str(key))
            if value is not None and value != "":
                flat.append(value)
        args, data = script_arguments(flat)
        for extra in self.inputs:
            if isinstance(extra, FileDataset):
                extra = extra.as_mount()
            if not isinstance(extra, DatasetConsumptionConfig):
                raise UserErrorException(f"inputs: {extra!r} is not a dataset")
            _, named = script_arguments([extra])
            for name, source_path in named.items():
                data.setdefault(name, source_path)
        return {
            "script": str(entry),
            "source": str(source),
            "args": args,
            "data": data,
            "target": target_name(self.compute_target),
            **launch_of(self._distribution()),
            "environment": self.environment,
        }


__all__ = ["Estimator", "Gloo", "Mpi", "Nccl"]
