"""``azure.ai.ml.load_job``: a v2 job YAML file (``commandJob.schema.json``,
``sweepJob.schema.json``) as the job objects the notebook side builds, so
``jupyter-trainer azure job create --file job.yml`` and ``ml_client.jobs.create_or_update(
load_job("job.yml"))`` run the same job. Paths in the file (``code``, local inputs, a
``conda_file``) are relative to the file's folder, as v2 reads them. ``--set key=value``
(``params_override``) sets a dotted key (``compute=local``, ``inputs.epochs=2``,
``limits.max_total_trials=4``), its value read as YAML."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .command_job import CommandJob
from .entities.environment import Environment
from .exceptions import ValidationException, refuse
from .refused import AUTOML, PIPELINE
from .sweep.job import SweepJob

_REFUSED_TYPES = {
    "pipeline": ("a pipeline job", PIPELINE),
    "automl": ("an AutoML job", AUTOML),
    "spark": ("a Spark job", PIPELINE),
    "parallel": ("a parallel job", PIPELINE),
}
_COMMAND_KEYS = {
    "command",
    "code",
    "inputs",
    "outputs",
    "environment",
    "compute",
    "distribution",
    "environment_variables",
    "resources",
    "name",
    "display_name",
    "experiment_name",
    "description",
    "tags",
    "services",
    "instance_count",
}
# keys a v2 file may hold that change nothing here
_IGNORED = {
    "$schema",
    "type",
    "identity",
    "queue_settings",
    "properties",
    "limits",
    "is_deterministic",
}


def override(data: dict[str, Any], sets: Sequence[str | Mapping[str, Any]]) -> dict[str, Any]:
    """``data`` with each ``key=value`` (or ``{key: value}``) of ``sets`` applied."""
    for item in sets:
        pairs: list[tuple[str, Any]]
        if isinstance(item, Mapping):
            pairs = [(str(k), v) for k, v in item.items()]
        else:
            key, eq, text = str(item).partition("=")
            if not eq or not key.strip():
                raise ValidationException(f"--set {item!r}: give KEY=VALUE (compute=local)")
            pairs = [(key.strip(), yaml.safe_load(text) if text.strip() else "")]
        for key, value in pairs:
            node = data
            parts = key.split(".")
            for part in parts[:-1]:
                child = node.get(part)
                if not isinstance(child, dict):
                    child = node[part] = {} if child is None else _not_mapping(key, part)
                node = child
            node[parts[-1]] = value
    return data


def _not_mapping(key: str, part: str) -> dict[str, Any]:
    raise ValidationException(f"--set {key}: {part!r} is not a mapping in the job file")


def read_job_file(source: str | Path) -> dict[str, Any]:
    path = Path(source).expanduser()
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValidationException(f"job file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ValidationException(f"job file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValidationException(f"job file {path}: a mapping of a v2 job (command, ...)")
    return data


def job_kind(data: Mapping[str, Any]) -> str:
    kind = str(data.get("type") or "").lower()
    schema = str(data.get("$schema") or "")
    if not kind:
        kind = "sweep" if "sweepJob" in schema else "pipeline" if "pipelineJob" in schema else ""
        kind = kind or ("automl" if "autoML" in schema or "task" in data else "command")
    return kind


def load_job(
    source: str | Path,
    *,
    params_override: Sequence[Mapping[str, Any] | str] | None = None,
    **kw: Any,
) -> CommandJob | SweepJob:
    """The job the YAML file ``source`` describes."""
    path = Path(source).expanduser()
    data = override(read_job_file(path), params_override or [])
    kind = job_kind(data)
    if kind in _REFUSED_TYPES:
        what, fix = _REFUSED_TYPES[kind]
        raise refuse(f"{what} ({path.name})", fix)
    base = path.resolve().parent
    if kind == "sweep":
        trial = data.get("trial")
        if not isinstance(trial, dict):
            raise ValidationException(f"{path}: a sweep job needs trial: (its command job)")
        job = _command(
            {**trial, **{k: data[k] for k in ("inputs", "outputs", "compute") if k in data}}, base
        )
        sweep_keys = (
            "sampling_algorithm",
            "search_space",
            "objective",
            "limits",
            "early_termination",
            "experiment_name",
            "display_name",
            "description",
            "tags",
        )
        return SweepJob(trial=job, **{k: data[k] for k in sweep_keys if k in data})
    if kind != "command":
        raise ValidationException(f"{path}: job type {kind!r}: this runs command and sweep jobs")
    return _command(data, base)


def _command(data: Mapping[str, Any], base: Path) -> CommandJob:
    unknown = sorted(set(data) - _COMMAND_KEYS - _IGNORED)
    if unknown:
        raise ValidationException(f"the job file has keys v2 does not define here: {unknown}")
    fields = {k: v for k, v in data.items() if k in _COMMAND_KEYS}
    environment = fields.get("environment")
    if isinstance(environment, dict):
        env = Environment(**environment)
        env._base = base
        fields["environment"] = env
    job = CommandJob(**fields)
    job._base = base
    return job


__all__ = ["load_job"]
