"""``azureml.core.experiment`` inside a run: ``Experiment`` names what to do (see ``run.py``)."""

from .run import Experiment

__all__ = ["Experiment"]
