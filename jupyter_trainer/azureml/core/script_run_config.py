"""``azureml.core.ScriptRunConfig``: a v1 job, as the options of ``jt.submit``.

``submission()`` turns it into ``submit``'s keywords: the script under ``source_directory``
and its arguments (a dataset in them becomes ``${{data.NAME}}``, the path of that data input
on each node), the compute target's name, the launcher of its distributed configuration, and
the environment (defined here when the run is submitted). Whatever cannot map is refused
here, before anything is created.
"""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

from ..errors import NotSupported, UserErrorException
from .dataset import DatasetConsumptionConfig, FileDataset
from .environment import Environment
from .runconfig import MpiConfiguration, PyTorchConfiguration, RunConfiguration


class ScriptRunConfig:
    def __init__(
        self,
        source_directory: str,
        script: str | None = None,
        arguments: list[Any] | None = None,
        run_config: RunConfiguration | None = None,
        _telemetry_values: Any = None,
        compute_target: Any = None,
        environment: Environment | None = None,
        distributed_job_config: Any = None,
        resume_from: Any = None,
        max_run_duration_seconds: int | None = None,
        command: list[str] | str | None = None,
        docker_runtime_config: Any = None,
    ) -> None:
        self.source_directory = source_directory
        self.run_config = run_config or RunConfiguration()
        self.script = script or self.run_config.script
        self.arguments = list(arguments if arguments is not None else self.run_config.arguments)
        self.command = command
        if compute_target is not None:
            self.run_config.target = compute_target
        if environment is not None:
            self.run_config.environment = environment
        self.distributed_job_config = distributed_job_config
        self.resume_from = resume_from
        self.max_run_duration_seconds = max_run_duration_seconds

    @property
    def compute_target(self) -> Any:
        return self.run_config.target

    @property
    def environment(self) -> Environment:
        return self.run_config.environment

    def submission(self, workspace: Any) -> dict[str, Any]:
        """``jt.submit``'s keywords for this job (see the module's docstring)."""
        if self.resume_from is not None:
            raise NotSupported(
                "ScriptRunConfig(resume_from=...)",
                "resume a run from its checkpoints with jt.resume(RUN_ID) or "
                "`jupyter-trainer resume RUN`",
            )
        script, arguments = self._entry()
        source = Path(self.source_directory).expanduser()
        if not source.is_dir():
            raise UserErrorException(f"source_directory {source} is not a folder")
        entry = source / script
        if not entry.is_file():
            raise UserErrorException(f"the script {script!r} is not in {source}")
        args, data = script_arguments(arguments)
        environment = self.run_config.environment
        if self.run_config.environment_variables:  # v1 set them for the job: so does its env
            environment = copy.deepcopy(environment)
            environment.environment_variables = {
                **environment.environment_variables,
                **{str(k): str(v) for k, v in self.run_config.environment_variables.items()},
            }
        return {
            "script": str(entry),
            "source": str(source),
            "args": args,
            "data": data,
            "target": target_name(self.run_config.target),
            **launch_of(self.distributed_job_config, self.run_config),
            "environment": environment,
        }

    def _entry(self) -> tuple[str, list[Any]]:
        if self.command is None:
            if not self.script:
                raise UserErrorException("ScriptRunConfig needs script= (or command=)")
            return self.script, self.arguments
        words = shlex.split(self.command) if isinstance(self.command, str) else list(self.command)
        if (
            len(words) >= 2
            and Path(str(words[0])).name.startswith("python")
            and str(words[1]).endswith(".py")
        ):
            return str(words[1]), [*words[2:], *self.arguments]
        raise NotSupported(
            f"ScriptRunConfig(command={self.command!r})",
            "give script='train.py' and arguments=[...]: a run here starts a Python script",
        )


# $NAME or ${NAME}: v1 passed its arguments through the node's shell, which expanded them
_SHELL_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def script_arguments(arguments: list[Any]) -> tuple[list[str], dict[str, str]]:
    """The arguments as strings, each dataset replaced by its input's ``${{data.NAME}}``,
    each ``$NAME`` (or ``${NAME}``) by ``${{env.NAME}}``, which the rank replaces by its
    environment variable NAME as v1's shell did, and the data inputs they name
    (``{NAME: source}``)."""
    args: list[str] = []
    data: dict[str, str] = {}
    for value in arguments:
        if isinstance(value, FileDataset):
            value = value.as_mount()
        if isinstance(value, DatasetConsumptionConfig):
            name = value.name or value.dataset.name or f"input_{len(data) + 1}"
            source = value.dataset.source
            if data.get(name, source) != source:
                raise UserErrorException(
                    f"two datasets are both named {name!r}: give them different names "
                    "with as_named_input(NAME)"
                )
            data[name] = source
            args.append(f"${{{{data.{name}}}}}")
        elif isinstance(value, str):
            args.append(_SHELL_VARIABLE.sub(r"${{env.\1\2}}", value))
        elif isinstance(value, (bool, int, float, Path)):
            args.append(str(value))
        else:
            raise UserErrorException(
                f"argument {value!r} ({type(value).__name__}): arguments are strings, numbers "
                "or datasets"
            )
    return args, data


def target_name(target: Any) -> str:
    if target is None:
        return "local"
    if isinstance(target, str):
        return target
    name = getattr(target, "name", None)
    if not isinstance(name, str):
        raise UserErrorException(
            f"compute_target {target!r}: give a ComputeTarget or the name of a target"
        )
    return name


def launch_of(config: Any, run_config: RunConfiguration | None = None) -> dict[str, Any]:
    """``submit``'s launch keywords for a v1 distributed configuration (None: one process)."""
    if config is None:
        nodes = run_config.node_count if run_config is not None else 1
        if nodes != 1:
            raise UserErrorException(
                "run_config.node_count > 1 needs a distributed_job_config "
                "(PyTorchConfiguration or MpiConfiguration)"
            )
        return {"launcher": "python", "nodes": 1, "procs": 1}
    if isinstance(config, (PyTorchConfiguration, MpiConfiguration)):
        return config.launch()
    launch = getattr(config, "launch", None)
    if callable(launch):
        found = launch()
        if isinstance(found, dict):
            return found
    raise UserErrorException(
        f"distributed_job_config {config!r}: use PyTorchConfiguration or MpiConfiguration"
    )


__all__ = ["ScriptRunConfig"]
