"""Runs mirrored to an MLflow tracking server, after the fact (``--mlflow URI``).

``mirror`` writes one run of the store into one MLflow run, through ``MlflowClient``: params,
every rank's metrics with their steps, tags, the outputs as artifacts and the run's registered
model versions. ``sync`` does that in a child process with a time limit and keeps the result
in the run's state (``state["mlflow"]``): the supervisor calls it once a run has ended
(``python -m jupyter_trainer.mirrors.mlflow sync RUN``), ``jupyter-trainer mlflow sync RUN``
does it again, and registering a model of such a run sends that version at once.

MLflow is an optional extra (``pip install jupyter_trainer[mlflow]``): importing this package
needs nothing of it; syncing without it raises (or records) ``MissingExtra``.
"""

from .sync import sync, sync_model

__all__ = ["sync", "sync_model"]
