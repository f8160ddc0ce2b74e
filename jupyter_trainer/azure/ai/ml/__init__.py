"""``azure.ai.ml`` (Azure ML SDK v2), mapped onto jupyter_trainer (docs/azure-v2.md).

A v2 notebook changes only its import lines (``from azure.ai.ml import MLClient, command,
Input, Output`` becomes ``from jupyter_trainer.azure.ai.ml import ...``, and likewise for
``azure.ai.ml.entities``, ``azure.ai.ml.sweep``, ``azure.ai.ml.constants`` and
``azure.identity``) and its compute name (a target of ``targets.toml``, or ``local``):

- ``MLClient`` is the run store; ``jobs.create_or_update`` starts a command job as a run and
  a sweep job as a sweep (Optuna); ``models.create_or_update`` registers a job's output;
- ``command()``'s ``distribution`` is the launcher (torchrun, mpirun), its ``environment``
  an environment here (curated names, conda files, images as v1's are handled), its
  ``Input``/``Output`` data inputs and output folders of the run;
- pipelines (``dsl``), endpoints, AutoML and MLTable are refused by name when used, with what
  to do instead; ``jupyter-trainer azure check PATH`` lists every such call beforehand.
"""

from __future__ import annotations

from typing import Any

from . import automl, dsl
from .client import MLClient
from .command_job import command
from .entities.distribution import MpiDistribution, PyTorchDistribution, TensorFlowDistribution
from .inputs import Input, Output
from .yaml_job import load_job


class UserIdentityConfiguration:
    """A job's identity: accepted and unused, as every run here is the user's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class ManagedIdentityConfiguration(UserIdentityConfiguration):
    """A job's identity: accepted and unused."""


class AmlTokenConfiguration(UserIdentityConfiguration):
    """A job's identity: accepted and unused."""


def load_environment(source: str, **kwargs: Any) -> Any:
    """An environment YAML file (image, conda_file) as an ``Environment``."""
    from pathlib import Path

    from .entities.environment import Environment
    from .yaml_job import read_job_file

    data = {k: v for k, v in read_job_file(source).items() if k != "$schema"}
    env = Environment(**data)
    env._base = Path(source).expanduser().resolve().parent
    return env


__all__ = [
    "AmlTokenConfiguration",
    "Input",
    "MLClient",
    "ManagedIdentityConfiguration",
    "MpiDistribution",
    "Output",
    "PyTorchDistribution",
    "TensorFlowDistribution",
    "UserIdentityConfiguration",
    "automl",
    "command",
    "dsl",
    "load_environment",
    "load_job",
]
