"""v2 job YAML files run through ``jupyter-trainer azure job create`` as ``az ml job create
--file`` runs them: the distributed job of ``azure_v2/job.yml`` on two torchrun ranks, a
shell command with literal and datastore inputs, environment variables and an output, and a
failing job whose stream raises as v2's does."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import REPO, leftover
from support.jt_cli import cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.azure.ai.ml import Input, MLClient, Output, command, load_job
from jupyter_trainer.azure.ai.ml.exceptions import JobException

V2 = REPO / "tests" / "support" / "azure_v2"


def created(done) -> dict:
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return json.loads(done.stdout[: done.stdout.index("\n}\n") + 2])


def test_the_job_yaml_runs_on_two_ranks_and_its_output_downloads(home, tmp_path):
    shutil.copytree(V2, tmp_path / "v2")
    assert cli("target", "add", "cpu-cluster", "--kind", "local", home=home).returncode == 0
    done = cli(
        "azure", "job", "create", "--file", "v2/job.yml", "--stream", home=home, cwd=tmp_path
    )
    job = created(done)
    run = api.get_run(job["name"], home=home)
    assert job["status"] in ("NotStarted", "Preparing", "Queued", "Running")
    assert run.status == "completed" and run.spec.target.name == "cpu-cluster"
    assert (run.spec.launch.launcher, run.spec.launch.procs) == ("torchrun", 2)
    assert run.spec.name == "numbers-yaml" and "rank 0 of 2 epoch 2" in done.stdout
    assert "Execution Summary" in done.stdout
    assert "rank 1 of 2 epoch 2" in run.logs(1)
    got = cli(
        "azure", "job", "download", "--name", run.id, "--output-name", "model",
        "--download-path", "dl", home=home, cwd=tmp_path,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    saved = torch.load(tmp_path / "dl" / "named-outputs" / "model" / "model.pt")
    assert saved["weight"].shape == (1,)
    shown = cli("azure", "job", "show", "--name", run.id, home=home)
    assert json.loads(shown.stdout)["status"] == "Completed"
    assert leftover(run.id) == []


HELLO = """\
$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json
command: |
  echo ${{inputs.greeting}} $hello_env_var > ${{outputs.hello}}/hello.txt
  cat ${{inputs.numbers}}/numbers.txt >> ${{outputs.hello}}/hello.txt
  echo epochs ${{inputs.epochs}}$[[ optional ${{inputs.missing}}]]
inputs:
  greeting: "it's a 'quoted' hello"
  epochs: 2
  numbers:
    type: uri_folder
    path: azureml://datastores/workspaceblobstore/paths/numbers/
outputs:
  hello:
    type: uri_folder
environment:
  image: library/python:latest
environment_variables:
  hello_env_var: "from the job"
compute: azureml:cpu-cluster
"""


def test_a_shell_command_with_literal_and_datastore_inputs_env_vars_and_an_output(home, tmp_path):
    numbers = home / "datastore" / "workspaceblobstore" / "numbers"
    numbers.mkdir(parents=True)
    (numbers / "numbers.txt").write_text("1\n2\n")
    (tmp_path / "hello.yml").write_text(HELLO)
    (tmp_path / "config.json").write_text(
        json.dumps({"workspace_name": "ws", "jupyter_trainer_home": str(home)})
    )
    client = MLClient.from_config(path=tmp_path)
    assert client.workspace.home == home and client.workspace_name == "ws"
    with pytest.warns(UserWarning, match="library/python:latest"):
        job = client.jobs.create_or_update(
            load_job(tmp_path / "hello.yml", params_override=[{"compute": "local"}])
        )
    client.jobs.stream(job.name)
    run = api.get_run(job.name, home=home)
    text = (run.outputs / "hello" / "hello.txt").read_text()
    assert text == "it's a 'quoted' hello from the job\n1\n2\n"
    assert "epochs 2\n" in run.logs(0) and "optional" not in run.logs(0)
    assert client.jobs.get(job.name).status == "Completed"


def test_a_failing_command_fails_its_stream_with_job_exception(home, tmp_path):
    client = MLClient()
    job = client.jobs.create_or_update(
        command(command="python -c \"import sys; print('going down'); sys.exit(3)\"")
    )
    with pytest.raises(JobException, match=f"job {job.name} ended Failed"):
        client.jobs.stream(job.name)
    assert "going down" in api.get_run(job.name, home=home).logs(0)


def test_a_jobs_outputs_feed_the_next_job_by_their_path(home, tmp_path, monkeypatch):
    """As v2's two-step samples do: the first job writes an output given a datastore path
    (copied there when it completes), the second reads ``returned_job.outputs.NAME.path``;
    an output without a path is read as ``azureml://jobs/JOB/outputs/NAME``."""
    monkeypatch.chdir(tmp_path)
    client = MLClient()
    store = "azureml://subscriptions/s/resourcegroups/r/workspaces/w/datastores/workspaceblobstore"
    first = client.jobs.create_or_update(
        command(
            command="echo 5 > ${{outputs.numbers}}/n.txt && echo 6 > ${{outputs.other}}/n.txt",
            outputs={
                "numbers": Output(type="uri_folder", path=f"{store}/paths/NUMBERS"),
                "other": Output(type="uri_folder"),
            },
        )
    )
    client.jobs.stream(first.name)
    first = client.jobs.get(first.name)
    assert (home / "datastore" / "workspaceblobstore" / "NUMBERS" / "n.txt").read_text() == "5\n"
    assert first.outputs.other.path == f"azureml://jobs/{first.name}/outputs/other"
    second = client.jobs.create_or_update(
        command(
            command="cat ${{inputs.a}}/n.txt ${{inputs.b}}/n.txt",
            inputs={
                "a": Input(type="uri_folder", path=first.outputs.numbers.path),
                "b": Input(type="uri_folder", path=first.outputs.other.path),
            },
        )
    )
    client.jobs.stream(second.name)
    assert api.get_run(second.name, home=home).logs(0) == "5\n6\n"


def test_the_job_yaml_on_two_ssh_nodes(pair, home, tmp_path):
    """The same job file with its compute pointed at an ssh target of two hosts and
    ``instance_count: 2``: one torchrun process on each node, as v2 ran it on two VMs."""
    shutil.copytree(V2, tmp_path / "v2")
    done = cli(
        "azure", "job", "create", "--file", "v2/job.yml", "--stream",
        "--set", "compute=pair", "--set", "resources.instance_count=2",
        "--set", "distribution.process_count_per_instance=1",
        home=home, cwd=tmp_path,
    )  # fmt: skip
    run = api.get_run(created(done)["name"], home=home)
    assert run.status == "completed" and run.spec.target.name == "pair"
    assert (run.spec.launch.nodes, run.spec.launch.procs) == (2, 1)
    assert "rank 1 of 2 epoch 2" in run.logs(1)
    assert (run.outputs / "model" / "model.pt").is_file()
    assert leftover(run.id) == []
