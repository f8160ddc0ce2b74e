"""The errors of the v1 names: what cannot map, and v1's own exception names."""

from __future__ import annotations

from ..api.runs import RunFailed
from ..core.errors import TrainerError

ADD_TARGET = (
    "add a target to targets.toml instead: jupyter-trainer target add NAME --kind slurm "
    "(or ssh, kubernetes, ray) KEY=VALUE ..., then use ComputeTarget(ws, 'NAME')"
)


class NotSupported(TrainerError):
    """A v1 call that has no counterpart here: the message names it and what to do."""

    def __init__(self, call: str, fix: str) -> None:
        super().__init__(f"{call} is not supported by jupyter_trainer: {fix}")
        self.call = call


class ComputeTargetException(TrainerError, LookupError):
    """v1's error for a compute target that does not exist (``azureml.core.compute_target``)."""


class UserErrorException(TrainerError, ValueError):
    """v1's error for a bad argument."""


class ActivityFailedException(RunFailed):
    """v1's error from ``wait_for_completion`` for a run that failed."""


def refuse(call: str, fix: str) -> NotSupported:
    return NotSupported(call, fix)
