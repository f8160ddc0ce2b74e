"""Azure ML SDK v1 code, run here: the training script of ``azureml_v1/proj`` (written as v1's
tutorials wrote them, and never edited) under every launcher and on Slurm, submitted through
the v1 names of ``jupyter_trainer.azureml``; and the same script with the real azureml-core
installed in its environment, which still reports here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.azureml_project import DATA, PROJ, check_reported, script_config
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (a fixture)
from support.kube_fake.testing import kube_target

from jupyter_trainer.api import runs as api
from jupyter_trainer.azureml.core import (
    ComputeTarget,
    Dataset,
    Environment,
    Experiment,
    ScriptRunConfig,
    Workspace,
)
from jupyter_trainer.azureml.core.runconfig import MpiConfiguration, PyTorchConfiguration
from jupyter_trainer.azureml.errors import ActivityFailedException
from jupyter_trainer.azureml.train.dnn import Mpi, PyTorch
from jupyter_trainer.core.errors import SpecError


def test_script_run_config_with_pytorch_configuration_reports_and_registers(home, tmp_path, capsys):
    ws = Workspace.from_config(path=str(tmp_path))
    target = ComputeTarget(workspace=ws, name="local")
    experiment = Experiment(ws, name="pytorch-birds")
    run = experiment.submit(
        script_config(target, PyTorchConfiguration(process_count=2, communication_backend="Gloo")),
        tags={"team": "vision"},
    )
    details = run.wait_for_completion(show_output=True)
    streamed = capsys.readouterr().out
    assert streamed.startswith(f"RunId: {run.id}\n")
    assert "Streaming user_logs/std_log_process_0.txt" in streamed
    assert "rank 0 of 2" in streamed and "Execution Summary" in streamed
    assert details["runDefinition"]["launcher"] == "torchrun"
    assert details["runDefinition"]["processCountPerNode"] == 2
    assert run.run.state["backend"] == "gloo"
    check_reported(run, ranks=2)
    assert run.get_tags()["team"] == "vision"  # tags given to submit
    shown = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer", "show", run.id], capture_output=True, text=True
    )
    assert "tags: script=train.py, team=vision, world_size=2" in shown.stdout, shown.stderr
    run.download_file(
        name="outputs/model.pt", output_file_path=str(tmp_path / "model" / "model.pt")
    )
    assert torch.load(tmp_path / "model" / "model.pt")["weight"].item() > 0
    model = run.register_model(
        model_name="pt-dnn", model_path="outputs/model.pt", tags={"area": "birds"}
    )
    assert (model.name, model.version, model.id) == ("pt-dnn", 1, "pt-dnn:1")
    assert model.tags == {"area": "birds"} and model.run_id == run.id
    assert Path(model.download(str(tmp_path / "dl"))).name == "model.pt"
    assert [r.id for r in experiment.get_runs()] == [run.id]
    assert experiment.name in ws.experiments and "pt-dnn" in ws.models
    assert api.get_run(run.id).spec.origin["azureml"] == {"experiment": "pytorch-birds"}


def test_mpi_configuration_runs_a_horovod_script_under_mpirun(home):
    ws = Workspace()
    run = Experiment(ws, "horovod").submit(
        script_config(distributed=MpiConfiguration(process_count_per_node=2), extra=["--horovod"])
    )
    run.wait_for_completion()
    assert run.run.spec.launch.launcher == "mpirun"
    check_reported(run, ranks=2)


def test_the_unchanged_script_under_horovodrun(home):
    dataset_args = ["--data-dir", "${{data.numbers}}", "--epochs", "3", "--horovod"]
    inner = api.submit(
        script=str(PROJ / "train.py"),
        source=str(PROJ),
        args=dataset_args,
        data={"numbers": str(DATA)},
        launcher="horovod",
        procs=2,
        name="hvd",
    )
    inner.wait()
    from jupyter_trainer.azureml.core.run import Run

    check_reported(Run(Experiment(Workspace(), "hvd"), inner.id, inner), ranks=2)


def test_the_pytorch_estimator_with_script_params_and_a_mounted_dataset(home):
    ws = Workspace()
    dataset = Dataset.File.from_files(path=str(DATA)).register(ws, "numbers")
    estimator = PyTorch(
        source_directory=str(PROJ),
        compute_target="local",
        entry_script="train.py",
        script_params={"--data-dir": dataset.as_mount(), "--epochs": 3, "--horovod": ""},
        node_count=1,
        process_count_per_node=2,
        distributed_training=Mpi(),
        pip_packages=["six==1.16.0"],
        use_gpu=True,
    )
    run = Experiment(ws, "estimator").submit(estimator)
    run.wait_for_completion()
    spec = run.run.spec
    assert (
        spec.code.args[:2] == ("--data-dir", "${{data.numbers}}")
        and spec.code.args[-1] == "--horovod"
    )
    assert spec.env.name == "train-env" and spec.launch.launcher == "mpirun"
    check_reported(run, ranks=2)


def test_on_a_slurm_target(cluster, home):
    ws = Workspace()
    run = Experiment(ws, "slurm").submit(
        script_config(
            ComputeTarget(ws, "cluster"),
            PyTorchConfiguration(process_count=2, communication_backend="Gloo"),
        )
    )
    run.wait_for_completion()
    assert run.run.spec.target.name == "cluster" and run.run.state["launcher"].get("job_id")
    check_reported(run, ranks=2)


def test_on_two_nodes_of_a_ray_cluster(rc, home):
    ws = Workspace()
    run = Experiment(ws, "ray").submit(
        script_config(
            ComputeTarget(ws, "rc"),
            PyTorchConfiguration(process_count=2, node_count=2, communication_backend="Gloo"),
        )
    )
    run.wait_for_completion()
    assert run.run.spec.target.name == "rc" and run.run.spec.launch.nodes == 2
    check_reported(run, ranks=2)


def test_a_failed_script_raises_activity_failed_with_its_traceback(home, tmp_path):
    proj = tmp_path / "proj"
    shutil.copytree(PROJ, proj)
    missing = tmp_path / "nothing-here"
    missing.mkdir()  # the script fails to open numbers.txt
    config = ScriptRunConfig(
        source_directory=str(proj),
        script="train.py",
        arguments=["--data-dir", Dataset.File.from_files(str(missing)).as_mount()],
    )
    run = Experiment(Workspace(), "fails").submit(config)
    with pytest.raises(ActivityFailedException) as info:
        run.wait_for_completion()
    assert "numbers.txt" in str(info.value) and info.value.run_id == run.id
    assert run.get_status() == "Failed"
    assert "numbers.txt" in run.get_details()["error"]["error"]["message"]


def test_the_real_azureml_core_in_the_environment_still_reports_here(home):
    """A named environment with azureml-core from PyPI: its ``Run.get_context()`` would be an
    offline run that logs nowhere; the run's own ``azureml`` comes first."""
    env = Environment("with-azureml")
    env.python.conda_dependencies.add_pip_package("azureml-core==1.60.0")
    from jupyter_trainer.azureml.core.environment import V1Note

    with pytest.warns(V1Note, match="azureml-core==1.60.0"):
        assert env.definition() is None  # left out of a v1 environment: the run's is used
    from jupyter_trainer.environment.manage import define, from_line

    define(from_line("real-azureml", pip=["azureml-core==1.60.0", "setuptools<81"], inherit=True))
    inner = api.submit(
        script=str(PROJ / "train.py"),
        source=str(PROJ),
        args=["--data-dir", "${{data.numbers}}"],
        data={"numbers": str(DATA)},
        env="real-azureml",
        launcher="python",
        name="real",
    )
    inner.wait()
    python = inner.state["environment"]["python"]
    import subprocess

    real = subprocess.run(
        [python, "-c", "import azureml.core, sys; print(azureml.core.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "site-packages" in real  # the environment has the real package
    from jupyter_trainer.azureml.core.run import Run

    check_reported(Run(Experiment(Workspace(), "real"), inner.id, inner), ranks=1)


def test_a_data_placeholder_without_its_input_is_refused_before_anything_exists(home):
    with pytest.raises(SpecError, match=r"data inputs are: none; add --data numbers=PATH"):
        api.submit(
            script=str(PROJ / "train.py"),
            source=str(PROJ),
            args=["--data-dir", "${{data.numbers}}"],
        )
    with pytest.raises(SpecError, match=r"params are: none; add --param lr=VALUE"):
        api.submit(script=str(PROJ / "train.py"), source=str(PROJ), args=["--lr", "${{params.lr}}"])
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


@pytest.mark.parametrize("kube_cluster", [{"trainjob_api": True}], indirect=True)
def test_on_a_kubernetes_target_through_a_trainjob(home, kube_cluster):

    kube_target(home, kube_cluster, "trainjob")
    ws = Workspace()
    # Data inputs on Kubernetes need a shared volume (workdir_pvc), which the fake cluster
    # has not: the data is given as a path the pods see, as a v1 job could give a mount.
    config = ScriptRunConfig(
        source_directory=str(PROJ),
        script="train.py",
        arguments=["--data-dir", str(DATA), "--epochs", 3],
        compute_target=ComputeTarget(ws, "kube"),
        distributed_job_config=PyTorchConfiguration(
            process_count=4, node_count=2, communication_backend="Gloo"
        ),
    )
    run = Experiment(ws, "kube").submit(config)
    run.wait_for_completion()
    spec = run.run.spec
    assert (spec.launch.nodes, spec.launch.procs, spec.target.name) == (2, 2, "kube")
    check_reported(run, ranks=4, datasets=(), files=False)  # outputs stay in the pods' volumes
