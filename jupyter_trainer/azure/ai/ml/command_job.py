"""``azure.ai.ml.command()``: a v2 command job (``CommandJob``). Calling it with search
space values (``job(lr=Uniform(0.01, 0.1))``) gives the job a sweep takes, and
``job.sweep(...)`` makes that sweep (``sweep/job.py``). ``ml_client.jobs.create_or_update``
runs it (``submission.py``)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .exceptions import ValidationException


class JobResourceConfiguration:
    def __init__(self, *, instance_count: int | None = None, **kwargs: Any) -> None:
        self.instance_count = instance_count
        self.instance_type = kwargs.get("instance_type")
        self.shm_size = kwargs.get("shm_size")


class CommandJob:
    type = "command"

    def __init__(
        self,
        *,
        command: str | None = None,
        code: str | None = None,
        inputs: dict[str, Any] | None = None,
        outputs: dict[str, Any] | None = None,
        environment: Any = None,
        compute: str | None = None,
        instance_count: int | None = None,
        distribution: Any = None,
        environment_variables: dict[str, Any] | None = None,
        resources: Any = None,
        name: str | None = None,
        display_name: str | None = None,
        experiment_name: str | None = None,
        description: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(command, str) or not command.strip():
            raise ValidationException("a command job needs command= (the command line it runs)")
        self.command = command
        self.code = code
        self.inputs = dict(inputs or {})
        self.outputs = dict(outputs or {})
        self.environment = environment
        self.compute = compute
        if isinstance(resources, dict):
            resources = JobResourceConfiguration(**resources)
        self.resources = resources or JobResourceConfiguration(instance_count=instance_count)
        if instance_count is not None:
            self.resources.instance_count = instance_count
        self.distribution = distribution
        self.environment_variables = {
            str(k): str(v) for k, v in (environment_variables or {}).items()
        }
        self.name = name
        self.display_name = display_name
        self.experiment_name = experiment_name
        self.description = description
        self.tags = dict(tags or {})
        self.services = kwargs.get("services")
        self._base = Path(".")  # a YAML job's paths are relative to the YAML file

    def __repr__(self) -> str:
        return f"CommandJob(command={self.command!r}, compute={self.compute!r})"

    @property
    def instance_count(self) -> int | None:
        return self.resources.instance_count

    def __call__(self, **inputs: Any) -> CommandJob:
        """A copy with these inputs (search space expressions, for a sweep) replacing its own."""
        unknown = sorted(set(inputs) - set(self.inputs))
        if unknown:
            raise ValidationException(
                f"the job has no inputs {unknown} (its inputs: {sorted(self.inputs) or 'none'})"
            )
        copied = copy.copy(self)
        copied.inputs = {**self.inputs, **inputs}
        return copied

    def sweep(self, **kwargs: Any) -> Any:
        """The sweep of this job over its search space inputs (``SweepJob``)."""
        from .sweep.job import SweepJob

        return SweepJob(trial=self, **kwargs)

    def set_resources(self, *, instance_count: int | None = None, **kwargs: Any) -> None:
        self.resources.instance_count = instance_count


Command = CommandJob


def command(**kwargs: Any) -> CommandJob:
    """``azure.ai.ml.command``: a command job (see ``CommandJob``)."""
    return CommandJob(**kwargs)


__all__ = ["Command", "CommandJob", "JobResourceConfiguration", "command"]
