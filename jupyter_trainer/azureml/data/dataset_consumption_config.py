"""``azureml.data.dataset_consumption_config``: ``DatasetConsumptionConfig`` (see ``core/dataset.py``)."""

from ..core.dataset import DatasetConsumptionConfig

__all__ = ["DatasetConsumptionConfig"]
