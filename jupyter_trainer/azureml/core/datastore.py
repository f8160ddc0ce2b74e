"""``azureml.core.datastore``: ``Datastore`` (see ``dataset.py``)."""

from .dataset import Datastore

__all__ = ["Datastore"]
