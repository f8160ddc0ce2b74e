"""What ``jobs.create_or_update`` and ``jobs.get`` give back: a v2 job's view of a run (a
command job) or of a sweep (a sweep job) of this store. Its ``name`` is the run's (or the
sweep's) id, which every other ``jobs`` call and ``azureml://jobs/NAME/...`` take; its
``status`` is v2's (``Completed``, ``Failed``, ``Running``, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ....api import runs as api
from ....api.sweeps.functions import get_sweep, is_sweep_id
from ....api.sweeps.handle import Sweep
from ....azureml.core.run import V1_STATUS
from ....azureml.train.hyperdrive.run import V1_SWEEP_STATUS


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
        assert self._run is not None
        return V1_STATUS.get(self._run.status, self._run.status)

    @property
    def display_name(self) -> str:
        return getattr(self._spec, "display_name", None) or self.name

    @property
    def experiment_name(self) -> str:
        if self._sweep is not None:
            return self._sweep.name
        assert self._run is not None
        return self._run.spec.name

    @property
    def studio_url(self) -> str:
        if self._sweep is not None:
            return self._sweep.sweeps.paths(self.name).root.as_uri()
        assert self._run is not None
        return self._run.path.as_uri()

    @property
    def compute(self) -> str:
        run = self._run or (
            self._sweep.trials()[0] if self._sweep and self._sweep.trials() else None
        )
        return run.spec.target.name if run is not None else ""

    @property
    def outputs(self) -> dict[str, Path]:
        """Each named output's folder (``outputs/NAME``) of a command job's run."""
        names = getattr(self._spec, "outputs", None) or {}
        if self._run is None:
            return {}
        return {name: self._run.outputs / name for name in names}

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
