"""``azureml.core`` inside a run: ``Run`` reports to this run (see ``run.py``). The
notebook-side names of v1 (Workspace, Dataset, Experiment, ...) are
``jupyter_trainer.azureml.core`` in the notebook; inside a run they name the fix."""

from .run import Dataset, Datastore, Experiment, Model, Run, Workspace

__all__ = ["Dataset", "Datastore", "Experiment", "Model", "Run", "Workspace"]
