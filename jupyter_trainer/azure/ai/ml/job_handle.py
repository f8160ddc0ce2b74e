"""What ``jobs.create_or_update`` and ``jobs.get`` give back: a v2 job's view of a run (a
command job) or of a sweep (a sweep job) of this store. Its ``name`` is the run's (or the
sweep's) id, which every other ``jobs`` call and ``azureml://jobs/NAME/...`` take; its
``status`` is v2's (``Completed``, ``Failed``, ``Running``, ...)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ....api import runs as api
from ....api.sweeps.functions import get_sweep, is_sweep_id
from ....api.sweeps.handle import Sweep
from ....azureml.core.run import V1_STATUS
from ....azureml.train.hyperdrive.run import V1_SWEEP_STATUS
from ....rankside.programs.azure_command import JOB_FILE
from .inputs import datastore_folder


class JobOutput:
    """A named output of a job: ``type``, ``path`` (what a later ``Input`` takes), ``local``."""

    def __init__(self, *, type: str, path: str, local: Path) -> None:
        self.type = type
        self.path = path
        self.local = local

    def __repr__(self) -> str:
        return f"JobOutput(type={self.type!r}, path={self.path!r})"


class JobOutputs(dict):
    """The outputs by name, also as attributes (``job.outputs.model``), as v2 gives them."""

    def __getattr__(self, name: str) -> JobOutput:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"the job has no output {name!r} (its outputs: {sorted(self)})"
            ) from None


class Job:
    """A v2 job here: ``name``, ``status``, ``studio_url`` (the run's folder), ``outputs``,
    ``properties`` (a sweep's ``best_child_run_id``)."""

    def __init__(self, name: str, home: Path, spec: Any = None) -> None:
        self.name = name
        self._home = home
        self._spec = spec  # the job object it was created from, when it was
        self.type = "sweep" if is_sweep_id(name, home=home) else "command"
        if self.type == "sweep":
            self._sweep: Sweep | None = get_sweep(name, home=home)
            self._run: api.Run | None = None
        else:
            self._sweep = None
            self._run = api.get_run(name, home=home)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, type={self.type!r}, status={self.status!r})"
        )

    def _repr_html_(self) -> str:
        return (
            "<table><tr><th>Experiment</th><th>Name</th><th>Type</th><th>Status</th>"
            f"<th>Details Page</th></tr><tr><td>{self.experiment_name}</td><td>{self.name}</td>"
            f"<td>{self.type}</td><td>{self.status}</td><td>{self.studio_url}</td></tr></table>"
        )

    def _the_run(self) -> api.Run:
        if self._run is None:
            raise TypeError(f"job {self.name} is a sweep, not a run")
        return self._run

    @property
    def sweep(self) -> Sweep | None:
        return self._sweep

    @property
    def run(self) -> api.Run | None:
        return self._run

    @property
    def status(self) -> str:
        if self._sweep is not None:
            return V1_SWEEP_STATUS.get(self._sweep.status, self._sweep.status)
        run = self._the_run()
        return V1_STATUS.get(run.status, run.status)

    @property
    def display_name(self) -> str:
        return getattr(self._spec, "display_name", None) or self.name

    @property
    def experiment_name(self) -> str:
        if self._sweep is not None:
            return self._sweep.name
        return self._the_run().spec.name

    @property
    def studio_url(self) -> str:
        if self._sweep is not None:
            return self._sweep.sweeps.paths(self.name).root.as_uri()
        return self._the_run().path.as_uri()

    @property
    def compute(self) -> str:
        run = self._run or (
            self._sweep.trials()[0] if self._sweep and self._sweep.trials() else None
        )
        return run.spec.target.name if run is not None else ""

    def _job_file(self) -> dict[str, Any]:
        """The ``_azureml_job.json`` the run was started with (``submission.job_file``)."""
        if self._run is None:
            return {}
        path = self._run.path / "code" / JOB_FILE
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    @property
    def outputs(self) -> JobOutputs:
        """Each named output: its ``path`` (``azureml://jobs/NAME/outputs/OUT``, or the
        datastore path it was given), which a later job takes as an ``Input``, and its
        ``local`` folder (``outputs/OUT`` of the run)."""
        found = self._job_file()
        given = found.get("output_paths") or {}
        out = JobOutputs()
        if self._run is None:
            return out
        for name, kind in (found.get("outputs") or {}).items():
            out[name] = JobOutput(
                type=kind,
                path=given.get(name) or f"azureml://jobs/{self.name}/outputs/{name}",
                local=self._run.outputs / name,
            )
        return out

    def deliver(self, workspace: Any) -> None:
        """Copy each output given a datastore path into that datastore's folder, once the
        job has completed, as v2 uploaded it at the end of the job."""
        if self._run is None or self._run.status != "completed":
            return
        for name, path in (self._job_file().get("output_paths") or {}).items():
            folder = datastore_folder(str(path), workspace)
            source = self._run.outputs / name
            if folder is None or not source.exists():
                continue
            if source.is_dir():
                shutil.copytree(source, folder, symlinks=True, dirs_exist_ok=True)
            else:
                folder.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, folder)

    @property
    def inputs(self) -> dict[str, Any]:
        return dict(getattr(self._spec, "inputs", None) or {})

    @property
    def properties(self) -> dict[str, str]:
        if self._sweep is None:
            return {}
        best = self._sweep.best()
        return {"best_child_run_id": best.id} if best is not None else {}

    @property
    def tags(self) -> dict[str, str]:
        return dict(self._run.tags) if self._run is not None else {}


__all__ = ["Job"]
