"""``azureml.data.data_reference``: ``DataReference`` (see ``core/dataset.py``)."""

from ..core.dataset import DataReference

__all__ = ["DataReference"]
