"""``azure.ai.ml.sweep`` early termination policies and sampling algorithms, as a sweep's
pruner and sampler here through v1's (``hyperdrive.policy``, ``hyperdrive.sampling``):
Bandit, median stopping and truncation selection; random, grid and Bayesian (TPE)."""

from __future__ import annotations

from typing import Any

from .....azureml.train.hyperdrive import policy as v1
from ..exceptions import ValidationException


class EarlyTerminationPolicy:
    type = ""

    def __init__(self, *, delay_evaluation: int = 0, evaluation_interval: int = 0, **kw: Any):
        self.delay_evaluation = delay_evaluation
        self.evaluation_interval = evaluation_interval

    def v1(self) -> v1.EarlyTerminationPolicy:
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        return self.v1().options()


class BanditPolicy(EarlyTerminationPolicy):
    type = "bandit"

    def __init__(
        self,
        *,
        delay_evaluation: int = 0,
        evaluation_interval: int = 0,
        slack_amount: float = 0,
        slack_factor: float = 0,
        **kw: Any,
    ) -> None:
        super().__init__(delay_evaluation=delay_evaluation, evaluation_interval=evaluation_interval)
        self.slack_amount = slack_amount
        self.slack_factor = slack_factor

    def v1(self) -> v1.EarlyTerminationPolicy:
        if bool(self.slack_factor) == bool(self.slack_amount):
            raise ValidationException("BanditPolicy takes one of slack_factor and slack_amount")
        return v1.BanditPolicy(
            self.evaluation_interval or 1,
            self.slack_factor or None,
            self.slack_amount or None,
            self.delay_evaluation,
        )


class MedianStoppingPolicy(EarlyTerminationPolicy):
    type = "median_stopping"

    def v1(self) -> v1.EarlyTerminationPolicy:
        return v1.MedianStoppingPolicy(self.evaluation_interval or 1, self.delay_evaluation)


class TruncationSelectionPolicy(EarlyTerminationPolicy):
    type = "truncation_selection"

    def __init__(
        self,
        *,
        delay_evaluation: int = 0,
        evaluation_interval: int = 0,
        truncation_percentage: int = 0,
        **kw: Any,
    ) -> None:
        super().__init__(delay_evaluation=delay_evaluation, evaluation_interval=evaluation_interval)
        self.truncation_percentage = truncation_percentage

    def v1(self) -> v1.EarlyTerminationPolicy:
        return v1.TruncationSelectionPolicy(
            self.truncation_percentage, self.evaluation_interval or 1, self.delay_evaluation
        )


POLICIES: dict[str, type[EarlyTerminationPolicy]] = {
    p.type: p for p in (BanditPolicy, MedianStoppingPolicy, TruncationSelectionPolicy)
}


def policy_of(value: Any) -> EarlyTerminationPolicy | None:
    if value is None or isinstance(value, EarlyTerminationPolicy):
        return value
    if isinstance(value, dict) and str(value.get("type", "")).lower() in POLICIES:
        fields = {k: v for k, v in value.items() if k != "type"}
        return POLICIES[str(value["type"]).lower()](**fields)
    raise ValidationException(
        f"early_termination {value!r}: use BanditPolicy, MedianStoppingPolicy or "
        "TruncationSelectionPolicy (type: bandit, median_stopping, truncation_selection)"
    )


class SamplingAlgorithm:
    type = ""
    sampler = ""

    def __init__(self, *, seed: int | None = None, rule: str | None = None, **kw: Any) -> None:
        self.seed = seed
        self.rule = rule


class RandomSamplingAlgorithm(SamplingAlgorithm):
    type = "random"
    sampler = "random"


class GridSamplingAlgorithm(SamplingAlgorithm):
    type = "grid"
    sampler = "grid"


class BayesianSamplingAlgorithm(SamplingAlgorithm):
    type = "bayesian"
    sampler = "tpe"


SAMPLERS: dict[str, type[SamplingAlgorithm]] = {
    s.type: s for s in (RandomSamplingAlgorithm, GridSamplingAlgorithm, BayesianSamplingAlgorithm)
}


def sampling_of(value: Any) -> SamplingAlgorithm:
    if isinstance(value, SamplingAlgorithm):
        return value
    kind = value.get("type") if isinstance(value, dict) else value
    if isinstance(kind, str) and kind.lower() in SAMPLERS:
        fields = {k: v for k, v in value.items() if k != "type"} if isinstance(value, dict) else {}
        return SAMPLERS[kind.lower()](**fields)
    raise ValidationException(
        f"sampling_algorithm {value!r}: use 'random', 'grid' or 'bayesian' (sobol is not "
        "offered here: use random)"
    )


__all__ = [
    "BanditPolicy",
    "BayesianSamplingAlgorithm",
    "GridSamplingAlgorithm",
    "MedianStoppingPolicy",
    "RandomSamplingAlgorithm",
    "TruncationSelectionPolicy",
]
