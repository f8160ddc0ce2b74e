"""``azureml.core.dataset`` inside a run: ``Dataset`` names what to do (see ``run.py``)."""

from .run import Dataset

__all__ = ["Dataset"]
