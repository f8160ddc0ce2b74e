"""``azureml.core.model`` inside a run: ``Model`` names what to do (see ``run.py``)."""

from .run import Model

__all__ = ["Model"]
