"""``azureml.train.dnn``: the ``PyTorch`` estimator and its distributed backends."""

from __future__ import annotations

from ..errors import NotSupported
from .estimator import Estimator, Gloo, Mpi, Nccl


class PyTorch(Estimator):
    """v1's PyTorch estimator: an ``Estimator`` whose environment is the kernel's torch."""

    _framework = "PyTorch"


class TensorFlow(Estimator):
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise NotSupported("TensorFlow estimator", "this project runs PyTorch")


class Chainer(TensorFlow):
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise NotSupported("Chainer estimator", "this project runs PyTorch")


__all__ = ["Chainer", "Gloo", "Mpi", "Nccl", "PyTorch", "TensorFlow"]
