"""``azureml.core.Experiment``: a name that groups runs. A run submitted to an experiment
is named after it (``jupyter-trainer runs`` lists it so) and records it
(``origin.azureml.experiment``), which ``run.experiment.name`` reads inside the script.

``submit(config)`` takes a ``ScriptRunConfig``, an estimator (``azureml.train``) or a
``HyperDriveConfig``; each is checked whole, its environment defined and locked, before the
run or sweep is created.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ...api import runs as api
from ...environment.manage import define
from ...targets.registry import get_target
from ..errors import UserErrorException
from .run import Run

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")


class Experiment:
    def __init__(
        self,
        workspace: Any,
        name: str,
        _skip_name_validation: bool = False,
        _id: str | None = None,
        _archived_time: Any = None,
        _create_in_cloud: bool = True,
        _experiment_dto: Any = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise UserErrorException(
                f"experiment name {name!r}: start with a letter or digit, then letters, "
                "digits, _ . - (at most 255)"
            )
        self.workspace = workspace
        self.name = name

    def __repr__(self) -> str:
        return f"Experiment(Name: {self.name}, Workspace: {getattr(self.workspace, 'name', '')})"

    @property
    def id(self) -> str:
        return self.name

    def submit(self, config: Any, tags: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """Start ``config`` as a run (or a sweep, for a ``HyperDriveConfig``)."""
        own = getattr(config, "_submit_to", None)
        if callable(own):
            return own(self, tags)
        submission = getattr(config, "submission", None)
        if not callable(submission):
            raise UserErrorException(
                f"Experiment.submit takes a ScriptRunConfig, an estimator or a "
                f"HyperDriveConfig, not {type(config).__name__}"
            )
        return Run(self, "", start_run(self, submission(self.workspace), tags))

    def get_runs(
        self,
        type: str | None = None,
        tags: Any = None,
        properties: Any = None,
        include_children: bool = False,
    ) -> Iterator[Run]:
        """This experiment's runs, newest first."""
        home = getattr(self.workspace, "home", None)
        for row in api.runs(name=self.name, limit=100_000, home=home):
            if row.name != self.name:
                continue
            if experiment_of(row.spec.origin) == self.name:
                yield Run(self, row.id, row)

    def archive(self) -> None:
        """Nothing to archive: an experiment is the name its runs share."""

    @staticmethod
    def list(workspace: Any, experiment_name: str | None = None, **kwargs: Any) -> list[Experiment]:
        names = experiment_names(workspace)
        return [Experiment(workspace, n) for n in names if experiment_name in (None, n)]


def experiment_names(workspace: Any) -> list[str]:
    home = getattr(workspace, "home", None)
    names = set()
    for run in api.runs(limit=100_000, home=home):
        try:
            origin = run.spec.origin
        except Exception:  # a damaged record: not this listing's business
            continue
        name = experiment_of(origin)
        if name is not None:
            names.add(name)
    return sorted(names)


def experiment_of(origin: Any) -> str | None:
    """The v1 experiment a run's ``origin`` records (``experiment_origin``), if any."""
    found = origin.get("azureml") if isinstance(origin, dict) else None
    name = found.get("experiment") if isinstance(found, dict) else None
    return name if isinstance(name, str) else None


def experiment_origin(experiment: Experiment) -> dict[str, Any]:
    """What a run records of its experiment (``run.experiment.name`` in the script)."""
    return {"azureml": {"experiment": experiment.name}}


def define_environment(experiment: Experiment, environment: Any) -> str | None:
    """The name of the environment here that a v1 ``Environment`` stands for, defined and
    locked now (a bad requirement fails before anything is created); None for the kernel's."""
    if environment is None:
        return None
    home = getattr(experiment.workspace, "home", None)
    definition = environment.definition(home)
    if definition is None:
        return None
    define(definition, home=home)
    return str(definition.name)


def check_image(experiment: Experiment, environment: Any, target: str) -> None:
    """Refuse, before anything is defined or started, a v1 environment's
    ``docker.base_image`` on a target that starts processes directly on its hosts, with
    v1's own fix."""
    image = getattr(getattr(environment, "docker", None), "base_image", None)
    if not image:
        return
    found = get_target(target, getattr(experiment.workspace, "home", None))
    if getattr(found, "runs_images", False):
        return
    raise UserErrorException(
        f"environment {environment.name!r} has docker.base_image = {image!r}, but compute "
        f"target {target!r} ({found.kind}) starts processes directly on its hosts and cannot "
        "run an image. Set env.docker.base_image = None before submitting: the run then uses "
        "the kernel's Python with the environment's packages (list what the image added with "
        "env.python.conda_dependencies), or submit to a Slurm (pyxis) or Kubernetes compute "
        "target"
    )


def check_nodes(experiment: Experiment, nodes: Any, target: str) -> None:
    """Refuse, before anything is defined or started, a job over several nodes on a target
    of this machine: v1's samples ask their cluster for ``node_count=2``, and a local target
    added under the cluster's name has one node. Said in the job's terms, not the CLI's."""
    if not isinstance(nodes, int) or nodes < 2:
        return
    found = get_target(target, getattr(experiment.workspace, "home", None))
    if found.kind != "local":
        return
    raise UserErrorException(
        f"the job's distributed_job_config asks for node_count={nodes}, but compute target "
        f"{target!r} (local) is this machine, one node. Add the cluster under that name "
        f"instead: jupyter-trainer target add {target} --kind ssh hosts=[HOST1,HOST2] "
        "--replace (or --kind slurm, kubernetes, ray), or set node_count=1 to start every "
        "process here"
    )


def start_run(
    experiment: Experiment, submission: dict[str, Any], tags: dict[str, Any] | None = None
) -> api.Run:
    """``jt.submit`` of a v1 job's ``submission`` (see ``ScriptRunConfig.submission``)."""
    options = dict(submission)
    environment = options.pop("environment", None)
    check_nodes(experiment, options.get("nodes"), str(options.get("target") or "local"))
    check_image(experiment, environment, str(options.get("target") or "local"))
    env = define_environment(experiment, environment)
    run = api.submit(
        **options,
        env=env,
        name=experiment.name,
        origin=experiment_origin(experiment),
        home=getattr(experiment.workspace, "home", None),
    )
    if not isinstance(run, api.Run):
        raise TypeError("a dry run has no run")
    if tags:
        run.store.set_run_tags(
            run.id, {str(k): "" if v is None else str(v) for k, v in tags.items()}
        )
    return run


__all__ = ["Experiment"]
