"""Notebooks written for Azure ML SDK v1, from its documentation's examples
(``azureml_v1/notebooks``), run to the end under papermill once their ``azureml`` import
lines, and nothing else, are changed to ``jupyter_trainer.azureml``. Their training script
(``azureml_v1/proj/train.py``) is not changed at all."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import nbformat
import papermill
import pytest
from conftest import REPO, leftover
from support.ssh_hosts import add_pair_target

from jupyter_trainer.api import models
from jupyter_trainer.api import runs as api
from jupyter_trainer.api.sweeps.functions import sweeps

V1 = REPO / "tests" / "support" / "azureml_v1"
IMPORT_LINE = re.compile(r"^(\s*(?:from|import)\s+)azureml\b", re.M)


def rewrite_command() -> str:
    """The command docs/azureml.md gives to change a notebook's import lines."""
    doc = (REPO / "docs" / "azureml.md").read_text()
    [line] = [line for line in doc.splitlines() if line.startswith("find birds.ipynb ")]
    return line


def port(tmp_path, name: str):
    """A copy of the v1 folder whose notebook ``name`` has its azureml import lines changed
    by the command docs/azureml.md gives, and only those: every line that differs from the
    original is one of them."""
    folder = tmp_path / "v1"
    shutil.copytree(V1, folder)
    path = folder / "notebooks" / name
    before = nbformat.read(path, as_version=4)
    command = rewrite_command().replace("find birds.ipynb ", f"find {shlex.quote(str(path))} ")
    subprocess.run(["bash", "-c", command], check=True)
    after = nbformat.read(path, as_version=4)
    for old, new in zip(before.cells, after.cells, strict=True):
        changed = [
            (a, b)
            for a, b in zip(old.source.splitlines(), new.source.splitlines(), strict=True)
            if a != b
        ]
        assert all(IMPORT_LINE.match(a) and "jupyter_trainer" in b for a, b in changed), changed
    return path


def execute(path, **parameters):
    out = path.with_suffix(".out.ipynb")
    papermill.execute_notebook(
        str(path),
        str(out),
        parameters=parameters,
        kernel_name="python3",
        cwd=str(path.parent),
        progress_bar=False,
    )
    book = nbformat.read(out, as_version=4)
    return "".join(
        o.get("text", "") + o.get("data", {}).get("text/plain", "")
        for cell in book.cells
        if cell.cell_type == "code"
        for o in cell.get("outputs", [])
    )


def only_run(home, experiment: str) -> api.Run:
    found = [
        r
        for r in api.runs(home=home)
        if r.spec.origin.get("azureml", {}).get("experiment") == experiment
    ]
    assert len(found) == 1, found
    return found[0]


def test_script_run_config_with_pytorch_configuration_on_two_ssh_nodes(pair, home, tmp_path):
    add_pair_target("gpu-cluster", home, tmp_path)
    path = port(tmp_path, "pytorch_distributed.ipynb")
    text = execute(path, epochs=3)
    run = only_run(home, "pytorch-distr")
    assert (
        run.status == "completed"
        and run.spec.launch.nodes == 2
        and run.spec.target.name == "gpu-cluster"
    )
    assert "Found existing compute target." in text and "Completed" in text
    assert f"run {run.id} of experiment pytorch-distr, rank 0 of 2" in text  # the streamed log
    assert "outputs/model.pt" in text and "user_logs/std_log_process_1.txt" in text
    assert [v for _, v in run.metrics(rank=1)["loss"]][0] == pytest.approx(7.5)
    assert run.spec.env.name == "pytorch-env"
    assert (path.parent / "model" / "model.pt").stat().st_size > 0
    model = models.get_model("pytorch-distr", home=home)
    assert model.version == 1 and model.run == run.id
    assert "pytorch-distr\tpytorch-distr:1\t1" in text
    assert leftover(run.id) == []


