"""``azureml.core.compute_target``: v1's ``ComputeTargetException``."""

from ..errors import ComputeTargetException

__all__ = ["ComputeTargetException"]
