"""Azure ML SDK v1's notebook side, mapped onto jupyter_trainer (docs/azureml.md).

A v1 notebook changes only its import lines: ``from azureml.core import X`` becomes
``from jupyter_trainer.azureml.core import X``, and likewise for ``azureml.core.runconfig``,
``azureml.core.compute``, ``azureml.core.compute_target``, ``azureml.core.conda_dependencies``,
``azureml.train.dnn``, ``azureml.train.estimator``, ``azureml.train.hyperdrive``,
``azureml.widgets`` and ``azureml.data``. The v1 names keep their signatures:

- a compute target is a target of ``targets.toml``, looked up by name;
- an experiment groups runs (the experiment's name is recorded with each run);
- ``ScriptRunConfig`` and the estimators become a run spec (``jt.submit(script=...)``), their
  PyTorch and MPI configurations a launcher (torchrun, mpirun);
- an ``Environment`` becomes a named environment (``%environment``);
- datasets become ``--data`` inputs, HyperDrive a sweep, ``register_model`` the registry,
  ``RunDetails`` the run's widget.

What cannot map (provisioning Azure compute, deployment, credentialed datastores) is refused
when it is called, by name, before any run starts; ``jupyter-trainer azureml check PATH``
lists every such call of a notebook or a folder of scripts. Scripts are unchanged: inside a
run, ``azureml.core.run.Run`` is ``rankside/azureml_v1``'s.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# v1's subpackages, reached as attributes of the package (``azureml.core.VERSION`` after
# ``from jupyter_trainer import azureml``), each imported on first use
_SUBPACKAGES = ("core", "data", "exceptions", "telemetry", "train", "widgets")


def __getattr__(name: str) -> ModuleType:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
