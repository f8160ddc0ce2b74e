"""``azureml.data`` for a v1 notebook: the dataset classes (see ``core/dataset.py``)."""

from ..core.dataset import DataPath, DatasetConsumptionConfig, FileDataset


class OutputFileDatasetConfig:
    def __init__(self, *args: object, **kwargs: object) -> None:
        from ..errors import NotSupported

        raise NotSupported(
            "OutputFileDatasetConfig",
            "write outputs under ./outputs in the script; they are the run's files "
            "(run.get_file_names(), run.download_file)",
        )


__all__ = ["DataPath", "DatasetConsumptionConfig", "FileDataset", "OutputFileDatasetConfig"]
