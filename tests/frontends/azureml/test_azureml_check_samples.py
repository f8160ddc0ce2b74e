"""``azureml check`` on notebooks shaped as v1's public samples are: a ``%%writefile`` cell
that writes a conda file (not Python) or the training script (Python, run inside a run), and
the compute target found in ``try`` with provisioning in ``except ComputeTargetException:``,
a branch never reached once the target is added here. The check stays green for them, and
names cells as the notebook numbers them."""

from __future__ import annotations

import json

from support.jt_cli import cli

from jupyter_trainer.azureml.check import DIFFERS, FALLBACK, REFUSED, check_path


def cell(kind: str, text: str) -> dict:
    return {
        "cell_type": kind,
        "metadata": {},
        "source": text,
        "outputs": [],
        "execution_count": None,
    }


SAMPLE = [
    cell("markdown", "# A sample"),
    cell("code", "from azureml.core import Workspace\nws = Workspace.from_config()"),
    cell("markdown", "## Its environment"),
    cell(
        "code",
        "%%writefile conda_dependencies.yml\nchannels:\n  - conda-forge\ndependencies:\n"
        "  - python=3.11\n  - pip:\n    - azureml-defaults\n",
    ),
    cell(
        "code",
        "%%writefile train.py\nfrom azureml.core.run import Run\nrun = Run.get_context()\n"
        "run.log('loss', 0.5)\n",
    ),
    cell(
        "code",
        "from azureml.core.compute import ComputeTarget, AmlCompute\n"
        "from azureml.core.compute_target import ComputeTargetException\n"
        "try:\n"
        "    target = ComputeTarget(workspace=ws, name='cpu-cluster')\n"
        "except ComputeTargetException:\n"
        "    config = AmlCompute.provisioning_configuration(vm_size='STANDARD_D2_V2', max_nodes=4)\n"
        "    target = ComputeTarget.create(ws, 'cpu-cluster', config)\n"
        "    target.wait_for_completion(show_output=True)\n",
    ),
    cell("code", "%%bash\necho $(( 1 + ))\n"),
]


def test_a_samples_writefile_cells_and_provisioning_fallback_keep_the_check_green(tmp_path):
    path = tmp_path / "sample.ipynb"
    path.write_text(
        json.dumps({"cells": SAMPLE, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    findings = check_path(path)
    assert not [f for f in findings if f.verdict == REFUSED], findings
    assert not [f for f in findings if f.name == "(syntax)"]  # the YAML and bash are not Python
    by_name = {f.name: f for f in findings}
    assert by_name["Run.get_context()"].path.endswith("(cell 5)")  # the notebook's numbering
    fallback = [
        by_name["AmlCompute.provisioning_configuration()"],
        by_name["ComputeTarget.create()"],
    ]
    for found in fallback:
        assert (found.verdict, found.path.endswith("(cell 6)")) == (DIFFERS, True), found
        assert found.note.startswith(FALLBACK) and "reached, it is refused" in found.note
    done = cli("azureml", "check", str(path), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_provisioning_outside_the_fallback_is_still_refused(tmp_path):
    path = tmp_path / "provision.py"
    path.write_text(
        "from azureml.core.compute import ComputeTarget, AmlCompute\n"
        "config = AmlCompute.provisioning_configuration(vm_size='STANDARD_D2_V2')\n"
        "target = ComputeTarget.create(None, 'cpu-cluster', config)\n"
        "try:\n    pass\nexcept ValueError:\n    ComputeTarget.create(None, 'other', config)\n"
    )
    refused = {(f.line, f.name) for f in check_path(path) if f.verdict == REFUSED}
    assert refused == {
        (2, "AmlCompute.provisioning_configuration()"),
        (3, "ComputeTarget.create()"),
        (7, "ComputeTarget.create()"),
    }, refused


def test_a_job_over_several_nodes_is_predicted_to_need_a_target_with_them(tmp_path):
    """v1's distributed samples ask for ``node_count=2`` of a cluster; here the local target
    runs one node and refuses more at submit, so the check says so where the count is
    written out, and leaves a one-node job as it was."""
    path = tmp_path / "distributed.py"
    path.write_text(
        "from azureml.core.runconfig import MpiConfiguration, PyTorchConfiguration\n"
        "a = PyTorchConfiguration(process_count=2, node_count=2)\n"
        "b = MpiConfiguration(node_count=2)\n"
        "c = PyTorchConfiguration(process_count=2)\n"
        "d = MpiConfiguration(1, 3)\n"
    )
    found = {f.line: f for f in check_path(path) if f.name.endswith("Configuration()")}
    for line, count in ((2, 2), (3, 2), (5, 3)):
        assert found[line].verdict == DIFFERS, found[line]
        assert f"node_count={count}" in found[line].note, found[line]
        assert "the local target" in found[line].note, found[line]
    assert found[4].verdict != REFUSED and "node_count" not in found[4].note, found[4]


def test_azure_plugins_of_other_packages_are_refused_where_they_are_imported(tmp_path):
    """v1's MLflow sample opens with ``import mlflow.azureml`` (the azureml-mlflow plugin),
    which fails here before any v1 call: the check names that line, and leaves mlflow
    itself alone."""
    path = tmp_path / "mlflow_sample.py"
    path.write_text("import mlflow\nimport mlflow.azureml\nfrom mlflow.azureml import deploy\n")
    found = [(f.line, f.verdict) for f in check_path(path)]
    assert found == [(2, REFUSED), (3, REFUSED)], found
    notes = [f.note for f in check_path(path)]
    assert all("azureml-mlflow" in n and "--mlflow" in n for n in notes), notes
