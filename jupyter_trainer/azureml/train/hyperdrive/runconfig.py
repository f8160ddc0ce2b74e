"""``azureml.train.hyperdrive.HyperDriveConfig``: a v1 hyperparameter search, as a sweep
here (``jt.sweep``): each trial is the run the ``ScriptRunConfig`` (or estimator)
describes, given the trial's values as arguments (``--KEY VALUE``, as v1 passed them).

``primary_metric_name`` is the sweep's metric, read from what the script logs with
``run.log``; the objective of a trial is the metric's last value. ``max_total_runs`` and
``max_concurrent_runs`` are its trials and parallel, ``max_duration_minutes`` its timeout.
"""

from __future__ import annotations

from typing import Any

from ...core.experiment import Experiment, check_image, define_environment, experiment_origin
from ...errors import NotSupported, UserErrorException
from .policy import EarlyTerminationPolicy, NoTerminationPolicy
from .run import HyperDriveRun, PrimaryMetricGoal
from .sampling import HyperParameterSampling


class HyperDriveConfig:
    def __init__(
        self,
        hyperparameter_sampling: HyperParameterSampling,
        primary_metric_name: str,
        primary_metric_goal: PrimaryMetricGoal,
        max_total_runs: int,
        max_concurrent_runs: int | None = None,
        max_duration_minutes: int = 10080,
        policy: EarlyTerminationPolicy | None = None,
        estimator: Any = None,
        run_config: Any = None,
        resume_from: Any = None,
        resume_child_runs: Any = None,
        pipeline: Any = None,
        debug_flag: Any = None,
        custom_run_id: str | None = None,
    ) -> None:
        if (estimator is None) == (run_config is None):
            raise UserErrorException(
                "HyperDriveConfig takes run_config= (a ScriptRunConfig) or estimator=, one of them"
            )
        if pipeline is not None:
            raise NotSupported("HyperDriveConfig(pipeline=...)", "sweep a script (run_config=)")
        if resume_from is not None or resume_child_runs is not None:
            raise NotSupported(
                "HyperDriveConfig(resume_from=...)",
                "a sweep whose driver stopped goes on with jt.get_sweep(ID).resume()",
            )
        if not isinstance(hyperparameter_sampling, HyperParameterSampling):
            raise UserErrorException(
                "hyperparameter_sampling is RandomParameterSampling, GridParameterSampling or "
                "BayesianParameterSampling"
            )
        if not isinstance(primary_metric_goal, PrimaryMetricGoal):
            raise UserErrorException(
                "primary_metric_goal is PrimaryMetricGoal.MAXIMIZE or PrimaryMetricGoal.MINIMIZE"
            )
        self.hyperparameter_sampling = hyperparameter_sampling
        self.primary_metric_name = primary_metric_name
        self.primary_metric_goal = primary_metric_goal
        self.max_total_runs = max_total_runs
        self.max_concurrent_runs = max_concurrent_runs
        self.max_duration_minutes = max_duration_minutes
        self.policy = policy or NoTerminationPolicy()
        self.estimator = estimator
        self.run_config = run_config

    def _submit_to(self, experiment: Experiment, tags: dict[str, Any] | None) -> HyperDriveRun:
        from ....api.sweeps.functions import sweep

        job = self.run_config if self.run_config is not None else self.estimator
        options = dict(job.submission(experiment.workspace))
        environment = options.pop("environment", None)
        check_image(experiment, environment, str(options.get("target") or "local"))
        sampling = self.hyperparameter_sampling
        options["args"] = [*options["args"], *sampling.arguments()]
        handle = sweep(
            space=sampling.space(),
            metric=self.primary_metric_name,
            goal="max" if self.primary_metric_goal is PrimaryMetricGoal.MAXIMIZE else "min",
            trials=self.max_total_runs,
            parallel=self.max_concurrent_runs or self.max_total_runs,
            sampler=sampling.sampler,
            timeout=float(self.max_duration_minutes) * 60,
            **self.policy.options(),
            **options,
            env=define_environment(experiment, environment),
            name=experiment.name,
            origin=experiment_origin(experiment),
            home=getattr(experiment.workspace, "home", None),
        )
        return HyperDriveRun(experiment, handle, tags)


__all__ = ["HyperDriveConfig", "PrimaryMetricGoal"]
