"""``azureml.train.hyperdrive`` for a v1 notebook: a hyperparameter search is a sweep here."""

from .parameter_expressions import (
    choice,
    lognormal,
    loguniform,
    normal,
    qlognormal,
    qloguniform,
    qnormal,
    quniform,
    randint,
    uniform,
)
from .policy import (
    BanditPolicy,
    EarlyTerminationPolicy,
    MedianStoppingPolicy,
    NoTerminationPolicy,
    TruncationSelectionPolicy,
)
from .run import HyperDriveRun
from .runconfig import HyperDriveConfig, PrimaryMetricGoal
from .sampling import BayesianParameterSampling, GridParameterSampling, RandomParameterSampling

__all__ = [
    "BanditPolicy",
    "BayesianParameterSampling",
    "EarlyTerminationPolicy",
    "GridParameterSampling",
    "HyperDriveConfig",
    "HyperDriveRun",
    "MedianStoppingPolicy",
    "NoTerminationPolicy",
    "PrimaryMetricGoal",
    "RandomParameterSampling",
    "TruncationSelectionPolicy",
    "choice",
    "lognormal",
    "loguniform",
    "normal",
    "qlognormal",
    "qloguniform",
    "qnormal",
    "quniform",
    "randint",
    "uniform",
]
