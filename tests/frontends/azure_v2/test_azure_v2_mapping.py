"""How v2's values map, without starting anything: distributions onto launchers,
environments onto environment definitions, sweep expressions and policies onto a sweep's,
``--set`` onto a job file, model paths onto a job's outputs."""

from __future__ import annotations

import pytest

from jupyter_trainer.azure.ai.ml.entities import Environment, MpiDistribution
from jupyter_trainer.azure.ai.ml.entities.distribution import launch_of
from jupyter_trainer.azure.ai.ml.entities.environment import environment_of
from jupyter_trainer.azure.ai.ml.entities.model import job_output
from jupyter_trainer.azure.ai.ml.sweep import (
    BanditPolicy,
    Choice,
    LogUniform,
    MedianStoppingPolicy,
    Randint,
    TruncationSelectionPolicy,
)
from jupyter_trainer.azure.ai.ml.sweep.expressions import distribution_of
from jupyter_trainer.azure.ai.ml.yaml_job import override
from jupyter_trainer.azureml.core.environment import V1Note


def test_distributions_become_launchers():
    assert launch_of({"type": "PyTorch", "process_count_per_instance": 2}, 1) == {
        "launcher": "torchrun",
        "nodes": 1,
        "procs": 2,
    }
    assert launch_of(MpiDistribution(process_count_per_instance=3), 2)["launcher"] == "mpirun"
    assert launch_of(None, None) == {"launcher": "python", "nodes": 1, "procs": 1}


def test_a_conda_file_adds_its_packages_without_azures_own(home):
    conda = {
        "name": "train",
        "dependencies": ["python=3.11", "pip", {"pip": ["tqdm", "azureml-mlflow", "mlflow"]}],
    }
    with pytest.warns(V1Note, match="azureml-mlflow"):
        env = environment_of(
            Environment(name="train-env", image="mcr.microsoft.com/azureml/x", conda_file=conda),
            {},
        )
    definition = env.definition(home)
    assert definition is not None and set(definition.pip) == {"tqdm", "mlflow"}


def test_curated_names_in_every_spelling_are_the_kernels_environment():
    for name in (
        "AzureML-acpt-pytorch-2.2-cuda12.1@latest",
        "azureml:AzureML-sklearn-1.5:3",
        "azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
    ):
        with pytest.warns(V1Note, match="kernel's own environment"):
            assert environment_of(name, {}).definition() is None


def test_sweep_expressions_and_policies():
    assert Choice(values=[1, 2]).expression() == "choice(1, 2)"
    assert Randint(upper=4).expression() == "randint(0, 4)"
    assert LogUniform(min_value=0, max_value=1).expression().startswith("loguniform(1.0, 2.71")
    found = distribution_of({"type": "uniform", "min_value": 0.1, "max_value": 1})
    assert found is not None and found.expression() == "uniform(0.1, 1)"
    assert BanditPolicy(slack_amount=0.2, delay_evaluation=3).options() == {
        "prune": "bandit:amount=0.2",
        "prune_every": 1,
        "prune_after": 3,
    }
    assert MedianStoppingPolicy(evaluation_interval=2).options()["prune"] == "median"
    assert TruncationSelectionPolicy(truncation_percentage=20).options()["prune"] == (
        "truncation:20"
    )


def test_set_overrides_dotted_keys_with_yaml_values():
    data = {"compute": "azureml:cpu", "inputs": {"epochs": 3}}
    assert override(data, ["compute=local", "inputs.epochs=2", "limits.max_total_trials=4"]) == {
        "compute": "local",
        "inputs": {"epochs": 2},
        "limits": {"max_total_trials": 4},
    }


def test_model_paths_name_a_jobs_outputs():
    assert job_output("azureml://jobs/r1/outputs/model") == ("r1", "model")
    assert job_output("azureml://jobs/r1/outputs/model/paths/sub/w.pt") == ("r1", "model/sub/w.pt")
    assert job_output("azureml://jobs/r1/outputs/artifacts/paths/outputs/") == ("r1", ".")
    assert job_output("azureml://jobs/r1/outputs/artifacts/paths/model/") == ("r1", "model")
    assert job_output("runs:/r1/model") == ("r1", "model")
