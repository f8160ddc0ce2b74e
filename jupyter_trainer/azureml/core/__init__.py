"""``azureml.core`` for a v1 notebook: ``from jupyter_trainer.azureml.core import ...``.

``VERSION`` is this package's version, which v1 samples print in their first cell.
"""

from ...core.version import __version__ as VERSION
from .compute import ComputeTarget
from .conda_dependencies import CondaDependencies
from .dataset import Dataset, Datastore
from .environment import Environment
from .experiment import Experiment
from .model import Model
from .run import Run
from .runconfig import RunConfiguration
from .script_run_config import ScriptRunConfig
from .workspace import Workspace

ScriptRun = Run

__all__ = [
    "VERSION",
    "ComputeTarget",
    "CondaDependencies",
    "Dataset",
    "Datastore",
    "Environment",
    "Experiment",
    "Model",
    "Run",
    "RunConfiguration",
    "ScriptRun",
    "ScriptRunConfig",
    "Workspace",
]
