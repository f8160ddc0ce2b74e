"""``azure.ai.ml.entities``: the v2 entities a training notebook uses; what only the cloud
has (endpoints, deployments, compute provisioning, data assets of tables) is refused by name
when it is made, with what to do instead (``refused.py``)."""

from __future__ import annotations

from typing import Any

from ..command_job import Command, CommandJob, JobResourceConfiguration
from ..command_job import JobResourceConfiguration as ResourceConfiguration
from ..inputs import Input, Output
from ..refused import refused_entity
from ..sweep.job import SweepJob
from .distribution import MpiDistribution, PyTorchDistribution, TensorFlowDistribution
from .environment import BuildContext, Environment
from .model import Model


def __getattr__(name: str) -> Any:
    return refused_entity(name, __name__)


__all__ = [
    "BuildContext",
    "Command",
    "CommandJob",
    "Environment",
    "Input",
    "JobResourceConfiguration",
    "Model",
    "MpiDistribution",
    "Output",
    "PyTorchDistribution",
    "ResourceConfiguration",
    "SweepJob",
    "TensorFlowDistribution",
]
