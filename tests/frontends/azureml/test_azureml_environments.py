"""v1 environments as v1 notebooks define them: a curated name written in any case, a
``docker.base_image`` on a target that cannot run images, and a conda file that asks for a
Python no PyTorch 2 runs on. Each is answered when it is submitted, in v1's words, before
anything is defined or started."""

from __future__ import annotations

import sys

import pytest
from support.azureml_project import DATA, PROJ

from jupyter_trainer.azureml.core import (
    Dataset,
    Environment,
    Experiment,
    ScriptRunConfig,
    Workspace,
)
from jupyter_trainer.azureml.core.environment import V1Note
from jupyter_trainer.azureml.errors import UserErrorException


def job(env: Environment) -> ScriptRunConfig:
    return ScriptRunConfig(
        source_directory=str(PROJ),
        script="train.py",
        arguments=["--data-dir", Dataset.File.from_files(str(DATA)).as_mount()],
        environment=env,
    )


def nothing_made(home) -> bool:
    runs = home / "runs"
    definitions = home / "environments" / "definitions"
    return not (runs.exists() and any(runs.iterdir())) and not definitions.exists()


def test_a_curated_name_in_lower_case_is_the_kernels_environment(home):
    """Azure matched curated names in any case; v1 samples write them both ways."""
    with pytest.warns(V1Note, match="is an image of Azure's"):
        env = Environment.get(Workspace(), "azureml-acpt-pytorch-2.2-cuda12.1")
    assert env.definition() is None  # the kernel's own environment
    run = Experiment(Workspace(), "curated").submit(job(env))
    run.wait_for_completion()
    assert run.get_status() == "Completed"


def test_a_docker_base_image_on_the_local_target_is_refused_with_v1s_fix(home):
    env = Environment("with-image")
    env.docker.base_image = "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04"
    env.python.conda_dependencies.add_pip_package("numpy")
    with pytest.raises(UserErrorException) as info:
        Experiment(Workspace(), "image").submit(job(env))
    message = str(info.value)
    assert "compute target 'local' (local)" in message
    assert "env.docker.base_image = None" in message and "image:" not in message
    assert nothing_made(home)


def test_a_job_over_two_nodes_on_a_local_target_is_refused_in_v1s_words(home):
    """v1's distributed samples ask their cluster for two nodes; a target of this machine
    under the cluster's name has one, and the answer names node_count and the target."""
    from jupyter_trainer.azureml.core.compute import ComputeTarget
    from jupyter_trainer.azureml.core.runconfig import PyTorchConfiguration
    from jupyter_trainer.targets.registry import add_target

    add_target("gpu-cluster", "local", home=home)
    src = ScriptRunConfig(
        source_directory=str(PROJ),
        script="train.py",
        compute_target=ComputeTarget(Workspace(), "gpu-cluster"),
        distributed_job_config=PyTorchConfiguration(process_count=2, node_count=2),
    )
    with pytest.raises(UserErrorException) as info:
        Experiment(Workspace(), "two-nodes").submit(src)
    message = str(info.value)
    assert "node_count=2" in message and "'gpu-cluster' (local)" in message, message
    assert "--nodes" not in message and "jupyter-trainer target add gpu-cluster" in message
    assert nothing_made(home)


def test_a_conda_file_asking_for_python_3_6_is_refused_in_v1s_words(home, tmp_path):
    conda = tmp_path / "conda_dependencies.yml"
    conda.write_text("name: old\ndependencies:\n  - python=3.6\n  - pip:\n    - numpy\n")
    env = Environment.from_conda_specification(name="old", file_path=str(conda))
    kernel = f"{sys.version_info.major}.{sys.version_info.minor}"
    with pytest.raises(UserErrorException) as info:
        Experiment(Workspace(), "old-python").submit(job(env))
    message = str(info.value)
    assert "asks for Python 3.6 (its conda dependencies' python= line)" in message
    assert f"change it to python={kernel}" in message and "%%environment" not in message
    assert nothing_made(home)


def test_a_v1_script_runs_on_its_own_as_v1_tutorials_try_it(home, tmp_path):
    """v1's ``!python train.py`` before submitting: the script's ``azureml.core.run`` is
    found through ``azureml run`` (or ``azureml path`` on PYTHONPATH), and its run is an
    offline one that prints what it logs."""
    import subprocess

    from support.jt_cli import cli

    done = cli(
        "azureml", "run", str(PROJ / "train.py"), "--data-dir", str(DATA), "--epochs", "1",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "of experiment offline, rank 0 of 1" in done.stdout
    folder = cli("azureml", "path").stdout.strip()
    plain = [sys.executable, str(PROJ / "train.py"), "--data-dir", str(DATA), "--epochs", "1"]
    alone = subprocess.run(plain, capture_output=True, text=True, cwd=tmp_path)
    assert "No module named 'azureml'" in alone.stderr  # what the tutorial's line met
    found = subprocess.run(
        plain, capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": folder}
    )
    assert found.returncode == 0 and "of experiment offline" in found.stdout, found.stderr


def test_an_upload_that_keeps_stale_files_says_so(home, tmp_path, capsys):
    """``upload_directory(overwrite=False)`` keeps what the datastore already has, as v1
    did, and says which files it kept that differ from the source, with the fix."""
    from jupyter_trainer.azureml.core import Dataset

    source = tmp_path / "data"
    source.mkdir()
    (source / "same.txt").write_text("same")
    (source / "rows.txt").write_text("old rows")
    store = Workspace().get_default_datastore()
    Dataset.File.upload_directory(src_dir=str(source), target=(store, "numbers"))
    (source / "rows.txt").write_text("new rows")
    (source / "more.txt").write_text("more")
    capsys.readouterr()
    Dataset.File.upload_directory(src_dir=str(source), target=(store, "numbers"))
    said = capsys.readouterr().out
    assert "Uploaded 1 file of" in said
    assert "Kept 1 file already at workspaceblobstore/numbers that differ" in said, said
    assert "rows.txt; pass overwrite=True to replace them" in said
    kept = home / "datastore" / "workspaceblobstore" / "numbers" / "rows.txt"
    assert kept.read_text() == "old rows"
    Dataset.File.upload_directory(src_dir=str(source), target=(store, "numbers"), overwrite=True)
    assert kept.read_text() == "new rows"
