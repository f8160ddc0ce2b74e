"""The Azure ML SDK v1 project the tests run unchanged (``azureml_v1/proj``, its data in
``azureml_v1/data``): a ``ScriptRunConfig`` of its training script, and what that script
reports through ``Run.get_context()`` checked on a finished run."""

from __future__ import annotations

import pytest
from conftest import REPO, leftover

from jupyter_trainer.azureml.core import (
    Dataset,
    ScriptRunConfig,
)
from support.kube_fake.fixtures import kube_cluster  # noqa: F401 (a fixture)

V1 = REPO / "tests" / "support" / "azureml_v1"
PROJ = V1 / "proj"
DATA = V1 / "data"
NUMBERS = [1.0, 2.0, 3.0, 4.0]


def script_config(target="local", distributed=None, epochs=3, extra=(), environment=None):
    dataset = Dataset.File.from_files(path=str(DATA))
    return ScriptRunConfig(
        source_directory=str(PROJ),
        script="train.py",
        arguments=[
            "--data-dir",
            dataset.as_named_input("numbers").as_mount(),
            "--epochs",
            epochs,
            *extra,
        ],
        compute_target=target,
        environment=environment,
        distributed_job_config=distributed,
    )


def check_reported(run, ranks: int, epochs: int = 3, datasets=("numbers",), files=True) -> None:
    """What the unchanged script reported through ``Run.get_context()`` reached the run."""
    details = run.get_details()
    assert details["status"] == "Completed", details
    metrics = run.get_metrics()
    assert len(metrics["loss"]) == epochs and metrics["loss"][0] == pytest.approx(7.5)
    assert metrics["loss"] == sorted(metrics["loss"], reverse=True)  # it trains
    assert metrics["numbers"] == NUMBERS  # log_list: the next steps of one metric
    assert metrics["epoch_summary/epochs"] == epochs  # log_row: NAME/COLUMN
    # every rank logged, each at steps 0, 1, 2 (v1 numbered a metric's reports so)
    inner = run.run
    for rank in range(ranks):
        assert [step for step, _ in inner.metrics(rank=rank)["loss"]] == list(range(epochs))
    tags = run.get_tags()
    assert tags["world_size"] == str(ranks) and tags["script"] == "train.py", tags
    names = run.get_file_names()
    assert [f"user_logs/std_log_process_{r}.txt" for r in range(ranks)] == [
        f for f in names if f.startswith("user_logs/")
    ]
    log = inner.logs(0)
    assert f"run {run.id} of experiment {run.experiment.name}, rank 0 of {ranks}" in log
    assert f"input datasets: {sorted(datasets)}" in log
    assert leftover(run.id) == []
    if not files:
        return
    for name in (
        "outputs/model.pt",
        "outputs/summary.txt",
        "outputs/extra/summary-copy.txt",
        "outputs/images/numbers.png",
        "logs/notes.txt",
    ):
        assert name in names, names
    assert (inner.outputs / "images" / "numbers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
