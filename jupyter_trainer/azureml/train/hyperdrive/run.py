"""``azureml.train.hyperdrive.HyperDriveRun``: a sweep here, with v1's methods. Its children
are the trials' runs; ``get_best_run_by_primary_metric`` is the best completed trial."""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Any

from ....api.sweeps.handle import Sweep
from ....core.errors import RunFailed
from ...core.run import Run
from ...errors import ActivityFailedException

STREAM_INTERVAL_S = 1.0  # how often wait_for_completion(show_output=True) looks

V1_SWEEP_STATUS = {
    "created": "Queued",
    "running": "Running",
    "completed": "Completed",
    "canceled": "Canceled",
    "failed": "Failed",
    "interrupted": "Failed",
}


class PrimaryMetricGoal(Enum):
    """v1's goal for the primary metric (defined in ``azureml.train.hyperdrive.run``)."""

    MAXIMIZE = "MAXIMIZE"
    MINIMIZE = "MINIMIZE"


class HyperDriveRun:
    def __init__(self, experiment: Any, sweep: Sweep, tags: dict[str, Any] | None = None) -> None:
        self.experiment = experiment
        self.sweep = sweep
        self.id = sweep.id
        self._tags = {str(k): "" if v is None else str(v) for k, v in (tags or {}).items()}

    def __repr__(self) -> str:
        return f"HyperDriveRun(Experiment: {self.experiment.name}, Id: {self.id}, Status: {self.get_status()})"

    def get_status(self) -> str:
        return V1_SWEEP_STATUS.get(self.sweep.status, self.sweep.status)

    @property
    def status(self) -> str:
        return self.get_status()

    def get_tags(self) -> dict[str, str]:
        return dict(self._tags)

    def get_details(self) -> dict[str, Any]:
        spec = self.sweep.spec
        return {
            "runId": self.id,
            "status": self.get_status(),
            "properties": {
                "primary_metric_config": json.dumps({"name": spec.metric, "goal": spec.goal}),
                "max_total_runs": spec.trials,
                "max_concurrent_runs": spec.parallel,
            },
        }

    def wait_for_completion(
        self,
        show_output: bool = False,
        wait_post_processing: bool = False,
        raise_on_error: bool = True,
    ) -> dict[str, Any]:
        """Block until every trial has ended; with ``show_output``, print each trial's
        status as it changes meanwhile (with its objective once it has ended), as v1
        streamed the HyperDrive run's progress."""
        shown: dict[Any, str] = {}
        while True:
            try:
                self.sweep.wait(timeout=STREAM_INTERVAL_S if show_output else None)
                ended = True
            except TimeoutError:
                ended = False
            except RunFailed:
                ended = True
            if show_output:
                self._print_changes(shown)
            if ended:
                break
        if raise_on_error and self.sweep.status == "failed":
            raise ActivityFailedException(
                f"ActivityFailedException: sweep {self.id} failed: "
                f"{self.sweep.state.get('error', '')}",
                run_id=self.id,
                status="failed",
            )
        return self.get_details()

    def _print_changes(self, shown: dict[Any, str]) -> None:
        if not shown:
            print(f"RunId: {self.id}\n", file=sys.stdout, flush=True)
        for row in self.sweep.table():
            line = f"trial {row['number']}: {row['run']} {row['status']}"
            if row["status"] not in ("running", "queued", "preparing", "pending"):
                line += f" objective={row['objective']} params={row['params']}"
            if shown.get(row["number"]) != line:
                shown[row["number"]] = line
                print(line, file=sys.stdout, flush=True)

    def cancel(self) -> None:
        self.sweep.cancel()

    def get_children(
        self,
        recursive: bool = False,
        tags: Any = None,
        properties: Any = None,
        type: Any = None,
        status: Any = None,
        _rehydrate_runs: bool = True,
    ) -> list[Run]:
        return [Run(self.experiment, r.id, r) for r in self.sweep.trials()]

    def get_best_run_by_primary_metric(
        self,
        include_failed: bool = True,
        include_canceled: bool = True,
        include_resume_from_runs: bool = True,
    ) -> Run | None:
        best = self.sweep.best()
        return Run(self.experiment, best.id, best) if best is not None else None

    def get_metrics(self, name: str | None = None, **kwargs: Any) -> dict[str, dict[str, Any]]:
        return {child.id: child.get_metrics(name) for child in self.get_children()}

    def get_hyperparameters(self) -> dict[str, str]:
        return {row["run"]: json.dumps(row["params"]) for row in self.sweep.table() if row["run"]}

    def get_children_sorted_by_primary_metric(
        self, top: int = 0, reverse: bool = False, discard_no_metric: bool = False
    ) -> list[dict[str, Any]]:
        goal = self.sweep.spec.goal
        rows = [
            {
                "run_id": row["run"],
                "hyperparameters": json.dumps(row["params"]),
                "best_primary_metric": row["objective"],
                "status": row["status"],
            }
            for row in self.sweep.table()
            if row["run"] and not (discard_no_metric and row["objective"] is None)
        ]
        with_metric = [r for r in rows if r["best_primary_metric"] is not None]
        without = [r for r in rows if r["best_primary_metric"] is None]
        with_metric.sort(key=lambda r: r["best_primary_metric"], reverse=(goal == "max") != reverse)
        ordered = with_metric + without
        return ordered[:top] if top else ordered


__all__ = ["HyperDriveRun", "PrimaryMetricGoal"]
