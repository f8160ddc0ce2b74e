"""What of Azure ML SDK v2 has no counterpart here is refused by name, with what to do
instead, before anything starts; a job that cannot run is refused with the reason, and no
run is created."""

from __future__ import annotations

import pytest

from jupyter_trainer.api import runs as api
from jupyter_trainer.azure.ai.ml import MLClient, automl, command, dsl, load_job
from jupyter_trainer.azure.ai.ml.entities import (
    AmlCompute,
    BuildContext,
    Environment,
    ManagedOnlineEndpoint,
    Model,
    TensorFlowDistribution,
)
from jupyter_trainer.azure.ai.ml.exceptions import NotSupported, ValidationException
from jupyter_trainer.azure.ai.ml.inputs import Input
from jupyter_trainer.azure.identity import DefaultAzureCredential


def job(**kwargs):
    return command(command="python train.py", **kwargs)


REFUSED = {
    "pipeline": (lambda c: dsl.pipeline(compute="cpu")(lambda: None), "own command job"),
    "automl": (lambda c: automl.classification(target_column_name="y"), "sweep its"),
    "endpoint": (lambda c: ManagedOnlineEndpoint(name="e"), "serve its files"),
    "endpoint operations": (
        lambda c: c.online_endpoints.begin_create_or_update(None),
        "serve its files",
    ),
    "compute": (lambda c: AmlCompute(name="gpu", size="STANDARD_NC6"), "target add"),
    "mltable": (
        lambda c: c.jobs.create_or_update(job(inputs={"t": Input(type="mltable", path="./t")})),
        "read it with pandas",
    ),
    "azure storage": (
        lambda c: c.jobs.create_or_update(
            job(inputs={"d": Input(path="wasbs://data@acct.blob.core.windows.net/x")})
        ),
        "SAS https:// URL",
    ),
    "docker build": (
        lambda c: c.jobs.create_or_update(
            job(environment=Environment(build=BuildContext(path="./docker")))
        ),
        "build and push the image yourself",
    ),
    "tensorflow": (lambda c: TensorFlowDistribution(worker_count=2), "runs PyTorch"),
    "tensorflow curated": (
        lambda c: c.jobs.create_or_update(job(environment="AzureML-tensorflow-2.12-cuda11@latest")),
        "runs PyTorch",
    ),
    "local model": (
        lambda c: c.models.create_or_update(Model(path="./model.pt", name="m")),
        "from the job that wrote it",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_by_name_with_what_to_do(name, home):
    call, fix = REFUSED[name]
    client = MLClient(DefaultAzureCredential(), "sub", "rg", "ws")
    with pytest.raises(NotSupported, match="is not supported by jupyter_trainer") as raised:
        call(client)
    assert fix in str(raised.value)
    assert api.runs(home=home) == []


def test_a_pipeline_yaml_is_refused(tmp_path, home):
    path = tmp_path / "pipeline.yml"
    path.write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json\n"
        "type: pipeline\njobs:\n  a:\n    command: echo a\n"
    )
    with pytest.raises(NotSupported, match="a pipeline job .pipeline.yml."):
        load_job(path)


BAD = {
    "a placeholder naming no input": (
        dict(command="python train.py --lr ${{inputs.lr}}", code=None),
        "the command names ${{inputs.lr}}, but the job has no input 'lr'",
    ),
    "a compute that is no target": (
        dict(command="echo hi", compute="gpu-cluster"),
        "compute 'gpu-cluster': unknown target 'gpu-cluster'; available: local (add one with "
        "`jupyter-trainer target add gpu-cluster --kind KIND`",
    ),
    "two instances on this machine": (
        dict(
            command="echo hi",
            instance_count=2,
            distribution={"type": "pytorch", "process_count_per_instance": 2},
        ),
        "instance_count=2, but compute 'local' (local) is this machine, one node",
    ),
    "a missing code folder": (dict(command="echo hi", code="./nowhere"), "is not a folder"),
    "a missing input": (
        dict(command="echo ${{inputs.d}}", inputs={"d": Input(path="./absent")}),
        "input 'd':",
    ),
    "an unknown distribution": (
        dict(command="echo hi", distribution={"type": "horovod"}),
        "distribution type 'horovod'",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_job_that_cannot_run_is_refused_and_starts_nothing(name, home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fields, message = BAD[name]
    with pytest.raises(ValidationException) as raised:
        MLClient().jobs.create_or_update(command(**fields))
    assert message in str(raised.value)
    assert api.runs(home=home) == []
