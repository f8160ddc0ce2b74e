"""``azureml.data.file_dataset``: ``FileDataset`` (see ``core/dataset.py``)."""

from ..core.dataset import FileDataset

__all__ = ["FileDataset"]
