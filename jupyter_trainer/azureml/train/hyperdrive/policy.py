"""``azureml.train.hyperdrive`` early termination policies, as a sweep's pruning here.

A v1 policy counted the primary metric's reports; the script side's ``run.log`` gives the
n-th report of a metric step n, so ``evaluation_interval`` and ``delay_evaluation`` are
``prune_every`` and ``prune_after`` in the same units.
"""

from __future__ import annotations

import warnings
from typing import Any

from ...core.environment import V1Note
from ...errors import UserErrorException


class EarlyTerminationPolicy:
    def __init__(self, evaluation_interval: int = 1, delay_evaluation: int = 0) -> None:
        for name, value in (
            ("evaluation_interval", evaluation_interval),
            ("delay_evaluation", delay_evaluation),
        ):
            if type(value) is not int or value < 0:
                raise UserErrorException(f"{name} must be a whole number >= 0, got {value!r}")
        self.evaluation_interval = evaluation_interval
        self.delay_evaluation = delay_evaluation

    def prune(self) -> str:
        return "none"

    def options(self) -> dict[str, Any]:
        return {
            "prune": self.prune(),
            "prune_every": max(1, self.evaluation_interval),
            "prune_after": self.delay_evaluation,
        }


class NoTerminationPolicy(EarlyTerminationPolicy):
    def __init__(self) -> None:
        super().__init__()


class BanditPolicy(EarlyTerminationPolicy):
    def __init__(
        self,
        evaluation_interval: int = 1,
        slack_factor: float | None = None,
        slack_amount: float | None = None,
        delay_evaluation: int = 0,
    ) -> None:
        super().__init__(evaluation_interval, delay_evaluation)
        if (slack_factor is None) == (slack_amount is None):
            raise UserErrorException(
                "BanditPolicy takes exactly one of slack_factor and slack_amount"
            )
        self.slack_factor = slack_factor
        self.slack_amount = slack_amount

    def prune(self) -> str:
        if self.slack_factor is not None:
            return f"bandit:{self.slack_factor!r}"
        return f"bandit:amount={self.slack_amount!r}"


class MedianStoppingPolicy(EarlyTerminationPolicy):
    def __init__(self, evaluation_interval: int = 1, delay_evaluation: int = 5) -> None:
        super().__init__(evaluation_interval, delay_evaluation)

    def prune(self) -> str:
        return "median"


class TruncationSelectionPolicy(EarlyTerminationPolicy):
    def __init__(
        self,
        truncation_percentage: int,
        evaluation_interval: int = 1,
        delay_evaluation: int = 0,
        exclude_finished_jobs: bool = False,
    ) -> None:
        super().__init__(evaluation_interval, delay_evaluation)
        self.truncation_percentage = truncation_percentage
        self.exclude_finished_jobs = exclude_finished_jobs
        if exclude_finished_jobs:
            warnings.warn(
                "TruncationSelectionPolicy(exclude_finished_jobs=True): a trial is compared "
                "with every trial that reported at that step, finished ones included "
                "(Optuna's percentile pruner)",
                V1Note,
                stacklevel=2,
            )

    def prune(self) -> str:
        return f"truncation:{self.truncation_percentage!r}"


__all__ = [
    "BanditPolicy",
    "EarlyTerminationPolicy",
    "MedianStoppingPolicy",
    "NoTerminationPolicy",
    "TruncationSelectionPolicy",
]
