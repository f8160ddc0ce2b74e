"""Notebooks executed headless by papermill: charts and summary are plain outputs, and a
failed run fails the notebook."""

from __future__ import annotations

import base64

import nbformat
import papermill
import pytest
from conftest import REPO, launched_by

import jupyter_trainer as jt
from jupyter_trainer.api import runs as api


def outputs_of(nb):
    for cell in nb.cells:
        if cell.cell_type == "code":
            yield from cell.get("outputs", [])


def test_quickstart_runs_headless_with_chart_and_summary(home, tmp_path, launch_mode):
    out = tmp_path / "quickstart.out.ipynb"
    papermill.execute_notebook(
        str(REPO / "notebooks" / "quickstart.ipynb"),
        str(out),
        parameters={"epochs": 10},
        kernel_name="python3",
        cwd=str(REPO / "notebooks"),
        progress_bar=False,
    )
    nb = nbformat.read(out, as_version=4)
    outs = list(outputs_of(nb))
    pngs = [o for o in outs if "image/png" in o.get("data", {})]
    assert len(pngs) == 2  # loss and acc
    assert all(base64.b64decode(o["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n" for o in pngs)
    summary = [
        o["data"]["text/plain"]
        for o in outs
        if "jt-summary" in o.get("data", {}).get("text/html", "")
    ]
    assert len(summary) == 1 and " completed in " in summary[0] and "acc" in summary[0]
    run = api.runs(home=home)[0]
    assert run.status == "completed" and run.spec.params["epochs"] == 10
    assert run.metrics()["acc"][-1][1] > 0.9
    assert (run.outputs / "model.pt").stat().st_size > 0
    assert launched_by(run) == launch_mode


def test_failed_run_fails_the_notebook(home, tmp_path, launch_mode):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext jupyter_trainer"),
        nbformat.v4.new_code_cell("limit = 2", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            "%%train --procs 2 --name headless-fail\n"
            "from jupyter_trainer import runtime as jt\n"
            "for step in range(5):\n"
            "    jt.log(step=step, x=step)\n"
            "    if step > limit and jt.rank == 0:\n"
            "        raise RuntimeError(f'diverged at step {step}')\n"
        ),
        nbformat.v4.new_code_cell("print('must not run')"),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    src, out = tmp_path / "fail.ipynb", tmp_path / "fail.out.ipynb"
    nbformat.write(nb, src)
    with pytest.raises(papermill.PapermillExecutionError) as info:
        papermill.execute_notebook(
            str(src), str(out), parameters={"limit": 1}, kernel_name="python3", progress_bar=False
        )
    assert info.value.ename == "RunFailed"
    assert "RuntimeError: diverged at step 2" in info.value.evalue
    executed = nbformat.read(out, as_version=4)
    train = next(c for c in executed.cells if c.source.startswith("%%train"))
    error = [o for o in train.outputs if o.output_type == "error"][0]
    assert any("raise RuntimeError(f'diverged at step {step}')" in line for line in error.traceback)
    assert any(
        "rank 0 failed first" in o.get("data", {}).get("text/plain", "") for o in train.outputs
    )
    last = next(c for c in executed.cells if c.source.startswith("print('must not run')"))
    assert last.get("outputs") == []
    assert launched_by(api.runs(home=home)[0]) == launch_mode


def test_a_sweep_notebook_runs_headless_with_its_table_and_charts(home, tmp_path):
    out = tmp_path / "sweep.out.ipynb"
    papermill.execute_notebook(
        str(REPO / "notebooks" / "sweep.ipynb"),
        str(out),
        parameters={"trials": 4, "epochs": 4},
        kernel_name="python3",
        cwd=str(REPO / "notebooks"),
        progress_bar=False,
    )
    outs = list(outputs_of(nbformat.read(out, as_version=4)))
    sweep = jt.sweeps(home=home)[0]
    state = sweep.state
    assert state["status"] == "completed" and len(state["trials"]) == 4
    tables = [
        o["data"]["text/plain"]
        for o in outs
        if "jt-summary" in o.get("data", {}).get("text/html", "")
    ]
    assert len(tables) == 1 and f"sweep {sweep.id}: completed, 4 of 4 trials" in tables[0]
    for trial in state["trials"]:
        assert f"{trial['number']}  {trial['status']}" in tables[0]
        assert trial["run"] in tables[0]
    pngs = [o for o in outs if "image/png" in o.get("data", {})]
    assert [o["data"]["text/plain"].split()[0] for o in pngs] == [
        "<best-so-far",
        "<parallel-coordinates",
    ]
    assert all(base64.b64decode(o["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n" for o in pngs)
    best = state["best"]
    printed = "".join(o.get("text", "") for o in outs if o.get("output_type") == "stream")
    assert f"best trial {best['number']}: acc {best['objective']:.3f}" in printed
    for run in sweep.trials():
        assert run.spec.launch.procs == 2 and run.spec.params["epochs"] == 4
        assert run.spec.params["hidden"] in (16, 32, 64) and 1e-3 <= run.spec.params["lr"] <= 0.3


def test_the_data_and_models_notebook_runs_the_whole_loop(home, tmp_path):
    """Data from a folder, the run's files, ONNX checked by onnxruntime, a registered model
    with lineage, TensorBoard event files and the MLflow mirror (a local SQLite store)."""
    out = tmp_path / "data.out.ipynb"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    papermill.execute_notebook(
        str(REPO / "notebooks" / "data_and_models.ipynb"),
        str(out),
        parameters={"epochs": 6, "mlflow_uri": uri},
        kernel_name="python3",
        cwd=str(tmp_path),
        progress_bar=False,
    )
    printed = "".join(
        o.get("text", "")
        for o in outputs_of(nbformat.read(out, as_version=4))
        if o.get("output_type") == "stream"
    )
    run = api.runs(home=home)[0]
    assert run.status == "completed" and run.spec.data[0].name == "digits"
    assert (tmp_path / "exported" / "digits.onnx").read_bytes() == (
        run.outputs / "digits.onnx"
    ).read_bytes()
    model = jt.get_model("digits", home=home)
    assert model.version == 1 and model.lineage["run_id"] == run.id
    assert model.lineage["data"][0]["hash"] == run.spec.data[0].hash
    assert "onnxruntime within tolerance: True" in printed
    # loss and acc, 6 epochs, 2 ranks; and the system figures the ranks sampled, which a run
    # that takes over the default 5 s (a loaded machine) has
    sampled = sum(len(points) for rank in (0, 1) for points in run.system(rank).values())
    assert f"{24 + sampled} values written" in printed, (sampled, printed)
    assert (tmp_path / "tensorboard-logs" / run.id).is_dir()
    assert run.state["mlflow"]["status"] == "synced"
    assert "[('digits', 1)]" in printed  # the version in MLflow's registry
