"""What of v2 has no counterpart here, by name, with what to do instead: the table behind
the refusals (``jupyter-trainer azure check`` reads it too). A refused entity is a class
whose construction raises ``NotSupported``, so a notebook that imports it for later fails
only where it uses it, as v1's mirror does."""

from __future__ import annotations

from typing import Any

from .exceptions import refuse

DEPLOY = (
    "serving is not part of jupyter_trainer: register the model (ml_client.models."
    "create_or_update) and serve its files with your own server (TorchServe, FastAPI, "
    "MLflow's `mlflow models serve`)"
)
PIPELINE = (
    "run each step as its own command job (ml_client.jobs.create_or_update(command(...))), "
    "passing one job's output to the next as Input(path=f'azureml://jobs/{job.name}/"
    "outputs/NAME'), or chain them in the notebook"
)
AUTOML = (
    "AutoML is Azure's service: write the training script (scikit-learn, LightGBM, PyTorch) "
    "and sweep its hyperparameters with command(...).sweep(...)"
)
COMPUTE = (
    "add a target instead: jupyter-trainer target add NAME --kind local (or ssh, slurm, "
    "kubernetes, ray) KEY=VALUE ..., then give compute='NAME'"
)
DATA_ASSET = (
    "give the data directly as Input(type='uri_folder', path='./data' or a URL or "
    "'azureml://datastores/workspaceblobstore/paths/...')"
)
MLTABLE = (
    "give the folder or file the MLTable reads as Input(type='uri_folder' or 'uri_file') "
    "and read it with pandas in the script"
)

# entity (module azure.ai.ml.entities unless said) -> what to do instead
ENTITIES = {
    **dict.fromkeys(
        (
            "ManagedOnlineEndpoint",
            "ManagedOnlineDeployment",
            "KubernetesOnlineEndpoint",
            "KubernetesOnlineDeployment",
            "BatchEndpoint",
            "BatchDeployment",
            "ModelBatchDeployment",
            "PipelineComponentBatchDeployment",
            "OnlineRequestSettings",
            "ProbeSettings",
            "CodeConfiguration",
            "BatchRetrySettings",
        ),
        DEPLOY,
    ),
    **dict.fromkeys(
        ("AmlCompute", "ComputeInstance", "KubernetesCompute", "VirtualMachineCompute"), COMPUTE
    ),
    **dict.fromkeys(("PipelineJob", "Pipeline", "CommandComponent", "ParallelComponent"), PIPELINE),
    **dict.fromkeys(
        ("Spark", "SparkJob", "SparkComponent", "ParallelTask", "ParallelJob"), PIPELINE
    ),
    "Data": DATA_ASSET,
    "Workspace": "a workspace here is the run store ($JUPYTER_TRAINER_HOME): use MLClient.from_config()",
    "Schedule": "schedule `jupyter-trainer azure job create --file job.yml` with cron or a systemd timer",
    "JobSchedule": "schedule `jupyter-trainer azure job create --file job.yml` with cron or a systemd timer",
}
# MLClient operations -> what to do instead
OPERATIONS = {
    "online_endpoints": DEPLOY,
    "online_deployments": DEPLOY,
    "batch_endpoints": DEPLOY,
    "batch_deployments": DEPLOY,
    "components": PIPELINE,
    "schedules": "schedule `jupyter-trainer azure job create --file job.yml` with cron",
    "data": DATA_ASSET,
    "workspaces": "a workspace here is the run store, which exists once a run is there: "
    "MLClient.from_config() finds it",
    "registries": "registries are Azure's: the model registry here is ml_client.models",
}
# modules of azure.ai.ml -> what to do instead
MODULES = {
    "azure.ai.ml.dsl": PIPELINE,
    "azure.ai.ml.automl": AUTOML,
    "azure.ai.ml.parallel": PIPELINE,
    "mltable": MLTABLE,
}


def refused_entity(name: str, module: str) -> type:
    """A class standing for the refused entity ``name``; AttributeError if v2 has none."""
    fix = ENTITIES.get(name)
    if fix is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise refuse(name, fix)

    return type(name, (), {"__init__": __init__, "__doc__": f"Refused: {fix}"})


class RefusedOperations:
    """``ml_client.NAME`` for the operations only Azure has: every call is refused."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise refuse(f"ml_client.{self._name}.{attr}", OPERATIONS[self._name])

        return refused


class RefusedModule:
    """A v2 module only the cloud has (``dsl``, ``automl``): each of its names is refused
    when it is called (``@dsl.pipeline``, ``automl.classification``)."""

    def __init__(self, module: str) -> None:
        self._module = module

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise refuse(f"{self._module}.{attr}", MODULES[self._module])

        return refused
