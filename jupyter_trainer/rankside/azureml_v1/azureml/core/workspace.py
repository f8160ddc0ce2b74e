"""``azureml.core.workspace`` inside a run: ``Workspace`` names what to do (see ``run.py``)."""

from .run import Workspace

__all__ = ["Workspace"]
