"""``azureml.core.runconfig``: how a v1 job ran, mapped onto a launcher here.

- ``PyTorchConfiguration(process_count, node_count, communication_backend)``: torchrun, with
  the backend named (``Nccl`` -> nccl, ``Gloo`` -> gloo; left out, the target's: NCCL on
  GPUs, Gloo on CPU, as the script's own ``init_process_group`` chose in v1) and
  ``process_count`` split evenly over the nodes;
- ``MpiConfiguration(process_count_per_node, node_count)``: Open MPI's ``mpirun``, under
  which a Horovod script runs as it did on v1;
- ``TensorflowConfiguration``: refused (this project trains PyTorch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import NotSupported, UserErrorException


class _Unset(str):
    """v1's default backend, told apart from the same name given on purpose."""


_NCCL_BY_DEFAULT = _Unset("Nccl")


class PyTorchConfiguration:
    def __init__(
        self,
        communication_backend: str = _NCCL_BY_DEFAULT,
        process_count: int | None = None,
        node_count: int = 1,
    ) -> None:
        self.communication_backend = communication_backend
        self.process_count = process_count
        self.node_count = node_count

    def launch(self) -> dict[str, Any]:
        # v1 named Nccl by default, and the script chose its backend in
        # init_process_group: left unset, the target decides (NCCL on GPUs, Gloo on CPU)
        unset = self.communication_backend is _NCCL_BY_DEFAULT
        backend = None if unset else str(self.communication_backend or "").lower() or None
        if backend not in (None, "nccl", "gloo"):
            raise UserErrorException(
                f"communication_backend {self.communication_backend!r}: use 'Nccl' or 'Gloo'"
            )
        nodes = _count("node_count", self.node_count)
        total = _count("process_count", self.process_count or nodes)
        if total % nodes:
            raise UserErrorException(
                f"process_count {total} does not split evenly over node_count {nodes}: "
                "v1 started the same number of processes on every node"
            )
        return {"launcher": "torchrun", "backend": backend, "nodes": nodes, "procs": total // nodes}


class MpiConfiguration:
    def __init__(self, process_count_per_node: int = 1, node_count: int = 1) -> None:
        self.process_count_per_node = process_count_per_node
        self.node_count = node_count

    def launch(self) -> dict[str, Any]:
        return {
            "launcher": "mpirun",
            "nodes": _count("node_count", self.node_count),
            "procs": _count("process_count_per_node", self.process_count_per_node),
        }


class TensorflowConfiguration:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupported(
            "TensorflowConfiguration", "this project runs PyTorch: use PyTorchConfiguration"
        )


class ParallelTaskConfiguration(TensorflowConfiguration):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupported(
            "ParallelTaskConfiguration",
            "use MpiConfiguration or PyTorchConfiguration, or a sweep for independent tasks",
        )


@dataclass
class DockerConfiguration:
    use_docker: bool = False
    shm_size: str | None = None
    arguments: list[str] = field(default_factory=list)


class RunConfiguration:
    """v1's run configuration: the fields a ScriptRunConfig reads from it."""

    def __init__(
        self,
        script: str | None = None,
        arguments: list[Any] | None = None,
        framework: str | None = None,
        communicator: str | None = None,
        conda_dependencies: Any = None,
        **kwargs: Any,
    ) -> None:
        from .environment import Environment

        self.script = script
        self.arguments = list(arguments or [])
        self.framework = framework or "Python"
        self.communicator = communicator or "None"
        self.target: Any = "local"
        self.node_count = 1
        self.environment = Environment("default-environment")
        if conda_dependencies is not None:
            self.environment.python.conda_dependencies = conda_dependencies
        self.environment_variables: dict[str, str] = {}
        self.mpi = MpiConfiguration()
        self.pytorch = PyTorchConfiguration()
        self.docker = DockerConfiguration()
        self.data: dict[str, Any] = {}
        self.max_run_duration_seconds: int | None = None


def _count(name: str, value: Any) -> int:
    if type(value) is not int or value < 1:
        raise UserErrorException(f"{name} must be a whole number of at least 1, got {value!r}")
    return value


__all__ = [
    "DockerConfiguration",
    "MpiConfiguration",
    "PyTorchConfiguration",
    "RunConfiguration",
    "TensorflowConfiguration",
]
