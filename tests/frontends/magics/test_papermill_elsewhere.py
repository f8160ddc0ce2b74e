"""A notebook run headless by a papermill installed in another environment, as a newcomer
with papermill from pipx or a second virtual environment runs it: the trap the docs name
(``python3`` is that papermill's own Python) and the way out they give (this environment's
Python registered as a kernel and named with ``-k``), followed word for word, with a PATH
that does not hold this environment's ``bin`` folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import uv

from jupyter_trainer.api import runs as api

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(scope="module")
def papermill_elsewhere(tmp_path_factory) -> Path:
    """A virtual environment with papermill and nothing of this project (uv's cache)."""
    folder = tmp_path_factory.mktemp("elsewhere") / "venv"
    uv_bin = uv.find_uv_bin()
    subprocess.run([uv_bin, "venv", "-q", "--python", sys.executable, str(folder)], check=True)
    subprocess.run(
        [uv_bin, "pip", "install", "-q", "--python", str(folder / "bin" / "python"), "papermill"],
        check=True,
        timeout=300,
    )
    return folder / "bin" / "papermill"


def notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext jupyter_trainer"),
        nbformat.v4.new_code_cell(
            "%%train --name elsewhere\nimport sys\nfrom jupyter_trainer import runtime as jt\n"
            "jt.log(step=0, ok=1)\nprint('rank python', sys.executable)"
        ),
    ]
    nbformat.write(nb, path)


def test_papermill_from_another_environment_runs_the_notebook_through_the_registered_kernel(
    papermill_elsewhere, home, tmp_path
):
    source, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    notebook(source)
    env = {
        **os.environ,
        "JUPYTER_DATA_DIR": str(tmp_path / "jupyter"),  # where `--user` puts kernels here
        "PATH": os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != VENV_BIN),
    }
    env.pop("JUPYTER_PATH", None)
    trapped = subprocess.run(
        [str(papermill_elsewhere), str(source), str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert trapped.returncode != 0
    assert "No such kernel named python3" in trapped.stderr  # the docs' words for it

    # The docs' way out: register this environment's Python once, then name it.
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--user", "--name", "jupyter-trainer"],
        check=True, capture_output=True, env=env, timeout=120,
    )  # fmt: skip
    done = subprocess.run(
        [str(papermill_elsewhere), "-k", "jupyter-trainer", str(source), str(out)],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = api.runs(home=home)
    assert run.name == "elsewhere" and run.status == "completed"
    assert run.metrics()["ok"][-1][1] == 1
    assert f"rank python {sys.executable}" in run.logs()  # the kernel's own interpreter


def test_the_docs_give_both_failures_and_the_way_out():
    text = (REPO / "docs" / "notebook.md").read_text()
    for words in (
        "No module named 'jupyter_trainer'",
        "No such kernel named python3",
        ".venv/bin/python -m ipykernel install --user --name jupyter-trainer",
        "papermill -k jupyter-trainer IN.ipynb OUT.ipynb",
    ):
        assert words in " ".join(text.split()), words
