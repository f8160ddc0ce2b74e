"""``azure.ai.ml.sweep.SweepJob``: a v2 sweep, as a sweep here (``jt.sweep``). Each trial is
the run its command job describes, with the trial's values for the swept inputs.

``objective`` (``primary_metric`` and ``goal``) is the sweep's metric, read from what the
script logs (``mlflow.log_metric`` or ``jt.log``); ``limits`` give its trials
(``max_total_trials``), parallel trials (``max_concurrent_trials``) and timeout (seconds).
"""

from __future__ import annotations

import warnings
from typing import Any

from .....azureml.core.environment import V1Note
from ..exceptions import ValidationException
from .expressions import SweepDistribution, distribution_of
from .policies import EarlyTerminationPolicy, policy_of, sampling_of


class Objective:
    def __init__(self, *, goal: str | None = None, primary_metric: str | None = None, **kw: Any):
        self.goal = goal
        self.primary_metric = primary_metric


class SweepJobLimits:
    def __init__(
        self,
        *,
        max_concurrent_trials: int | None = None,
        max_total_trials: int | None = None,
        timeout: int | None = None,
        trial_timeout: int | None = None,
        **kw: Any,
    ) -> None:
        self.max_concurrent_trials = max_concurrent_trials
        self.max_total_trials = max_total_trials
        self.timeout = timeout
        self.trial_timeout = trial_timeout


class SweepJob:
    type = "sweep"

    def __init__(
        self,
        *,
        trial: Any,
        compute: str | None = None,
        sampling_algorithm: Any = "random",
        search_space: dict[str, Any] | None = None,
        objective: Objective | dict[str, Any] | None = None,
        primary_metric: str | None = None,
        goal: str | None = None,
        limits: SweepJobLimits | dict[str, Any] | None = None,
        early_termination: Any = None,
        early_termination_policy: Any = None,
        max_concurrent_trials: int | None = None,
        max_total_trials: int | None = None,
        timeout: int | None = None,
        trial_timeout: int | None = None,
        inputs: dict[str, Any] | None = None,
        outputs: dict[str, Any] | None = None,
        name: str | None = None,
        display_name: str | None = None,
        experiment_name: str | None = None,
        description: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if getattr(trial, "type", None) != "command":
            raise ValidationException("a sweep's trial is a command job (command(...))")
        self.trial = trial
        self.compute = compute or trial.compute
        self.sampling_algorithm = sampling_of(sampling_algorithm)
        if isinstance(objective, dict):
            objective = Objective(**objective)
        self.objective = objective or Objective(goal=goal, primary_metric=primary_metric)
        if isinstance(limits, dict):
            limits = SweepJobLimits(**limits)
        self.limits = limits or SweepJobLimits()
        self.set_limits(
            max_concurrent_trials=max_concurrent_trials,
            max_total_trials=max_total_trials,
            timeout=timeout,
            trial_timeout=trial_timeout,
        )
        self.early_termination: EarlyTerminationPolicy | None = policy_of(
            early_termination_policy if early_termination_policy is not None else early_termination
        )
        self.search_space = {
            str(k): v for k, v in (search_space or {}).items() if distribution_of(v) is not None
        }
        if inputs:
            trial.inputs = {**trial.inputs, **inputs}
        if outputs:
            trial.outputs = {**trial.outputs, **outputs}
        self.name = name
        self.display_name = display_name or trial.display_name
        self.experiment_name = experiment_name or trial.experiment_name
        self.description = description
        self.tags = dict(tags or {})

    def __repr__(self) -> str:
        return f"SweepJob(metric={self.objective.primary_metric!r}, compute={self.compute!r})"

    def set_limits(
        self,
        *,
        max_concurrent_trials: int | None = None,
        max_total_trials: int | None = None,
        timeout: int | None = None,
        trial_timeout: int | None = None,
    ) -> None:
        for key, value in (
            ("max_concurrent_trials", max_concurrent_trials),
            ("max_total_trials", max_total_trials),
            ("timeout", timeout),
            ("trial_timeout", trial_timeout),
        ):
            if value is not None:
                setattr(self.limits, key, value)

    def set_objective(self, *, goal: str | None = None, primary_metric: str | None = None) -> None:
        self.objective = Objective(goal=goal, primary_metric=primary_metric)

    def space(self) -> dict[str, str]:
        """Each swept name and its expression: the trial's expression inputs and the
        explicit ``search_space``."""
        found: dict[str, SweepDistribution] = {}
        for name, value in {**self.trial.inputs, **self.search_space}.items():
            dist = distribution_of(value)
            if dist is not None:
                found[name] = dist
        if not found:
            raise ValidationException(
                "the sweep has no search space: give the command job expression inputs "
                "(job(lr=Uniform(0.01, 0.1))) or search_space={...}"
            )
        return {name: dist.expression() for name, dist in found.items()}

    def options(self) -> dict[str, Any]:
        """``jt.sweep``'s own options for this sweep."""
        goal = str(self.objective.goal or "").lower()
        if goal not in ("maximize", "minimize"):
            raise ValidationException(
                f"the sweep's goal is {self.objective.goal!r}: use 'maximize' or 'minimize'"
            )
        if not self.objective.primary_metric:
            raise ValidationException("the sweep needs primary_metric (the metric it optimises)")
        trials = self.limits.max_total_trials
        if type(trials) is not int or trials < 1:
            raise ValidationException(
                "the sweep needs limits.max_total_trials, a whole number of at least 1 "
                "(sweep_job.set_limits(max_total_trials=...))"
            )
        parallel = self.limits.max_concurrent_trials or trials
        if self.limits.trial_timeout:
            warnings.warn(
                "limits.trial_timeout is not used: the sweep's timeout (limits.timeout) "
                "bounds the whole sweep",
                V1Note,
                stacklevel=3,
            )
        options: dict[str, Any] = {
            "metric": self.objective.primary_metric,
            "goal": "max" if goal == "maximize" else "min",
            "trials": trials,
            "parallel": min(int(parallel), trials),
            "sampler": self.sampling_algorithm.sampler,
            "timeout": float(self.limits.timeout) if self.limits.timeout else None,
            "seed": self.sampling_algorithm.seed,
        }
        if self.early_termination is not None:
            options.update(self.early_termination.options())
        return options


__all__ = ["Objective", "SweepJob", "SweepJobLimits"]
