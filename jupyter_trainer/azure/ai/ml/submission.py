"""A v2 job as the options of ``jt.submit`` (a command job) or ``jt.sweep`` (a sweep job).

The entry of every run is ``rankside/programs/azure_command.py``, copied with the job's code folder and
``_azureml_job.json`` (its command, inputs, outputs and environment variables) into a staging
folder that becomes the run's snapshot; it runs the command on each rank as v2 did. The
compute is a target's name (``local`` when none is given); the distribution is the launcher;
the environment is defined here when the job is created. Everything is checked before any
run exists: a placeholder that names no input, a missing input path, an unknown target.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ....azureml.core.environment import V1Note
from ....environment.manage import define
from ....rankside import AZURE_COMMAND, source
from ....rankside.programs.azure_command import JOB_FILE, PLACEHOLDER
from ....targets.registry import get_target
from .command_job import CommandJob
from .entities.distribution import launch_of
from .entities.environment import environment_of
from .exceptions import ValidationException
from .inputs import Input, data_source, input_of, output_note, output_of
from .sweep.expressions import distribution_of

ENTRY = "_azureml_command.py"
_LITERALS = (str, int, float, bool)


def job_file(job: CommandJob, client: Any, swept: set[str]) -> tuple[dict[str, Any], dict]:
    """The ``_azureml_job.json`` of ``job`` and its data inputs (``{NAME: source}``)."""
    literals: dict[str, str] = {}
    data: dict[str, str] = {}
    for name, value in job.inputs.items():
        if name in swept or distribution_of(value) is not None:
            continue
        value = input_of(value)
        if isinstance(value, Input):
            data[name] = data_source(name, value, client.workspace, job._base)
        elif isinstance(value, _LITERALS):
            literals[name] = str(value)
        elif value is not None:
            raise ValidationException(
                f"input {name!r} is {value!r}: give Input(type=..., path=...), a number, a "
                "string or a boolean"
            )
    outputs: dict[str, str] = {}
    delivered: dict[str, str] = {}  # output -> the datastore path it is copied to at the end
    for name, value in job.outputs.items():
        given = output_of(value)
        output_note(name, given, client.workspace)
        outputs[name] = str(given.type or "uri_folder").lower()
        if given.path:
            delivered[name] = str(given.path)
    known = {("inputs", n) for n in [*literals, *data, *swept]}
    known |= {("search_space", n) for n in swept} | {("outputs", n) for n in outputs}
    for match in PLACEHOLDER.finditer(re.sub(r"\$\[\[.*?\]\]", "", job.command, flags=re.S)):
        if (match.group(1), match.group(2)) not in known:
            raise ValidationException(
                f"the command names {match.group(0)}, but the job has no "
                f"{match.group(1).rstrip('s').replace('_', ' ')} {match.group(2)!r}: add it to "
                f"the job's {match.group(1)} (or fix the name)"
            )
    spec = {
        "command": job.command,
        "literals": literals,
        "data": sorted(data),
        "swept": sorted(swept),
        "outputs": outputs,
        "output_paths": delivered,
        "environment_variables": dict(job.environment_variables),
    }
    return spec, data


@contextlib.contextmanager
def staged(job: CommandJob, spec: dict[str, Any]) -> Iterator[Path]:
    """A folder holding the job's code, the entry script and the job file, removed after
    the run's snapshot is taken from it."""
    with tempfile.TemporaryDirectory(prefix="jt-azure-job-") as tmp:
        folder = Path(tmp) / "code"
        if job.code is not None:
            code = Path(str(job.code)).expanduser()
            code = code if code.is_absolute() else job._base / code
            if not code.is_dir():
                raise ValidationException(f"the job's code folder {code} is not a folder")
            shutil.copytree(code, folder, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            for name in (ENTRY, JOB_FILE):
                if (folder / name).exists():
                    raise ValidationException(f"the code folder {code} holds {name}: rename it")
        else:
            folder.mkdir()
        (folder / ENTRY).write_bytes(source(AZURE_COMMAND))
        (folder / JOB_FILE).write_text(json.dumps(spec, indent=1))
        yield folder


def run_options(
    job: CommandJob, client: Any, compute: str | None, *, define_env: bool = True
) -> dict[str, Any]:
    """``submit``'s options of ``job`` other than its script and source: target, launch,
    environment, name, origin, home. ``define_env=False`` checks the environment without
    defining it (``azure check``)."""
    home = client.workspace.home
    target = str(compute or job.compute or "local")
    target = target[len("azureml:") :] if target.lower().startswith("azureml:") else target
    try:
        found = get_target(target, home)
    except Exception as exc:
        raise ValidationException(f"compute {target!r}: {exc}") from None
    launch = launch_of(job.distribution, job.instance_count)
    if launch["nodes"] > 1 and found.kind == "local":
        fix = target if target != "local" else "gpu-cluster"
        raise ValidationException(
            f"instance_count={launch['nodes']}, but compute {target!r} (local) is this "
            f"machine, one node: add the cluster as a target (jupyter-trainer target add {fix} "
            "--kind ssh hosts=[HOST1,HOST2], or --kind slurm, kubernetes, ray) and give "
            f"compute={fix!r}, or set instance_count=1 to start every process here"
        )
    env = environment_of(job.environment, client._environments)
    if env is not None and env.docker.base_image and not getattr(found, "runs_images", False):
        warnings.warn(
            f"the environment's image {env.docker.base_image!r} is not run: compute "
            f"{target!r} ({found.kind}) starts processes directly on its hosts, so the job uses "
            "the kernel's Python (with the conda_file's packages). A Slurm (pyxis) or "
            "Kubernetes target runs images",
            V1Note,
            stacklevel=4,
        )
        env.docker.base_image = None
    definition = env.definition(home) if env is not None else None
    if definition is not None and define_env:
        define(definition, home=home)
    experiment = job.experiment_name or client.experiment_name()
    return {
        **launch,
        "target": target,
        "env": str(definition.name) if definition is not None else None,
        "name": experiment,
        "origin": {
            "azureml": {"experiment": experiment},
            "azure_v2": {"display_name": job.display_name or "", "type": job.type},
        },
        "home": home,
    }


def validate(job: Any, client: Any, compute: str | None = None) -> None:
    """Everything ``jobs.create_or_update`` checks of ``job`` (a command or sweep job),
    starting and defining nothing: what ``azure check`` predicts."""
    if getattr(job, "type", None) == "sweep":
        space = job.space()
        job.options()
        job_file(job.trial, client, set(space))
        run_options(job.trial, client, compute or job.compute, define_env=False)
    else:
        job_file(job, client, set())
        run_options(job, client, compute, define_env=False)
