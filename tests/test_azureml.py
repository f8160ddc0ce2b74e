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
from conftest import REPO, leftover
from kube_fake.fixtures import kube_cluster  # noqa: F401 (a fixture)

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
from jupyter_trainer.azureml.errors import ActivityFailedException, UserErrorException
from jupyter_trainer.azureml.train.dnn import Mpi, PyTorch
from jupyter_trainer.core.errors import SpecError

V1 = REPO / "tests" / "azureml_v1"
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
    from test_kube_target import kube_target

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


READ_FOLDER = """
import argparse, hashlib, os
from azureml.core.run import Run
parser = argparse.ArgumentParser()
parser.add_argument("--data-folder")
folder = parser.parse_args().data_folder
for root, _, files in sorted(os.walk(folder)):
    for name in sorted(files):
        path = os.path.join(root, name)
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()[:12]
        print("file", os.path.relpath(path, folder), digest, flush=True)
Run.get_context().log("files", sum(len(f) for _, _, f in os.walk(folder)))
"""


def test_a_dataset_of_several_urls_and_paths_is_read_as_one_folder(home, tmp_path):
    """v1's MNIST tutorial: ``Dataset.File.from_files(path=[url, url, ...])``, registered, then
    mounted. The run reads one folder holding each path under its own name; a URL is
    downloaded once, and a change of a local file is what the next run reads."""
    import hashlib

    from http_servers import Server, Site

    def short(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()[:12]

    site = Site(files={"train-images.gz": b"images" * 1000, "labels.gz": b"lbl"})
    server = Server(site)
    local = tmp_path / "extra.txt"
    local.write_text("first")
    folder = tmp_path / "more"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.bin").write_bytes(b"a")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "read.py").write_text(READ_FOLDER)
    ws = Workspace()
    paths = [server.url("/file/train-images.gz"), server.url("/file/labels.gz"), str(local)]
    dataset = Dataset.File.from_files(path=[*paths, str(folder)]).register(ws, "mnist")
    assert Dataset.get_by_name(ws, "mnist").to_path() == sorted(
        ["/train-images.gz", "/labels.gz", "/extra.txt", "/more"]
    )

    def submit():
        config = ScriptRunConfig(
            source_directory=str(tmp_path / "proj"),
            script="read.py",
            arguments=["--data-folder", Dataset.get_by_name(ws, "mnist").as_mount()],
        )
        run = Experiment(ws, "mnist").submit(config)
        run.wait_for_completion()
        return run

    try:
        first = submit()
        local.write_text("second")
        second = submit()
    finally:
        server.close()
    expected = {
        "train-images.gz": short(b"images" * 1000),
        "labels.gz": short(b"lbl"),
        "more/sub/a.bin": short(b"a"),
    }
    for run, text in ((first, b"first"), (second, b"second")):
        log = run.run.logs(0)
        for name, digest in {**expected, "extra.txt": short(text)}.items():
            assert f"file {name} {digest}" in log, log
        assert run.get_metrics()["files"] == 4
    gets = [r for r in site.requests if r.method == "GET"]
    assert sorted(r.path for r in gets) == ["/file/labels.gz", "/file/train-images.gz"]
    assert dataset.name == "mnist"


def test_a_dataset_of_paths_with_the_same_name_is_refused_naming_both(home, tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "data.csv").write_text(sub)
    dataset = Dataset.File.from_files(
        path=[str(tmp_path / "a" / "data.csv"), str(tmp_path / "b" / "data.csv")]
    )
    with pytest.raises(UserErrorException, match="both named 'data.csv'.*different names"):
        dataset.source
    assert not (home / "runs").exists()


def test_an_estimator_reads_a_datastore_given_with_as_mount(home):
    """v1's estimator pattern ``script_params={'--data-dir': ds.as_mount()}``, with the
    workspace's default datastore and with a path of it: each is a data input named after
    the datastore (and path), read where it is."""
    ws = Workspace()
    ds = ws.get_default_datastore()
    ds.upload(src_dir=str(DATA), target_path="numbers", show_progress=False)
    for reference, name in (
        (ds.path("numbers").as_mount(), "workspaceblobstore_numbers"),
        (ds.path("numbers", data_reference_name="numbers").as_download(), "numbers"),
    ):
        estimator = PyTorch(
            source_directory=str(PROJ),
            compute_target="local",
            entry_script="train.py",
            script_params={"--data-dir": reference, "--epochs": 3},
        )
        run = Experiment(ws, "datastore").submit(estimator)
        run.wait_for_completion()
        assert run.run.spec.code.args[:2] == ("--data-dir", f"${{{{data.{name}}}}}")
        check_reported(run, ranks=1, datasets=(name,))
    with pytest.raises(UserErrorException, match="does not exist"):
        ds.path("missing").as_mount()
    whole = ds.as_mount()
    assert whole.name == "workspaceblobstore" and whole.dataset.source == str(ds.root.resolve())


REGISTERS = """
import os, sys
from azureml.core.run import Run
run = Run.get_context()
os.makedirs("outputs", exist_ok=True)
with open("outputs/model.pt", "w") as f:
    f.write("weights")
model = run.register_model(model_name="pt-dnn", model_path="outputs/model.pt",
                           tags={"area": "birds"}, description="from the script")
print("asked", model.name, model.version, flush=True)
from azureml.core.model import Model
with open("scaler.bin", "w") as f:
    f.write("scaler")
Model.register(workspace=run.experiment.workspace, model_path="scaler.bin", model_name="scaler")
if "--fail" in sys.argv:
    raise SystemExit(2)
"""


def test_a_model_the_script_registers_lands_in_the_registry_once_the_run_completes(home, tmp_path):
    """``run.register_model`` and ``Model.register`` inside an unchanged v1 script: the
    notebook's ``wait_for_completion`` registers them, once, with the run's lineage; a
    failed run registers nothing."""
    from jupyter_trainer.api.models import models
    from jupyter_trainer.azureml.core import Model

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "register.py").write_text(REGISTERS)
    ws = Workspace()

    def submit(*arguments):
        config = ScriptRunConfig(
            source_directory=str(tmp_path / "proj"), script="register.py", arguments=arguments
        )
        return Experiment(ws, "registers").submit(config)

    failed = submit("--fail")
    with pytest.raises(ActivityFailedException):
        failed.wait_for_completion()
    assert models(home=home) == []
    run = submit()
    run.wait_for_completion()
    assert "asked pt-dnn None" in run.run.logs(0)
    run.wait_for_completion()  # a second wait registers nothing more
    (version,) = models("pt-dnn", home=home)
    assert version.lineage["run_id"] == run.id and version.version == 1
    assert version.tags["area"] == "birds" and version.tags["description"] == "from the script"
    assert Model(ws, "pt-dnn").version == 1
    (scaler,) = models("scaler", home=home)  # Model.register in the script: copied to outputs/
    assert scaler.lineage["source"] == "registered/scaler/scaler.bin"
    assert scaler.path.read_text() == "scaler"
    assert not any(k.startswith("azureml.") for k in run.get_tags())


