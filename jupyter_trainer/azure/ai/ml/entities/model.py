"""``azure.ai.ml.entities.Model``: a model registered from a job's output, as a version of
the registry here (``jt.models``), with the run's lineage.

Its ``path`` names the job's output as v2's samples do: ``azureml://jobs/JOB/outputs/NAME``
(a named output, ``/paths/SUB`` for a part of it), ``azureml://jobs/JOB/outputs/artifacts/
paths/PATH`` or ``runs:/JOB/PATH`` (a file the job wrote under ``outputs/``)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from ..exceptions import refuse

_JOB_OUTPUT = re.compile(r"azureml://jobs/([^/]+)/outputs/(.+?)/?$", re.I)
_RUNS = re.compile(r"runs:/([^/]+)/(.+?)/?$")


class Model:
    def __init__(
        self,
        *,
        name: str | None = None,
        version: str | int | None = None,
        type: str | None = None,
        path: str | None = None,
        description: str | None = None,
        tags: dict[str, Any] | None = None,
        properties: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.name = name
        self.version = version
        self.type = type or "custom_model"
        self.path = path
        self.description = description
        self.tags = dict(tags or {})
        self.properties = dict(properties or {})
        self.id: str | None = None
        self.job_name: str | None = None

    def __repr__(self) -> str:
        return f"Model(name={self.name!r}, version={self.version!r}, path={self.path!r})"


def job_output(path: Any) -> tuple[str, str]:
    """The job (run id) and the path under its ``outputs/`` that a model's path names."""
    text = str(path or "")
    found = _JOB_OUTPUT.match(text)
    if found:
        job, rest = found.group(1), found.group(2)
        parts = PurePosixPath(rest).parts
        if parts[:2] == ("artifacts", "paths"):
            parts = parts[2:]
            parts = parts[1:] if parts[:1] == ("outputs",) else parts
        elif len(parts) >= 3 and parts[1] == "paths":
            parts = (parts[0], *parts[2:])
        return job, "/".join(parts) or "."
    found = _RUNS.match(text)
    if found:
        parts = PurePosixPath(found.group(2)).parts
        parts = parts[1:] if parts[:1] == ("outputs",) else parts
        return found.group(1), "/".join(parts) or "."
    raise refuse(
        f"Model(path={text!r})",
        "register a model from the job that wrote it: Model(path=f'azureml://jobs/{job.name}"
        "/outputs/OUTPUT_NAME', name=...), which records its lineage; a file made outside a "
        "job is not registered here",
    )


__all__ = ["Model"]
