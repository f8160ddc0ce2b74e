"""``azure.ai.ml.sweep``: search space expressions, early termination policies, sampling
algorithms and ``SweepJob`` (docs/azure-v2.md)."""

from __future__ import annotations

from .expressions import (
    Choice,
    LogNormal,
    LogUniform,
    Normal,
    QLogNormal,
    QLogUniform,
    QNormal,
    QUniform,
    Randint,
    Uniform,
)
from .job import Objective, SweepJob, SweepJobLimits
from .policies import (
    BanditPolicy,
    BayesianSamplingAlgorithm,
    GridSamplingAlgorithm,
    MedianStoppingPolicy,
    RandomSamplingAlgorithm,
    TruncationSelectionPolicy,
)

__all__ = [
    "BanditPolicy",
    "BayesianSamplingAlgorithm",
    "Choice",
    "GridSamplingAlgorithm",
    "LogNormal",
    "LogUniform",
    "MedianStoppingPolicy",
    "Normal",
    "Objective",
    "QLogNormal",
    "QLogUniform",
    "QNormal",
    "QUniform",
    "Randint",
    "RandomSamplingAlgorithm",
    "SweepJob",
    "SweepJobLimits",
    "TruncationSelectionPolicy",
    "Uniform",
]