USES_THE_DATASET = """
import os
from azureml.core.run import Run
run = Run.get_context()
dataset = run.input_datasets["numbers"]
print("paths", dataset.to_path())
print("copied", [os.path.relpath(p) for p in dataset.download(target_path="copy", overwrite=True)])
with dataset.mount() as context:
    print("mounted", sorted(os.listdir(context.mount_point)))
print("is a path", os.path.isdir(dataset))
run.upload_file(name="outputs/copy.txt", path_or_stream="copy/numbers.txt", datastore_name="x")
"""


def test_a_dataset_given_as_it_is_offers_download_mount_and_to_path_in_the_script(home, tmp_path):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "uses.py").write_text(USES_THE_DATASET)
    config = ScriptRunConfig(
        source_directory=str(tmp_path / "proj"),
        script="uses.py",
        arguments=[Dataset.File.from_files(path=str(DATA)).as_named_input("numbers")],
    )
    run = Experiment(Workspace(), "direct").submit(config)
    run.wait_for_completion()
    log = run.run.logs(0)
    assert "paths ['/numbers.txt']" in log and "copied ['copy/numbers.txt']" in log
    assert "mounted ['numbers.txt']" in log and "is a path True" in log
    assert (run.run.outputs / "copy.txt").read_text() == (DATA / "numbers.txt").read_text()


@pytest.mark.parametrize(
    "leaf",
    ["..%2F..%2Fescaped.txt", "%2E%2E", "a%5Cb", "%00x"],
    ids=["slash", "dots", "backslash", "nul"],
)
def test_a_url_whose_decoded_name_leaves_the_folder_is_refused(leaf, home, tmp_path):
    """The name a URL gives its file in the gathered folder is decoded: one that would step
    out of the folder (or is no name) is refused, and nothing is written outside it."""
    (tmp_path / "a.txt").write_text("a")
    dataset = Dataset.File.from_files(
        path=[f"http://127.0.0.1:9/data/{leaf}", str(tmp_path / "a.txt")]
    )
    with pytest.raises(UserErrorException, match="does not end in a file or folder name"):
        dataset.source
    assert not list(home.rglob("escaped.txt"))
