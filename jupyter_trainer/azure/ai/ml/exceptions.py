"""``azure.ai.ml.exceptions``: v2's exception names, as errors of jupyter_trainer."""

from __future__ import annotations

from ....azureml.errors import ActivityFailedException, NotSupported, UserErrorException


class ValidationException(UserErrorException):
    """v2's error for a job or an asset that does not validate: nothing was started."""


class JobException(ActivityFailedException):
    """v2's error from ``jobs.stream`` for a job that failed or was canceled."""


def refuse(call: str, fix: str) -> NotSupported:
    """``call`` has no counterpart here; ``fix`` says what to do instead."""
    return NotSupported(call, fix)


__all__ = ["JobException", "NotSupported", "ValidationException"]
