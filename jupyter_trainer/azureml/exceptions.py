"""``azureml.exceptions``: v1's exception names, as this package raises them."""

from .errors import (
    ActivityFailedException,
    ComputeTargetException,
    NotSupported,
    UserErrorException,
)

AzureMLException = Exception  # v1's base class: any error a v1 call raises here is one
ExperimentExecutionException = ActivityFailedException
WorkspaceException = UserErrorException
ProjectSystemException = UserErrorException

__all__ = [
    "ActivityFailedException",
    "AzureMLException",
    "ComputeTargetException",
    "ExperimentExecutionException",
    "NotSupported",
    "ProjectSystemException",
    "UserErrorException",
    "WorkspaceException",
]
