"""A notebook written as Azure ML SDK v2's public examples are (``azure_v2/notebooks``): a
``command()`` job on two torchrun ranks with a ``uri_folder`` input, the model registered
from its output, and a sweep of its learning rate with a Bandit policy. It runs to the end
under papermill once its import lines, and nothing else, are changed by the command
docs/azure-v2.md gives; its compute keeps its name, added here as a local target."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import nbformat
import papermill
import torch
from conftest import REPO, leftover
from support.jt_cli import cli

from jupyter_trainer.api import models
from jupyter_trainer.api import runs as api
from jupyter_trainer.api.sweeps.functions import sweeps

V2 = REPO / "tests" / "support" / "azure_v2"
IMPORT_LINE = re.compile(r"^(\s*)from\s+azure\.(ai\.ml|identity)\b", re.M)


def rewrite_command() -> str:
    """The command docs/azure-v2.md gives to change a notebook's import lines."""
    doc = (REPO / "docs" / "azure-v2.md").read_text()
    [line] = [line for line in doc.splitlines() if line.startswith("find my-notebooks ")]
    return line


def port(tmp_path, name: str):
    """A copy of the v2 folder whose notebook ``name`` has only its import lines changed."""
    folder = tmp_path / "v2"
    shutil.copytree(V2, folder)
    path = folder / "notebooks" / name
    before = nbformat.read(path, as_version=4)
    command = rewrite_command().replace("find my-notebooks ", f"find {shlex.quote(str(path))} ")
    subprocess.run(["bash", "-c", command], check=True)
    after = nbformat.read(path, as_version=4)
    changed = [
        (a, b)
        for old, new in zip(before.cells, after.cells, strict=True)
        for a, b in zip(old.source.splitlines(), new.source.splitlines(), strict=True)
        if a != b
    ]
    assert changed and all(
        IMPORT_LINE.match(a) and "jupyter_trainer.azure" in b for a, b in changed
    )
    return path


def execute(path, **parameters) -> str:
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


def test_a_v2_notebook_runs_its_distributed_job_registers_its_model_and_sweeps(
    home, tmp_path, monkeypatch
):
    # the script's mlflow.log_metric calls are the run's metrics (and the sweep's objective);
    # with no tracking server they would also fill an mlflow.db in each rank's folder
    monkeypatch.setenv("JUPYTER_TRAINER_TRACKERS", "here")
    assert cli("target", "add", "gpu-cluster", "--kind", "local", home=home).returncode == 0
    path = port(tmp_path, "pytorch_sweep.ipynb")
    text = execute(path, epochs=3, total_trials=2)
    [run] = [r for r in api.runs(home=home) if r.spec.sweep is None]
    assert run.status == "completed" and run.spec.target.name == "gpu-cluster"
    assert (run.spec.launch.launcher, run.spec.launch.procs) == ("torchrun", 2)
    assert [d.name for d in run.spec.data] == ["data"]
    logs = run.logs(0) + run.logs(1)
    assert "rank 0 of 2 epoch 2" in logs and "rank 1 of 2 epoch 2" in logs, logs
    assert f"RunId: {run.id}" in text and "rank 0 of 2 epoch 0 loss 7.5000" in text
    model = models.get_model("numbers-model", home=home)
    assert model.version == 1 and model.run == run.id
    assert "registered numbers-model 1" in text
    saved = torch.load(path.parent / "downloaded" / "named-outputs" / "model" / "model.pt")
    assert saved["weight"].shape == (1,)
    [sweep] = sweeps(home=home)
    assert sweep.status == "completed" and sweep.spec.prune == "bandit:0.1"
    assert (sweep.spec.metric, sweep.spec.goal, sweep.spec.trials) == ("loss", "min", 2)
    best = sweep.best()
    assert best is not None and f"best trial {best.id}" in text
    assert 0.01 <= best.spec.params["learning_rate"] <= 0.2
    assert best.spec.launch.procs == 2
    assert [v for _, v in run.metrics(rank=1)["loss"]][0] == 7.5  # captured on every rank
    for trial in [run, *sweep.trials()]:
        assert leftover(trial.id) == []
