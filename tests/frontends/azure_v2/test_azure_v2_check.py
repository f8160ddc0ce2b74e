"""``jupyter-trainer azure check`` predicts what a v2 notebook or job file will do here, and
what breaks is what then breaks: a job YAML it says will break fails ``azure job create``
with the same message, and starts nothing; a compute that is no target breaks until the
target is added."""

from __future__ import annotations

import json
import shutil

import nbformat
from conftest import REPO
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from support.jt_cli import cli

from jupyter_trainer.api import runs as api

V2 = REPO / "tests" / "support" / "azure_v2"

CELLS = [
    "from azure.ai.ml import MLClient, command, Input\n"
    "from azure.ai.ml.dsl import pipeline\n"
    "from azure.ai.ml.entities import AmlCompute, ManagedOnlineEndpoint\n"
    "from azure.identity import DefaultAzureCredential",
    "ml_client = MLClient.from_config(DefaultAzureCredential())",
    '%pip install torch\ngpu_compute_target = "gpu-cluster"',
    "try:\n"
    "    ml_client.compute.get(gpu_compute_target)\n"
    "except Exception:\n"
    '    ml_client.begin_create_or_update(AmlCompute(name="gpu-cluster", max_instances=4))',
    "job = command(\n"
    '    code="../src",\n'
    '    command="python train.py --data ${{inputs.data}} --epochs ${{inputs.epochs}}",\n'
    '    inputs={"data": Input(type="uri_folder", path="../data"), "epochs": 2},\n'
    '    environment="AzureML-acpt-pytorch-2.2-cuda12.1@latest",\n'
    "    compute=gpu_compute_target,\n"
    '    distribution={"type": "pytorch", "process_count_per_instance": 2},\n'
    ")\n"
    "returned_job = ml_client.jobs.create_or_update(job)",
    'endpoint = ManagedOnlineEndpoint(name="numbers")\n'
    "ml_client.online_endpoints.begin_create_or_update(endpoint)",
    'sweep_job = job.sweep(sampling_algorithm="sobol", primary_metric="loss", goal="Minimize")',
]


def findings(path, home) -> tuple[int, dict]:
    done = cli("azure", "check", str(path), "--json", home=home)
    return done.returncode, json.loads(done.stdout)


def by_name(found: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in found["findings"]:
        out.setdefault(f["name"], []).append(f)
    return out


def test_check_predicts_a_missing_compute_and_the_refusals_of_a_notebook(home, tmp_path):
    shutil.copytree(V2, tmp_path / "v2")
    book = new_notebook(cells=[new_markdown_cell("# numbers"), *map(new_code_cell, CELLS)])
    path = tmp_path / "v2" / "notebooks" / "check_me.ipynb"
    nbformat.write(book, path)
    code, found = findings(path, home)
    names = by_name(found)
    assert code == 1
    [job] = names["command(...)"]
    assert job["verdict"] == "will break" and job["line"] == 12
    assert "compute 'gpu-cluster': unknown target 'gpu-cluster'" in job["note"]
    assert "jupyter-trainer target add gpu-cluster --kind KIND" in job["note"]
    for refused in ("azure.ai.ml.dsl.pipeline", "AmlCompute", "ManagedOnlineEndpoint"):
        assert names[refused][0]["verdict"] == "refused", names[refused]
    assert names["MLClient.online_endpoints"][0]["line"] == 22
    assert names["DefaultAzureCredential"][0]["verdict"] == "works differently"
    [sweep] = names[".sweep(...)"]
    assert sweep["verdict"] == "will break" and "sampling_algorithm 'sobol'" in sweep["note"]

    assert cli("target", "add", "gpu-cluster", "--kind", "local", home=home).returncode == 0
    code, found = findings(path, home)
    [job] = by_name(found)["command(...)"]
    assert job["verdict"] == "works differently" and "kernel's own environment" in job["note"]
    assert code == 1  # the endpoint and the pipeline are still refused
    assert api.runs(home=home) == []


def test_a_job_file_check_says_will_break_is_refused_by_job_create_with_the_same_words(
    home, tmp_path
):
    folder = tmp_path / "v2"
    shutil.copytree(V2, folder)
    text = (folder / "job.yml").read_text().replace("azureml:cpu-cluster", "local")
    (folder / "job.yml").write_text(text)
    (folder / "typo.yml").write_text(text.replace("${{inputs.epochs}}", "${{inputs.epoch}}"))
    (folder / "nodata.yml").write_text(text.replace("path: ./data", "path: ./no-such-data"))
    (folder / "pipe.yml").write_text("type: pipeline\njobs: {}\n")
    code, found = findings(folder, home)
    verdicts = {f["path"]: (f["verdict"], f["note"]) for f in found["findings"]}
    assert code == 1
    assert verdicts["job.yml"][0] == "works differently"
    assert verdicts["sweep.yml"][0] == "will break"  # its compute, cpu-cluster, is no target
    assert verdicts["pipe.yml"][0] == "refused"
    for name in ("typo.yml", "nodata.yml"):
        verdict, note = verdicts[name]
        assert verdict == "will break", (name, note)
        done = cli("azure", "job", "create", "--file", str(folder / name), home=home)
        assert done.returncode == 2 and note in done.stderr, (note, done.stderr)
    assert "${{inputs.epoch}}" in verdicts["typo.yml"][1]
    assert "no-such-data does not exist" in verdicts["nodata.yml"][1]
    assert api.runs(home=home) == []
