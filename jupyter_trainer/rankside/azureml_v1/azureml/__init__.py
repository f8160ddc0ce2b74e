"""``azureml`` inside a run of jupyter_trainer: the script side of Azure ML SDK v1.

Boot puts the folder above this one ahead of site-packages in every rank, so an unchanged
v1 training script's ``from azureml.core.run import Run`` gets the ``Run`` of
``core/run.py``, which reports to this run, even where the real azureml-core is installed.
Other ``azureml`` packages installed in the run's environment stay importable: this package's
path is extended with theirs. It exists only inside runs, never in the notebook's kernel.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
