"""``azureml.data.datapath``: ``DataPath`` (see ``core/dataset.py``)."""

from ..core.dataset import DataPath

__all__ = ["DataPath"]
