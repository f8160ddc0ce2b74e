"""``azureml.core.datastore`` inside a run: ``Datastore`` names what to do (see ``run.py``)."""

from .run import Datastore

__all__ = ["Datastore"]