def test_mpi_configuration_with_horovod_on_the_local_target(home, tmp_path):
    text = execute(port(tmp_path, "horovod_mpi.ipynb"))
    run = only_run(home, "horovod-mpi")
    assert run.status == "completed" and run.spec.launch.launcher == "mpirun"
    assert run.spec.launch.procs == 2 and "Completed" in text
    assert run.tags["world_size"] == "2"


def test_the_pytorch_estimator_with_script_params_and_an_uploaded_dataset(home, tmp_path):
    text = execute(port(tmp_path, "pytorch_estimator.ipynb"))
    run = only_run(home, "estimator")
    assert run.status == "completed"
    assert (home / "datastore" / "workspaceblobstore" / "numbers" / "numbers.txt").exists()
    assert run.spec.data[0].source == str(home / "datastore" / "workspaceblobstore" / "numbers")
    assert "estimated:1" in text and "input datasets: ['input_1']" in text


def test_a_hyperdrive_sweep_with_the_bandit_policy(home, tmp_path):
    text = execute(port(tmp_path, "hyperdrive.ipynb"), total_runs=3)
    [sweep] = sweeps(home=home)
    assert sweep.status == "completed" and sweep.spec.prune == "bandit:0.1"
    assert (sweep.spec.metric, sweep.spec.goal, sweep.spec.trials, sweep.spec.parallel) == (
        "accuracy",
        "max",
        3,
        2,
    )
    best = sweep.best()
    assert best is not None and f"{best.id} " in text and "tuned:1" in text
    lr = best.spec.params["learning_rate"]
    assert 0.01 <= lr <= 0.3
    assert best.spec.code.args[-4:] == (
        "--learning-rate",
        "${{params.learning_rate}}",
        "--epochs",
        "${{params.epochs}}",
    )
    assert f"RunId: {sweep.id}" in text  # wait_for_completion(show_output=True) streams
    for number, trial in enumerate(sweep.trials()):
        assert re.search(rf"trial {number}: {trial.id} (completed|pruned) objective=", text)
        assert leftover(trial.id) == []


def test_the_first_cells_of_a_v1_sample_and_a_job_that_names_the_nodes_variables(home, tmp_path):
    """v1's samples open by printing ``azureml.core.VERSION`` after a bare
    ``import azureml.core``, turning diagnostics on, and printing the compute target's
    ``get_status().serialize()``; a v1 job leaves ``PyTorchConfiguration``'s backend at its
    default on a CPU target (the script picks Gloo) and names the node's variables
    (``$AZ_BATCHAI_JOB_MASTER_NODE_IP``) in its arguments, which v1's shell expanded. The
    workspace's Azure identifiers are strings, as v1's were, so printing them with ``+`` works
    without a config.json."""
    path = port(tmp_path, "first_cells.ipynb")
    book = nbformat.read(path, as_version=4)
    assert "from jupyter_trainer import azureml" in book.cells[1].source
    # a markdown cell shows the training script's lines, which stay v1's
    assert "from azureml.core.run import Run\nimport azureml.core\n" in book.cells[-1].source
    text = execute(path)
    assert "SDK version: " in text and "Found existing compute target." in text
    assert "Subscription id: \nResource group: " in text, text[:2000]
    assert "nothing is sent" in text and "'provisioningState': 'Succeeded'" in text
    run = only_run(home, "first-cells")
    assert run.status == "completed" and run.spec.launch.backend is None
    assert run.spec.code.args == (
        "--master",
        "${{env.AZ_BATCHAI_JOB_MASTER_NODE_IP}}",
        "--node-rank",
        "${{env.AZUREML_CR_NODE_RANK}}",
        "--note",
        "price in $",
    )
    logs = run.logs(0) + run.logs(1)
    assert "master localhost node 0 rank 0 note price in $" in logs, logs
    assert "master localhost node 0 rank 1" in logs, logs
    assert "Completed 2.0" in text or "Completed [2.0, 2.0]" in text, text[-1500:]
    assert leftover(run.id) == []
