"""``PyTorchDistribution`` and ``MpiDistribution`` (and their dict forms): a job's
launcher here. v2 started ``process_count_per_instance`` processes on each of
``instance_count`` nodes with the rank variables set; torchrun and mpirun do the same."""

from __future__ import annotations

from typing import Any

from ..exceptions import ValidationException, refuse


class PyTorchDistribution:
    type = "pytorch"
    launcher = "torchrun"

    def __init__(self, *, process_count_per_instance: int | None = None, **kwargs: Any) -> None:
        self.process_count_per_instance = process_count_per_instance

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(process_count_per_instance={self.process_count_per_instance})"
        )

    def _to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "process_count_per_instance": self.process_count_per_instance}


class MpiDistribution(PyTorchDistribution):
    type = "mpi"
    launcher = "mpirun"


class TensorFlowDistribution:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise refuse("TensorFlowDistribution", "this project runs PyTorch: use PyTorchDistribution")


class RayDistribution(TensorFlowDistribution):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise refuse(
            "RayDistribution",
            "add a Ray cluster as a target (jupyter-trainer target add NAME --kind ray) and "
            "use PyTorchDistribution on it",
        )


def distribution_of(value: Any) -> PyTorchDistribution | None:
    """A distribution object from a v2 value: an object, its dict form, or None."""
    if value is None or isinstance(value, PyTorchDistribution):
        return value
    if isinstance(value, dict):
        kind = str(value.get("type", "")).lower()
        count = value.get("process_count_per_instance")
        if kind == "pytorch":
            return PyTorchDistribution(process_count_per_instance=count)
        if kind == "mpi":
            return MpiDistribution(process_count_per_instance=count)
        if kind == "tensorflow":
            TensorFlowDistribution()
        if kind == "ray":
            RayDistribution()
        raise ValidationException(
            f"distribution type {value.get('type')!r}: use 'pytorch' or 'mpi' "
            "(with process_count_per_instance)"
        )
    raise ValidationException(
        f"distribution {value!r}: use PyTorchDistribution, MpiDistribution or their dict form "
        '{"type": "pytorch", "process_count_per_instance": 2}'
    )


def launch_of(distribution: Any, instance_count: Any) -> dict[str, Any]:
    """``submit``'s launch keywords for a job's distribution over ``instance_count`` nodes."""
    nodes = _count("instance_count", 1 if instance_count is None else instance_count)
    found = distribution_of(distribution)
    if found is None:
        if nodes != 1:
            raise ValidationException(
                f"instance_count={nodes} needs a distribution (PyTorchDistribution or "
                "MpiDistribution): without one v2 ran one process on one node"
            )
        return {"launcher": "python", "nodes": 1, "procs": 1}
    procs = _count("process_count_per_instance", found.process_count_per_instance or 1)
    return {"launcher": found.launcher, "nodes": nodes, "procs": procs}


def _count(name: str, value: Any) -> int:
    if type(value) is not int or value < 1:
        raise ValidationException(f"{name} must be a whole number of at least 1, got {value!r}")
    return value


__all__ = ["MpiDistribution", "PyTorchDistribution", "TensorFlowDistribution"]
